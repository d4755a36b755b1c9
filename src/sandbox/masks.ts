import { existsSync, lstatSync, statSync, type Stats } from "node:fs";

/** A host path hidden inside every sandbox: a file behind /dev/null, a directory behind an empty one. */
export interface MaskedPath {
  path: string;
  kind: "file" | "dir";
}

/** /proc entries that stay visible but read-only (Docker's list): the kernel's knobs and triggers. */
const PROC_READ_ONLY = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"];

/** /proc entries hidden outright: Docker's list, plus the kernel log, the key list and raw page maps. */
const PROC_MASKED = [
  "/proc/kcore",
  "/proc/keys",
  "/proc/key-users",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/latency_stats",
  "/proc/interrupts",
  "/proc/kmsg",
  "/proc/kpagecount",
  "/proc/kpageflags",
  "/proc/kpagecgroup",
  "/proc/acpi",
  "/proc/asound",
  "/proc/scsi",
];

function kindOf(st: Stats): MaskedPath["kind"] | undefined {
  if (st.isDirectory()) return "dir";
  if (st.isFile() || st.isCharacterDevice()) return "file";
  return undefined;
}

let procCache: { readOnly: string[]; masked: MaskedPath[] } | undefined;

/** The /proc entries of this kernel to cover (those that do not exist here are skipped: bwrap cannot mount on them). */
export function procCover(): { readOnly: string[]; masked: MaskedPath[] } {
  if (procCache) return procCache;
  const masked: MaskedPath[] = [];
  for (const path of PROC_MASKED) {
    try {
      const kind = kindOf(lstatSync(path));
      if (kind) masked.push({ path, kind });
    } catch {
      /* not on this kernel */
    }
  }
  // /proc/1 is pid 1's own entry, hidden: not the sandbox's to write (its OOM score above all: raised, it would make
  // the sandbox's own OOM killer take pid 1, and with it the whole sandbox), nor to read (pid 1 outlives a restore,
  // and its counters — the CPU time and context switches of reaping orphans — would carry what ran before it).
  masked.push({ path: "/proc/1", kind: "dir" });
  procCache = { readOnly: PROC_READ_ONLY.filter((p) => existsSync(p)), masked };
  return procCache;
}

/**
 * The tree whose non-world-readable entries are masked: shadow and gshadow, SSH host keys, sudoers, private TLS keys,
 * service credentials. The sandbox sees /etc read-only; these it does not see at all, whatever uid it maps to. pid 1
 * walks it (`msb-helper init --mask-unreadable`) before anything runs and reports what it masked, which the next
 * sandboxes of this process reuse for a minute.
 */
export const SECRETS_ROOT = "/etc";

let etcCache: { at: number; masked: MaskedPath[] } | undefined;
const ETC_RESCAN_MS = 60_000;

/** /etc's secrets as a pid 1 of this process found them less than a minute ago; else undefined (walk again). */
export function knownEtcSecrets(now = Date.now()): MaskedPath[] | undefined {
  return etcCache && now - etcCache.at < ETC_RESCAN_MS ? etcCache.masked : undefined;
}

/**
 * pid 1's report of its walk (`f` or `d`, an absolute path under /etc, NUL; then `R`), kept for the next sandboxes.
 * It is written before anything of the sandbox runs; a report that does not parse is not kept (the next pid 1
 * walks again).
 */
export function rememberEtcSecrets(report: string, now = Date.now()): void {
  const entries = report.split("\0");
  if (entries.pop() !== "R") return;
  const masked: MaskedPath[] = [];
  for (const e of entries) {
    const kind = e[0] === "f" ? "file" : e[0] === "d" ? "dir" : undefined;
    const path = e.slice(1);
    if (!kind || !path.startsWith(`${SECRETS_ROOT}/`)) return;
    masked.push({ path, kind });
  }
  etcCache = { at: now, masked };
}

/**
 * Files of /etc that are world-readable by convention yet may hold an operator's credentials: pip's site-wide
 * configuration (an index URL with a token), in /etc and in each configuration directory of XDG_CONFIG_DIRS under
 * /etc (default /etc/xdg). Every sandbox on the host's /etc sees them empty: what pip takes from them reaches builds
 * as PIP_* variables (src/env/pip-config.ts), agents and evaluations only its local part.
 */
export function operatorConfigFiles(env: NodeJS.ProcessEnv = process.env): MaskedPath[] {
  const dirs = (env.XDG_CONFIG_DIRS || "/etc/xdg").split(":").filter((d) => d.startsWith(`${SECRETS_ROOT}/`));
  const files = new Set([`${SECRETS_ROOT}/pip.conf`, ...dirs.map((d) => `${d.replace(/\/+$/, "")}/pip/pip.conf`)]);
  return [...files]
    .filter((f) => statSync(f, { throwIfNoEntry: false })?.isFile())
    .map((path) => ({ path, kind: "file" }));
}
