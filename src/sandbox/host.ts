import { spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, lstatSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { InvalidInputError, SandboxError } from "../errors.js";
import { configuredIdRange } from "../util/subid.js";

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

/**
 * Read once per process: a launch clones them by index and a later restore rebuilds the same tree, so both must see
 * one list (and a start saves the lookups).
 */
export function systemEntries(): SystemEntry[] {
  systemTrees ??= readSystemEntries();
  return systemTrees;
}

let systemTrees: SystemEntry[] | undefined;

function readSystemEntries(): SystemEntry[] {
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
let facts: Record<string, string> | undefined;

/** What this kernel and the helper support (`msb-helper check`: seccomp, id-mapped mounts, Landlock...), once. */
export function helperFacts(): Record<string, string> {
  if (facts) return facts;
  const r = spawnSync(helperPath(), ["check"], { encoding: "utf8", timeout: 10_000 });
  facts = Object.fromEntries(
    (r.stdout ?? "")
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ") as [string, string]),
  );
  return facts;
}

/** Landlock can keep a sandbox with the host's network from its abstract unix sockets (ABI 6, Linux 6.12). */
export function abstractSocketsScoped(): boolean {
  return Number(helperFacts().landlock_abi ?? 0) >= 6;
}

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

/**
 * The host ids root-mode sandboxes run as: `slots` ranges of `size` ids from `base`. Each live sandbox (a fork's
 * child too) takes a free range of its own for its life (`msb-helper launch` holds it with a lock under
 * ID_LOCKS_DIR), so per-user kernel quotas, signals and /proc are its own. A pool of one range is shared by every
 * sandbox (an old reservation of 65536 ids, or MINISANDBOX_IDMAP with one range).
 */
export interface IdPool {
  base: number;
  /** Ids per sandbox: uids and gids 0..size-1 inside. */
  size: number;
  slots: number;
  /** Where the pool came from: the environment, /etc/subuid, or the built-in default. */
  source: string;
}

/** The user whose /etc/subuid and /etc/subgid entries reserve the pool (the system-deps script adds them). */
export const SUBID_USER = "minisandbox";
/** Ids of one sandbox: every uid and gid an image may use (0..65535). */
export const IDS_PER_SANDBOX = 65_536;
/**
 * Used when nothing is configured, and what scripts/install-system-deps.sh reserves: from 0x70000000, above the
 * ranges `useradd` hands out (100000 + 65536·n) and systemd's container range (up to 0x6FFFFFFF), up to 0x7FFE0000,
 * below systemd's foreign range and 2^31 (ids some tools read as signed): 4094 sandboxes at once.
 */
export const DEFAULT_ID_POOL = { base: 1_879_048_192, size: IDS_PER_SANDBOX, slots: 4094 };
/** Where `msb-helper launch` takes the lock of each range in use (shared by every process on the host). */
export const ID_LOCKS_DIR = "/run/minisandbox/ids";

/** A reservation of `count` ids as a pool: ranges of 65536 ids, or one smaller range shared by all. */
function poolOf(r: { base: number; count: number }, source: string): IdPool {
  const ok = (n: number): boolean => Number.isSafeInteger(n) && n > 0;
  if (!ok(r.base) || !ok(r.count) || r.base + r.count > 0xffff_ffff) {
    throw new InvalidInputError(`${source}: invalid id range ${r.base}:${r.count}`);
  }
  const slots = Math.floor(r.count / IDS_PER_SANDBOX);
  if (slots === 0) return { base: r.base, size: r.count, slots: 1, source };
  return { base: r.base, size: IDS_PER_SANDBOX, slots, source };
}

/**
 * The id pool of root-mode sandboxes: `MINISANDBOX_IDMAP=BASE:COUNT`, else the `minisandbox` entry of /etc/subuid
 * (with the same in /etc/subgid), else DEFAULT_ID_POOL. Never host id 0: root inside is an unprivileged id outside.
 */
export function idPool(): IdPool {
  const r = configuredIdRange("MINISANDBOX_IDMAP", SUBID_USER);
  return r ? poolOf(r, r.source) : { ...DEFAULT_ID_POOL, source: "default" };
}

/** The host ids a sandbox's root-mode launch maps to: one range of the pool taken for it, or the one shared range. */
export function idPoolArgs(pool: IdPool): string[] {
  if (pool.slots === 1) return ["--idmap", `${pool.base}:${pool.size}`];
  return ["--idmap-pool", `${pool.base}:${pool.slots}:${pool.size}`, "--id-locks", ID_LOCKS_DIR];
}

/** Whom a sandbox's root is on the host: the first host uid and gid its ids map to, and how many ids it has. */
export interface HostIds {
  uid: number;
  gid: number;
  count: number;
}

/** The host ids a running process's root maps to (the first lines of its id maps), or undefined without maps. */
export function rootOnHostOf(pid: number): HostIds | undefined {
  const first = (file: string): number[] => {
    const [inside, outside, count] = readFileSync(`/proc/${pid}/${file}`, "utf8").trim().split(/\s+/).map(Number);
    return inside === 0 && outside !== undefined && count ? [outside, count] : [];
  };
  try {
    const [uid, count] = first("uid_map");
    const [gid] = first("gid_map");
    return uid !== undefined && gid !== undefined && count ? { uid, gid, count } : undefined;
  } catch {
    return undefined;
  }
}
