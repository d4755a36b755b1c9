/**
 * `minisandbox dashboard`: the address of a running server's dashboard, signed in: the token rides in the URL's
 * fragment, which the browser never sends to the server (the page moves it to the tab's sessionStorage). `--open`
 * hands the browser a local page (mode 0600, beside the token file) that forwards there, so the token never shows
 * in a process list.
 */
import type { Command } from "commander";
import { chmodSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { InvalidInputError } from "../errors.js";
import { fail, openInBrowser } from "./common.js";

const DEFAULT_URL = "http://127.0.0.1:8000";

/** The signed-in address of `base`'s dashboard. */
export function dashboardUrl(base: string, token: string | undefined): string {
  const url = `${base.replace(/\/+$/, "")}/dashboard/`;
  return token ? `${url}#token=${encodeURIComponent(token)}` : url;
}

async function reachable(base: string): Promise<boolean> {
  try {
    return (await fetch(`${base.replace(/\/+$/, "")}/healthz`, { signal: AbortSignal.timeout(3000) })).ok;
  } catch {
    return false;
  }
}

/** A page that forwards to `url`, readable by its owner only. */
async function launcher(home: string, url: string): Promise<string> {
  const [{ escapeHtml }, { tokenFilePath }] = await Promise.all([
    import("../view/html.js"),
    import("../wire/token-file.js"),
  ]);
  const path = join(dirname(tokenFilePath(home)), "dashboard.html");
  const target = escapeHtml(url);
  writeFileSync(
    path,
    `<!doctype html><meta http-equiv="refresh" content="0;url=${target}"><a href="${target}">dashboard</a>\n`,
    {
      mode: 0o600,
    },
  );
  chmodSync(path, 0o600);
  return path;
}

export function registerDashboardCommand(program: Command, getHome: () => string): void {
  program
    .command("dashboard")
    .description("print the signed-in address of a running server's dashboard (token from its token file)")
    .option("--url <URL>", `the server (default: $MINISANDBOX_URL, else ${DEFAULT_URL})`)
    .option("--open", "open it in a browser")
    .action(async (opts: { url?: string; open?: boolean }) => {
      try {
        const base = opts.url ?? (process.env.MINISANDBOX_URL || DEFAULT_URL); // set but empty: not set
        if (!/^https?:\/\//.test(base)) throw new InvalidInputError(`--url ${base}: expected http://HOST:PORT`);
        const { readTokenFile, tokenFilePath } = await import("../wire/token-file.js");
        const token = process.env.MINISANDBOX_API_KEY || readTokenFile(getHome());
        if (!(await reachable(base)))
          process.stderr.write(`minisandbox: warning: no server answers at ${base} (start one: minisandbox serve)\n`);
        if (!token)
          process.stderr.write(`minisandbox: no token in ${tokenFilePath(getHome())}: the page will ask for one\n`);
        const url = dashboardUrl(base, token);
        process.stdout.write(`${url}\n`);
        if (opts.open) openInBrowser(token ? await launcher(getHome(), url) : url);
      } catch (e) {
        fail(e);
      }
    });
}
