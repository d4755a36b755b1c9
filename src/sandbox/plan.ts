import { systemEntries } from "./host.js";

/** Where a sandbox's workspace directory (`dir`) is mounted. */
export const TESTBED_PATH = "/testbed";

/** A directory tree mounted copy-on-write: the sandbox reads and writes it; the lower dirs never change. */
export interface OverlayMount {
  /** Host directories, topmost first (a layer stack). */
  lower: string[];
  /** Path inside the sandbox. */
  target: string;
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

export function checkPlanPaths(plan: MountPlan): void {
  for (const o of plan.overlays) {
    for (const l of o.lower) if (UNSAFE.test(l)) throw new Error(`unsupported character in path ${JSON.stringify(l)}`);
    if (!o.target.startsWith("/")) throw new Error(`mount target must be absolute: ${o.target}`);
  }
  for (const b of plan.binds)
    if (!b.target.startsWith("/")) throw new Error(`mount target must be absolute: ${b.target}`);
}

/**
 * The bwrap arguments for a plan. `scratch` is the (private, tmpfs) scratch root prepared by the launch script:
 * `scratch/tmp`, `scratch/home`, and `scratch/m/<i>` for the i-th overlay. `initBinary` is bound at INIT_PATH.
 */
export function bwrapArgs(plan: MountPlan, scratch: string, privileged: boolean, initBinary?: string): string[] {
  const a: string[] = [
    "--die-with-parent",
    "--as-pid-1",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
  ];
  if (!plan.network) a.push("--unshare-net");
  a.push("--hostname", plan.hostname);
  for (const e of systemEntries()) {
    if (e.symlinkTo) a.push("--symlink", e.symlinkTo, e.path);
    else a.push("--ro-bind", e.path, e.path);
  }
  a.push("--proc", "/proc", "--dev", "/dev");
  a.push("--bind", `${scratch}/tmp`, "/tmp");
  // bwrap would create missing parents 0700, locking a non-root user out of its own home.
  const homeParent = plan.home.slice(0, plan.home.lastIndexOf("/"));
  if (homeParent && homeParent !== "/root") a.push("--perms", "0755", "--dir", homeParent);
  a.push("--bind", `${scratch}/home`, plan.home);
  for (const t of plan.toolchains) a.push("--ro-bind", t, t);
  for (const [i, o] of plan.overlays.entries()) a.push("--bind", `${scratch}/m/${i}`, o.target);
  for (const b of plan.binds) a.push(b.readOnly ? "--ro-bind" : "--bind", b.source, b.target);
  a.push("--ro-bind", plan.controlDir, CONTROL_PATH);
  if (initBinary) a.push("--ro-bind", initBinary, INIT_PATH);
  a.push("--chdir", plan.cwd);
  if (privileged) {
    a.push("--cap-drop", "ALL");
    for (const c of SANDBOX_CAPS) a.push("--cap-add", `CAP_${c.toUpperCase()}`);
  }
  a.push("--clearenv", "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
  return a;
}

/** The default plan for a workspace directory at /testbed. */
export function defaultCwd(plan: Pick<MountPlan, "overlays">): string {
  return plan.overlays.some((o) => o.target === TESTBED_PATH) ? TESTBED_PATH : "/";
}
