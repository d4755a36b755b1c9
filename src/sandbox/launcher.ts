import { spawn, type ChildProcess } from "node:child_process";
import type { Readable } from "node:stream";
import { bwrapArgs, checkPlanPaths, INIT_PATH, type MountPlan } from "./plan.js";
import { helperPath, requireTool, type LaunchMode } from "./host.js";
import type { SandboxCgroups } from "./limits.js";

/**
 * The fallback when the native helper is missing (its `launch` and `init` do the same in one process each).
 * Runs inside a fresh private mount namespace (made by `unshare`), before bwrap: joins the cgroups, mounts a
 * size-limited tmpfs as the scratch root, and one overlay per workspace tree on it. Every mount lives only in this
 * namespace, so it vanishes with the sandbox: nothing to unmount, nothing left on the host even after SIGKILL.
 * Where overlayfs cannot be mounted, the tree is copied instead (and we say so on stderr).
 */
const LAUNCH_SCRIPT = String.raw`set -eu
for cg in $MSB_CGROUPS; do echo $$ > "$cg/cgroup.procs"; done
S=$MSB_SCRATCH
mount -t tmpfs -o "size=$MSB_DISK,mode=0755" minisandbox "$S"
mkdir -p "$S/tmp" "$S/home" "$S/upper" "$S/work" "$S/m"
chmod 1777 "$S/tmp"
chown "$MSB_OWNER" "$S/home"
n=0
while [ "$n" -lt "$MSB_NMOUNTS" ]; do
  eval "lower=\$MSB_LOWER_$n"
  mkdir -p "$S/upper/$n" "$S/work/$n" "$S/m/$n"
  if [ -n "$MSB_FORCE_COPY" ] || ! mount -t overlay overlay -o "lowerdir=$lower,upperdir=$S/upper/$n,workdir=$S/work/$n$MSB_OVL_OPTS" "$S/m/$n" 2>/dev/null; then
    echo "minisandbox: overlayfs unavailable, copying $lower" >&2
    old_ifs=$IFS; IFS=:; set -f
    rev=""; for l in $lower; do rev="$l:$rev"; done
    for l in $rev; do [ -n "$l" ] && cp -a "$l/." "$S/m/$n/"; done
    IFS=$old_ifs; set +f
  fi
  n=$((n+1))
done
exec "$@"
`;

/** pid 1 of every sandbox: reaps orphans, survives `kill -9 -1` from inside, keeps the namespaces alive. */
const KEEPER = `exec 3>&- ; printf R >&4 ; exec 4>&- ; trap "" HUP INT TERM QUIT; while :; do sleep 2147483647 & wait; done`;

export interface LaunchRequest {
  plan: MountPlan;
  scratch: string;
  mode: LaunchMode;
  cgroups: SandboxCgroups;
  diskBytes: number;
  /** uid:gid owning the private home. */
  owner: string;
  forceCopy: boolean;
  /** prlimit arguments applied to the whole sandbox. */
  rlimits: string[];
  /** Shown as pid 1's argument (the sandbox id), so that `ps` on the host tells sandboxes apart. */
  label: string;
}

export interface Launched {
  child: ChildProcess;
  /** Host pid of the sandbox's pid 1 (whose namespaces commands enter). */
  pid1: number;
  /** Lines the launch printed on stderr (e.g. the copy fallback notice). */
  notices: string[];
}

/** Read a pipe until `done(text)` holds (the writer may keep its end open forever, so no waiting for EOF). */
function readUntil(stream: Readable, done: (text: string) => boolean): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    const finish = (): void => {
      stream.removeAllListeners("data");
      stream.destroy();
      resolve(text);
    };
    stream.setEncoding("utf8");
    stream.on("data", (c: string) => {
      text += c;
      if (done(text)) finish();
    });
    stream.on("end", finish);
    stream.on("error", finish);
  });
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** argv (and environment) of the process that becomes the sandbox: native helper, else unshare + sh. */
function launchCommand(req: LaunchRequest): { argv: string[]; env: Record<string, string> } {
  const bwrap = requireTool("bwrap", "bubblewrap");
  const privileged = req.mode === "root";
  const cgroups = [req.cgroups.memory, req.cgroups.pids].filter((c): c is string => Boolean(c));
  const ovlOpts = privileged ? "" : ",userxattr";
  const env: Record<string, string> = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" };
  const helper = helperPath();
  if (helper) {
    const argv = [
      helper,
      "launch",
      ...(privileged ? [] : ["--userns"]),
      ...cgroups.flatMap((c) => ["--cgroup", c]),
      ...req.rlimits,
      "--scratch",
      req.scratch,
      "--disk",
      String(req.diskBytes),
      "--owner",
      req.owner,
      "--overlay-opts",
      ovlOpts,
      ...(req.forceCopy ? ["--force-copy"] : []),
      ...req.plan.overlays.flatMap((o) => ["--overlay", o.lower.join(":")]),
      "--",
      bwrap,
      ...bwrapArgs(req.plan, req.scratch, privileged, helper),
      "--info-fd",
      "3",
      "--",
      INIT_PATH,
      "init",
      req.label,
    ];
    return { argv, env };
  }
  const ns = privileged
    ? ["--mount", "--propagation", "private"]
    : ["--user", "--map-root-user", "--mount", "--propagation", "private"];
  const prlimit = req.rlimits.length ? [requireTool("prlimit", "util-linux"), ...req.rlimits, "--"] : [];
  const argv = [
    requireTool("unshare", "util-linux"),
    ...ns,
    "--",
    ...prlimit,
    "/bin/sh",
    "-c",
    LAUNCH_SCRIPT,
    "minisandbox-launch",
    bwrap,
    ...bwrapArgs(req.plan, req.scratch, privileged),
    "--info-fd",
    "3",
    "--",
    "/bin/sh",
    "-c",
    KEEPER,
  ];
  Object.assign(env, {
    MSB_CGROUPS: cgroups.join(" "),
    MSB_SCRATCH: req.scratch,
    MSB_DISK: String(req.diskBytes),
    MSB_OWNER: req.owner,
    MSB_NMOUNTS: String(req.plan.overlays.length),
    MSB_OVL_OPTS: ovlOpts,
    MSB_FORCE_COPY: req.forceCopy ? "1" : "",
  });
  for (const [i, o] of req.plan.overlays.entries()) env[`MSB_LOWER_${i}`] = o.lower.join(":");
  return { argv, env };
}

export async function launch(req: LaunchRequest): Promise<Launched> {
  checkPlanPaths(req.plan);
  const { argv, env } = launchCommand(req);
  const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
  const [, , stderr, info, ready] = child.stdio as [null, null, Readable, Readable, Readable];
  const stderrLines: string[] = [];
  stderr.setEncoding("utf8");
  stderr.on("data", (s: string) => stderrLines.push(...s.split("\n").filter(Boolean)));
  const exited = new Promise<string>((resolve) => {
    child.on("exit", (code, sig) => resolve(`launcher exited (${code ?? sig})`));
    child.on("error", (e) => resolve(e.message));
  });
  const infoText = readUntil(info, isJson);
  const readyText = readUntil(ready, (t) => t.length > 0);
  const outcome = await Promise.race([readyText.then((t) => (t === "R" ? "ready" : "not ready")), exited]);
  if (outcome !== "ready") {
    child.kill("SIGKILL");
    const why = stderrLines.join("\n") || outcome;
    throw new Error(`sandbox failed to start: ${why}`);
  }
  const parsed = JSON.parse(await infoText) as { "child-pid": number };
  return { child, pid1: parsed["child-pid"], notices: stderrLines };
}
