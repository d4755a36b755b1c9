/**
 * What a fresh sandbox's user finds: non-interactive defaults in every command's environment (agents read output,
 * nobody pages) and the usual dotfiles in the private home (tools source `~/.bashrc` as a matter of course).
 */

/** Defaults under every command and session; the caller's `env` wins over each of them. */
export function defaultCommandEnv(network: boolean): Record<string, string> {
  const env: Record<string, string> = { PAGER: "cat", GIT_PAGER: "cat", MANPAGER: "cat", SYSTEMD_PAGER: "cat" };
  // Without network, pip's five retries per package only add waiting before the same failure.
  if (!network) Object.assign(env, { PIP_RETRIES: "0", PIP_DISABLE_PIP_VERSION_CHECK: "1" });
  return env;
}

/**
 * Skeleton dotfiles of a fresh home (written by the launch, before anything runs; a fork keeps its parent's): silent
 * (sourcing them prints nothing) and harmless to source twice.
 */
export const HOME_DOTFILES: Readonly<Record<string, string>> = {
  ".bashrc":
    "# ~/.bashrc: sourced by interactive bash and by tools that start sessions with it.\n" +
    "# Agents read output: never wait in a pager.\n" +
    'for v in PAGER GIT_PAGER MANPAGER; do [ -n "$(eval echo "\\$$v")" ] || export "$v=cat"; done\n',
  ".profile":
    "# ~/.profile: login shells.\n" +
    'if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi\n',
};
