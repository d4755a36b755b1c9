import { existsSync, lstatSync, readlinkSync } from "node:fs";

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
  if (!p) throw new Error(`${name} not found: install it (e.g. \`apt-get install ${pkg}\`), then run \`minisandbox doctor\``);
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
    let st;
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
