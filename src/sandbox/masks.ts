import { existsSync, lstatSync, readdirSync, type Stats } from "node:fs";
import { join } from "node:path";

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

let etcCache: { at: number; masked: MaskedPath[] } | undefined;
const ETC_RESCAN_MS = 60_000;

/**
 * Everything under /etc that its owner keeps from other users (no read bit for "other"): shadow and gshadow, SSH host
 * keys, sudoers, private TLS keys, service credentials. The sandbox sees /etc read-only; these it does not see at all,
 * whatever uid it maps to. Rescanned at most once a minute.
 */
export function etcSecrets(root = "/etc"): MaskedPath[] {
  if (root === "/etc" && etcCache && Date.now() - etcCache.at < ETC_RESCAN_MS) return etcCache.masked;
  const masked: MaskedPath[] = [];
  const walk = (dir: string): void => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const path = join(dir, name);
      let st: Stats;
      try {
        st = lstatSync(path);
      } catch {
        continue;
      }
      const kind = kindOf(st);
      if (!kind) continue;
      const hidden = (st.mode & 0o004) === 0 || (kind === "dir" && (st.mode & 0o001) === 0);
      if (hidden) masked.push({ path, kind });
      else if (kind === "dir") walk(path);
    }
  };
  walk(root);
  if (root === "/etc") etcCache = { at: Date.now(), masked };
  return masked;
}
