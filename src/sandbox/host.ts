import { accessSync, constants, existsSync, lstatSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { InvalidInputError, SandboxError } from "../errors.js";

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

let helper: string | undefined;

/**
 * The native helper (native/msb-helper.c, built into dist/native by `npm run build`): it launches sandboxes and
 * enters them, and does the security-critical steps (user namespace, id-mapped mounts, seccomp, dropping
 * capabilities). There is no way to start a sandbox without it.
 */
export function helperPath(): string {
  if (helper) return helper;
  const candidate = join(import.meta.dirname, "..", "..", "native", "msb-helper");
  try {
    accessSync(candidate, constants.X_OK);
  } catch {
    throw new SandboxError(
      `the native helper ${candidate} is missing: run \`npm run build\` (it needs gcc, libc6-dev and libseccomp-dev)`,
    );
  }
  helper = candidate;
  return candidate;
}

/** Host ids that ids 0..count-1 inside map to, when minisandbox runs as root. */
export interface IdRange {
  base: number;
  count: number;
  /** Where the range came from: the environment, /etc/subuid, or the built-in default. */
  source: string;
}

/** The user whose /etc/subuid and /etc/subgid entries reserve the range (the system-deps script adds them). */
export const SUBID_USER = "minisandbox";
/** Used when nothing is configured: far above the ranges `useradd` hands out (100000 + 65536·n). */
export const DEFAULT_ID_RANGE = { base: 1_879_048_192, count: 65_536 };

function subidEntry(file: string): { base: number; count: number } | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n")) {
    const [name, base, count] = line.trim().split(":");
    if (name === SUBID_USER && base && count) return { base: Number(base), count: Number(count) };
  }
  return undefined;
}

function checkRange(r: { base: number; count: number }, source: string): IdRange {
  const ok = (n: number): boolean => Number.isSafeInteger(n) && n > 0;
  if (!ok(r.base) || !ok(r.count) || r.base + r.count > 0xffff_ffff) {
    throw new InvalidInputError(`${source}: invalid id range ${r.base}:${r.count}`);
  }
  return { ...r, source };
}

/**
 * The id range of root-mode sandboxes: `MINISANDBOX_IDMAP=BASE:COUNT`, else the `minisandbox` entry of /etc/subuid
 * (with the same in /etc/subgid), else DEFAULT_ID_RANGE. Never host id 0: root inside is an unprivileged id outside.
 */
export function idRange(): IdRange {
  const env = process.env.MINISANDBOX_IDMAP;
  if (env) {
    const [base, count] = env.split(":").map(Number);
    return checkRange({ base: base ?? Number.NaN, count: count ?? Number.NaN }, "MINISANDBOX_IDMAP");
  }
  const uid = subidEntry("/etc/subuid");
  const gid = subidEntry("/etc/subgid");
  if (uid && gid && uid.base === gid.base && uid.count === gid.count) return checkRange(uid, "/etc/subuid");
  return { ...DEFAULT_ID_RANGE, source: "default" };
}

/** Whom a sandbox's root is on the host: the start of the id range as root, else the caller itself. */
export function sandboxRootOnHost(): { uid: number; gid: number } {
  if (launchMode() === "root") {
    const { base } = idRange();
    return { uid: base, gid: base };
  }
  return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
}
