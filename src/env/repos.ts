import { existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { runOk } from "../util/run.js";
import { InvalidInputError, NotFoundError } from "../errors.js";

/**
 * Where a repository's history comes from: `--repos DIR` (local clones or bare mirrors at DIR/<owner>/<name>[.git]),
 * else a mirror in the home cloned once from GitHub.
 */
export async function repoSource(repo: string, opts: { reposDir?: string; home: string }): Promise<string> {
  if (!/^[\w.-]+\/[\w.-]+$/.test(repo))
    throw new InvalidInputError(`invalid repository name ${JSON.stringify(repo)} (expected owner/name)`);
  if (opts.reposDir) {
    for (const candidate of [join(opts.reposDir, repo), join(opts.reposDir, `${repo}.git`)]) {
      if (existsSync(candidate)) return candidate;
    }
    throw new NotFoundError(
      `repository ${repo} not found under --repos ${opts.reposDir} (looked for ${repo} and ${repo}.git)`,
    );
  }
  const mirror = join(opts.home, "repos", `${repo}.git`);
  if (!existsSync(mirror)) {
    mkdirSync(dirname(mirror), { recursive: true });
    const tmp = `${mirror}.tmp-${process.pid}`;
    await runOk("git", ["clone", "--mirror", "--quiet", `https://github.com/${repo}.git`, tmp]);
    await runOk("mv", [tmp, mirror]);
  }
  return mirror;
}

/**
 * A real checkout at `commit` with history, made like SWE-bench images: clone, hard reset, no remote. A local
 * clone hard-links the source's packs, so checkouts of one repository share them (and the store dedups them).
 */
export async function checkoutTestbed(source: string, commit: string, dest: string): Promise<void> {
  await runOk("git", ["clone", "--quiet", "--no-checkout", source, dest]);
  const git = (...args: string[]): Promise<string> => runOk("git", ["-C", dest, ...args]);
  const resolved = (await git("rev-parse", "--verify", "--quiet", `${commit}^{commit}`).catch(() => "")).trim();
  if (!resolved) throw new NotFoundError(`commit ${commit} not found in ${source}`);
  await git("checkout", "--quiet", "--detach", resolved);
  await git("remote", "remove", "origin");
  // Only mtime and size decide whether a file changed: materialized files get new inodes and ctimes.
  await git("config", "core.checkStat", "minimal");
  await git("config", "core.trustctime", "false");
  await git("config", "user.email", "minisandbox@localhost");
  await git("config", "user.name", "minisandbox");
}
