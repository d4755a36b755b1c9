import { existsSync } from "node:fs";
import { basename, dirname } from "node:path";
import { InvalidInputError } from "../errors.js";
import { systemEntries } from "./host.js";
import { knownEtcSecrets, type MaskedPath, operatorConfigFiles, procCover, SECRETS_ROOT } from "./masks.js";

/** Where a sandbox's workspace directory (`dir`) is mounted. */
export const TESTBED_PATH = "/testbed";

/** A directory tree mounted copy-on-write: the sandbox reads and writes it; the lower dirs never change. */
export interface OverlayMount {
  /** Host directories, topmost first (a layer stack). */
  lower: string[];
  /** Path inside the sandbox. */
  target: string;
  /**
   * Root mode: the first host id of the range the lower trees' files belong to (an image's root filesystem: the
   * store's range), mapped onto the sandbox's range. Without it, host ids are shown as the sandbox's namespace maps
   * them.
   */
  owner?: number;
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

/**
 * A lower that is a tree of a layer's metadata image (root mode only): the launch mounts the image, id-mapped, over
 * the store's objects as overlayfs's data-only layer (msb-helper `image_tree`), read-only, in the sandbox's mount
 * namespace alone. Written `erofs,IMAGE,OBJECTS,TREE` among the lowers.
 */
export interface ImageLower {
  image: string;
  objects: string;
  tree: string;
}
const IMAGE_LOWER = "erofs,";
const TREE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export function imageLower(l: ImageLower): string {
  return `${IMAGE_LOWER}${l.image},${l.objects},${l.tree}`;
}

export function parseImageLower(lower: string): ImageLower | undefined {
  if (!lower.startsWith(IMAGE_LOWER)) return undefined;
  const [image, objects, tree, ...rest] = lower.slice(IMAGE_LOWER.length).split(",");
  if (image === undefined || objects === undefined || tree === undefined || rest.length > 0) return undefined;
  return { image, objects, tree };
}

const safePath = (p: string): boolean => !UNSAFE.test(p) && p.startsWith("/");

/** Whether the plan's first tree is the sandbox's root (an image's) rather than the host's system directories. */
export function ownsRoot(plan: Pick<MountPlan, "overlays">): boolean {
  return plan.overlays[0]?.target === "/";
}

/** An overlay's lowers as msb-helper reads them: `DIR`, or `+OWNER@DIR` for a tree owned by another id range. */
export function helperLowers(o: OverlayMount): string {
  return o.lower.map((l) => (o.owner === undefined ? l : `+${o.owner}@${l}`)).join(":");
}

export function checkPlanPaths(plan: MountPlan): void {
  if (plan.overlays.some((o, i) => o.target === "/" && i > 0))
    throw new InvalidInputError("only the first copy-on-write tree may be the sandbox's root");
  for (const o of plan.overlays) {
    for (const l of o.lower) {
      const img = parseImageLower(l);
      const ok = img ? safePath(img.image) && safePath(img.objects) && TREE_NAME.test(img.tree) : safePath(l);
      if (!ok) throw new InvalidInputError(`unsupported lower directory ${JSON.stringify(l)}`);
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
 * The directory, under a sandbox's scratch, of its first generation of writable places: the size-limited tmpfs the
 * launch makes (a restore makes the next ones, `g1`, `g2`...).
 */
export const FIRST_GENERATION = "g0";

/**
 * One mount of a sandbox's tree, in the order they are made: a system tree of the host's (or a merged-/usr
 * symlink), /proc, /dev (with /dev/shm), a writable place of the generation (`root`, `tmp`, `home`, `m/<i>`: an
 * overlay), a source of the scratch (`b/<name>`, planSources()), or a directory to make (a non-root user's home's
 * parent).
 */
export type SandboxMount =
  | { kind: "system"; source: string; target: string }
  | { kind: "symlink"; to: string; target: string }
  | { kind: "proc" | "dir"; target: string }
  | { kind: "dev"; target: "/dev"; shm: "/dev/shm" }
  | { kind: "place"; place: string; target: string }
  | { kind: "source"; source: string; target: string; readOnly: boolean };

/**
 * Every mount of a plan's tree, as the launch makes it (bwrapArgs) and a restore makes it again (restore.ts). On an
 * image's root (ownsRoot) the first overlay is `/`: no host system tree, and the image's own home.
 */
export function sandboxMounts(plan: MountPlan, initBinary: string): SandboxMount[] {
  const own = ownsRoot(plan);
  const m: SandboxMount[] = [{ kind: "place", place: own ? "m/0" : "root", target: "/" }];
  for (const [i, e] of (own ? [] : systemEntries()).entries())
    m.push(
      e.symlinkTo
        ? { kind: "symlink", to: e.symlinkTo, target: e.path }
        : { kind: "system", source: `b/s${i}`, target: e.path },
    );
  m.push({ kind: "proc", target: "/proc" }, { kind: "dev", target: "/dev", shm: "/dev/shm" });
  m.push({ kind: "place", place: "tmp", target: "/tmp" });
  const homeParent = plan.home.slice(0, plan.home.lastIndexOf("/"));
  if (!own && homeParent && homeParent !== "/root") m.push({ kind: "dir", target: homeParent });
  if (!own) m.push({ kind: "place", place: "home", target: plan.home });
  const ro = (source: string, target: string): SandboxMount => ({ kind: "source", source, target, readOnly: true });
  for (const [i, t] of plan.toolchains.entries()) m.push(ro(`b/t${i}`, t));
  for (const [i, o] of plan.overlays.entries())
    if (!own || i > 0) m.push({ kind: "place", place: `m/${i}`, target: o.target });
  for (const [i, b] of plan.binds.entries())
    m.push({ kind: "source", source: `b/x${i}`, target: b.target, readOnly: b.readOnly });
  m.push(ro("b/ctl", CONTROL_PATH), ro(`b/init/${basename(initBinary)}`, INIT_PATH));
  return m;
}

/** bwrap's arguments for one mount: `scratch` is the sandbox's scratch, `gen` its first generation. */
function bwrapMount(m: SandboxMount, scratch: string, gen: string): string[] {
  switch (m.kind) {
    case "system":
      return ["--ro-bind", `${scratch}/${m.source}`, m.target];
    case "symlink":
      return ["--symlink", m.to, m.target];
    // /etc's secrets and /proc's knobs are masked by pid 1 (initMaskArgs), before anything runs.
    case "proc":
      return ["--proc", m.target];
    // /dev is bwrap's own small tmpfs: read-only, with /dev/shm on the sized generation instead.
    case "dev":
      return ["--dev", m.target, "--bind", `${gen}/shm`, m.shm, "--remount-ro", m.target];
    // bwrap would create missing parents 0700, locking a non-root user out of its own home.
    case "dir":
      return ["--perms", "0755", "--dir", m.target];
    case "place":
      return ["--bind", `${gen}/${m.place}`, m.target];
    case "source":
      return [m.readOnly ? "--ro-bind" : "--bind", `${scratch}/${m.source}`, m.target];
  }
}

/**
 * The bwrap arguments for a plan. `scratch` is the private directory prepared by the launch: its first generation
 * (`g0`, one size-limited tmpfs: every writable place lives there, so one size bounds them all) holds `root` (the
 * sandbox's `/`), `tmp`, `shm`, `home` and `m/<i>` for the i-th overlay; `b/<name>` are the sources of planSources().
 */
export function bwrapArgs(plan: MountPlan, scratch: string, initBinary: string): string[] {
  const gen = `${scratch}/${FIRST_GENERATION}`;
  const a: string[] = [
    "--new-session",
    "--die-with-parent",
    "--as-pid-1",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
  ];
  if (!plan.network) a.push("--unshare-net");
  a.push("--hostname", plan.hostname);
  for (const m of sandboxMounts(plan, initBinary)) a.push(...bwrapMount(m, scratch, gen));
  // pid 1 stays at `/` (commands get their own directory): a restore's pivot takes it along with the root, so that
  // nothing of the previous generation is held.
  a.push("--chdir", "/");
  a.push("--cap-drop", "ALL");
  for (const c of SANDBOX_CAPS) a.push("--cap-add", `CAP_${c.toUpperCase()}`);
  // pid 1 alone: it makes the cgroup namespace once in the sandbox's groups, then drops it (msb-helper init).
  a.push("--cap-add", "CAP_SYS_ADMIN");
  a.push("--clearenv", "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
  return a;
}

/**
 * Docker's masks as arguments of pid 1 (msb-helper init), which makes them before anything else runs: /proc's knobs
 * read-only, /proc's sensitive files, /etc's secrets and pip's site-wide configuration empty (files read as /dev/null,
 * directories as an empty read-only tmpfs). /etc's secrets are those a pid 1 of this process found a moment ago, else
 * pid 1 walks /etc.
 */
export function initMaskArgs(plan: Pick<MountPlan, "overlays">): { args: string[]; walksEtc: boolean } {
  const proc = procCover();
  const mask = (m: MaskedPath): string[] => [m.kind === "dir" ? "--mask-dir" : "--mask-file", m.path];
  // An image's /etc is its own: its secrets are the image's, and the host's are not in the sandbox at all (nor is
  // its walk the host's: it is never walked, nor kept).
  const hostEtc = !ownsRoot(plan);
  const secrets = hostEtc ? knownEtcSecrets() : [];
  const walksEtc = hostEtc && !secrets && existsSync(SECRETS_ROOT);
  const args = [
    ...proc.readOnly.flatMap((p) => ["--read-only", p]),
    ...proc.masked.flatMap(mask),
    ...(secrets ?? []).flatMap(mask),
    ...(hostEtc ? operatorConfigFiles().flatMap(mask) : []),
    ...(walksEtc ? ["--mask-unreadable", SECRETS_ROOT] : []),
  ];
  return { args, walksEtc };
}

/** The default plan for a workspace directory at /testbed. */
export function defaultCwd(plan: Pick<MountPlan, "overlays">): string {
  return plan.overlays.some((o) => o.target === TESTBED_PATH) ? TESTBED_PATH : "/";
}
