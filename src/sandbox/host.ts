import { accessSync, constants, existsSync, lstatSync, readlinkSync } from "node:fs";
import { join } from "node:path";

/** How sandboxes are launched on this host. */
export type LaunchMode = "root" | "userns";

export function launchMode(): LaunchMode {
  return process.getuid?.() === 0 ? "root" : "userns";
}

/** Find an executable on the usual system paths (we never trust the caller's PATH for these). */
export function findTool(name: string): string | undefined {
  for (const dir of ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]) {
    const p = `${dir}/${name}`;
    if (existsSync(p)) return p;
  }
  return undefined;
}

export function requireTool(name: string, pkg = name): string {
  const p = findTool(name);
  if (!p)
    throw new Error(`${name} not found: install it (e.g. \`apt-get install ${pkg}\`), then run \`minisandbox doctor\``);
  return p;
}

/** The host system directories every sandbox sees read-only: bind them, or recreate them as symlinks (merged /usr). */
export interface SystemEntry {
  path: string;
  symlinkTo?: string;
}

export function systemEntries(): SystemEntry[] {
  const out: SystemEntry[] = [];
  for (const path of ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"]) {
    let st: import("node:fs").Stats;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) out.push({ path, symlinkTo: readlinkSync(path) });
    else if (st.isDirectory()) out.push({ path });
  }
  return out;
}

let helper: string | null | undefined;

/**
 * The native helper (native/msb-helper.c, built into dist/native by `npm run build`) that launches sandboxes and
 * enters them in one exec each. `MINISANDBOX_HELPER=off` forces the util-linux fallback; another value is a path.
 * Undefined when it is missing: callers then use the fallback chain (unshare/sh/nsenter/setpriv/env).
 */
export function helperPath(): string | undefined {
  if (helper !== undefined) return helper ?? undefined;
  const setting = process.env.MINISANDBOX_HELPER;
  const candidate =
    setting && setting !== "off" ? setting : join(import.meta.dirname, "..", "..", "native", "msb-helper");
  let found: string | null = null;
  if (setting !== "off") {
    try {
      accessSync(candidate, constants.X_OK);
      found = candidate;
    } catch {
      if (setting) throw new Error(`MINISANDBOX_HELPER=${setting}: not an executable file`);
    }
  }
  helper = found;
  return found ?? undefined;
}
