import { basename, dirname } from "node:path";
import { InvalidInputError } from "../errors.js";
import { systemEntries } from "./host.js";
import { etcSecrets, type MaskedPath, procCover } from "./masks.js";

/** Where a sandbox's workspace directory (`dir`) is mounted. */
export const TESTBED_PATH = "/testbed";

/** A directory tree mounted copy-on-write: the sandbox reads and writes it; the lower dirs never change. */
export interface OverlayMount {
  /** Host directories, topmost first (a layer stack). */
  lower: string[];
  /**
   * Directories written by a sandbox (a fork's snapshots of its parents' upper dirs), topmost first, stacked above
   * `lower`. Their files carry the ids of the sandbox that wrote them: mapped from its range onto the new one's.
   */
  sandboxLowers?: SandboxLower[];
  /** Path inside the sandbox. */
  target: string;
}

/**
 * A tree whose files belong to an id range of their own, and the first host id of that range (root mode): one a
 * sandbox wrote (a fork's snapshot: that sandbox's range), or an image's root filesystem (the store's range).
 */
export interface SandboxLower {
  path: string;
  owner?: number;
}

/** `[OWNER@]PATH`, as msb-helper reads a tree owned by a sandbox's id range. */
export function ownedPath(l: SandboxLower): string {
  return l.owner === undefined ? l.path : `${l.owner}@${l.path}`;
}

/** A plain bind mount of a host directory. */
export interface BindMount {
  source: string;
  target: string;
  readOnly: boolean;
}

/** Everything a sandbox's filesystem and namespaces are made of. */
export interface MountPlan {
  hostname: string;
  network: boolean;
  /**
   * Copy-on-write trees. One whose target is `/` (first, if any) is the sandbox's whole root (an image's): then no
   * host system directory is shown, the host's /etc is not masked (it is not there), and no private home is mounted
   * over the image's own.
   */
  overlays: OverlayMount[];
  binds: BindMount[];
  /** Host directories bind-mounted read-only at their own path (interpreters). */
  toolchains: string[];
  /** Home directory inside (private, writable). */
  home: string;
  /** Host directory with control files, read-only inside at CONTROL_PATH. */
  controlDir: string;
  cwd: string;
}

export const CONTROL_PATH = "/run/minisandbox";
/** Where the native helper is bound read-only to serve as the sandbox's pid 1 (`ps` shows `sandbox-init`). */
export const INIT_PATH = "/run/sandbox-init";

/** Capabilities root keeps inside a sandbox: Docker's default set, nothing that mounts or reaches the kernel. */
export const SANDBOX_CAPS = [
  "chown",
  "dac_override",
  "fowner",
  "fsetid",
  "kill",
  "setgid",
  "setuid",
  "setpcap",
  "net_bind_service",
  "net_raw",
  "sys_chroot",
  "mknod",
  "audit_write",
  "setfcap",
];

// Paths end up inside overlay mount options and a shell script's env: refuse the characters that break them.
const UNSAFE = /[,:\n\r\0\\]/;

/** Whether the plan's first tree is the sandbox's root (an image's) rather than the host's system directories. */
export function ownsRoot(plan: Pick<MountPlan, "overlays">): boolean {
  return plan.overlays[0]?.target === "/";
}

export function checkPlanPaths(plan: MountPlan): void {
  if (plan.overlays.some((o, i) => o.target === "/" && i > 0))
    throw new InvalidInputError("only the first copy-on-write tree may be the sandbox's root");
  for (const o of plan.overlays) {
    for (const l of [...(o.sandboxLowers ?? []).map((s) => s.path), ...o.lower]) {
      if (UNSAFE.test(l) || !l.startsWith("/"))
        throw new InvalidInputError(`unsupported lower directory ${JSON.stringify(l)}`);
    }
    if (!o.target.startsWith("/")) throw new InvalidInputError(`mount target must be absolute: ${o.target}`);
  }
  for (const b of plan.binds)
    if (!b.target.startsWith("/")) throw new InvalidInputError(`mount target must be absolute: ${b.target}`);
}

/**
 * A host path the launch clones into the scratch (at `b/<name>`) before the sandbox's user namespace exists: the
 * sandbox's root may not be able to walk the host path to it.
 * - `shared`: read-only, id-mapped in root mode; a directory is shown through an overlay of the sandbox's own, so
 *   that locks and inotify inside never meet the host's or another sandbox's (toolchains, the helper, read-only binds);
 * - `system`: the same, never id-mapped (the host's /usr, /etc...: its root's files stay nobody's inside);
 * - `live`: read-only, id-mapped, bound as it is: the host writes it while the sandbox runs (control files);
 * - `rw`: writable, never id-mapped.
 */
export interface PlanSource {
  name: string;
  path: string;
  kind: "shared" | "system" | "live" | "rw";
}

/** The helper's directory is a source (`init`): pid 1 is its binary, shown through the sandbox's own overlay. */
export function planSources(plan: MountPlan, initBinary: string): PlanSource[] {
  return [
    { name: "init", path: dirname(initBinary), kind: "shared" },
    { name: "ctl", path: plan.controlDir, kind: "live" },
    ...(ownsRoot(plan) ? [] : systemEntries()).flatMap((e, i) =>
      e.symlinkTo ? [] : [{ name: `s${i}`, path: e.path, kind: "system" as const }],
    ),
    ...plan.toolchains.map((path, i) => ({ name: `t${i}`, path, kind: "shared" as const })),
    ...plan.binds.map((b, i) => ({
      name: `x${i}`,
      path: b.source,
      kind: b.readOnly ? ("shared" as const) : ("rw" as const),
    })),
  ];
}

/**
 * The bwrap arguments for a plan. `scratch` is the private, size-limited tmpfs prepared by the launch: `root` (the
 * sandbox's `/`), `tmp`, `shm`, `home`, `m/<i>` for the i-th overlay, `b/<name>` for the sources of planSources().
 * Every writable place lives there, so one size bounds them all.
 */
export function bwrapArgs(plan: MountPlan, scratch: string, initBinary: string): string[] {
  const a: string[] = [
    "--new-session",
    "--die-with-parent",
    "--as-pid-1",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
  ];
  if (!plan.network) a.push("--unshare-net");
  const own = ownsRoot(plan);
  a.push("--hostname", plan.hostname, "--bind", own ? `${scratch}/m/0` : `${scratch}/root`, "/");
  for (const [i, e] of (own ? [] : systemEntries()).entries()) {
    if (e.symlinkTo) a.push("--symlink", e.symlinkTo, e.path);
    else a.push("--ro-bind", `${scratch}/b/s${i}`, e.path);
  }
  // /etc's secrets and /proc's knobs are masked by pid 1 (initMaskArgs), before anything runs.
  a.push("--proc", "/proc");
  // /dev is bwrap's own small tmpfs: read-only, with /dev/shm on the sized scratch instead.
  a.push("--dev", "/dev", "--bind", `${scratch}/shm`, "/dev/shm", "--remount-ro", "/dev");
  a.push("--bind", `${scratch}/tmp`, "/tmp");
  if (!own) a.push(...homeArgs(plan.home, scratch));
  for (const [i, t] of plan.toolchains.entries()) a.push("--ro-bind", `${scratch}/b/t${i}`, t);
  for (const [i, o] of plan.overlays.entries()) if (!own || i > 0) a.push("--bind", `${scratch}/m/${i}`, o.target);
  for (const [i, b] of plan.binds.entries())
    a.push(b.readOnly ? "--ro-bind" : "--bind", `${scratch}/b/x${i}`, b.target);
  a.push(
    "--ro-bind",
    `${scratch}/b/ctl`,
    CONTROL_PATH,
    "--ro-bind",
    `${scratch}/b/init/${basename(initBinary)}`,
    INIT_PATH,
  );
  a.push("--chdir", plan.cwd);
  a.push("--cap-drop", "ALL");
  for (const c of SANDBOX_CAPS) a.push("--cap-add", `CAP_${c.toUpperCase()}`);
  // pid 1 alone: it makes the cgroup namespace once in the sandbox's groups, then drops it (msb-helper init).
  a.push("--cap-add", "CAP_SYS_ADMIN");
  a.push("--clearenv", "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
  return a;
}

/** The private home from the scratch (a sandbox on the host's system directories has no home of its own). */
function homeArgs(home: string, scratch: string): string[] {
  // bwrap would create missing parents 0700, locking a non-root user out of its own home.
  const parent = home.slice(0, home.lastIndexOf("/"));
  const perms = parent && parent !== "/root" ? ["--perms", "0755", "--dir", parent] : [];
  return [...perms, "--bind", `${scratch}/home`, home];
}

/**
 * Docker's masks as arguments of pid 1 (msb-helper init), which makes them before anything else runs: /proc's knobs
 * read-only, /proc's sensitive files and /etc's secrets empty (files read as /dev/null, directories as an empty
 * read-only tmpfs).
 */
export function initMaskArgs(plan: Pick<MountPlan, "overlays">): string[] {
  const proc = procCover();
  const mask = (m: MaskedPath): string[] => [m.kind === "dir" ? "--mask-dir" : "--mask-file", m.path];
  return [
    ...proc.readOnly.flatMap((p) => ["--read-only", p]),
    ...proc.masked.flatMap(mask),
    // An image's /etc is its own: its secrets are the image's, and the host's are not in the sandbox at all.
    ...(ownsRoot(plan) ? [] : etcSecrets()).flatMap(mask),
  ];
}

/** The default plan for a workspace directory at /testbed. */
export function defaultCwd(plan: Pick<MountPlan, "overlays">): string {
  return plan.overlays.some((o) => o.target === TESTBED_PATH) ? TESTBED_PATH : "/";
}
