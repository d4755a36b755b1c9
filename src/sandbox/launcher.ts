import type { Readable } from "node:stream";
import { LimitError, SandboxError } from "../errors.js";
import {
  helperPath,
  type HostIds,
  type IdPool,
  idPoolArgs,
  type LaunchMode,
  requireTool,
  rootOnHostOf,
} from "./host.js";
import { cgroupDirs, type SandboxCgroups } from "./limits.js";
import { rememberEtcSecrets } from "./masks.js";
import {
  bwrapArgs,
  checkPlanPaths,
  helperLowers,
  INIT_PATH,
  initMaskArgs,
  type MountPlan,
  planSources,
} from "./plan.js";
import { type HelperProcess, sendArgs, startHelper } from "./spawner.js";

export interface LaunchRequest {
  plan: MountPlan;
  scratch: string;
  mode: LaunchMode;
  /** Root mode: the pool the sandbox's id range is taken from. */
  ids?: IdPool;
  cgroups: SandboxCgroups;
  diskBytes: number;
  /** uid:gid (inside) owning the private home. */
  owner: string;
  forceCopy: boolean;
  /** prlimit-style arguments applied to the whole sandbox. */
  rlimits: string[];
  /** Shown as pid 1's argument (the sandbox id), so that `ps` on the host tells sandboxes apart. */
  label: string;
  seccomp: boolean;
  /**
   * Open directories handed to the launch as descriptors 5, 6, ...: a lower dir written `/proc/self/fd/5` is then
   * exactly the object that was opened and checked, whatever happens to its path meanwhile.
   */
  fds: number[];
  /** Files a fresh home starts with (name → text), written by the launch. */
  homeFiles?: Readonly<Record<string, string>>;
}

export interface Launched {
  child: HelperProcess;
  /** Host pid of the sandbox's pid 1 (whose namespaces commands enter). */
  pid1: number;
  /** The first host id of the sandbox's range (its root on the host), and how many ids it has. */
  hostIds: HostIds;
  /** Lines the launch printed on stderr (e.g. the copy fallback notice). */
  notices: string[];
}

/** What the launch may print is kept up to this many bytes: the rest is dropped, never buffered. */
const MAX_LAUNCH_OUTPUT = 64 * 1024;

/** The first descriptor number of LaunchRequest.fds in the launched process. */
export const FIRST_PASSED_FD = 5;

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
      if (done(text) || text.length > MAX_LAUNCH_OUTPUT) finish();
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

/** Lines of a stream, kept up to MAX_LAUNCH_OUTPUT bytes in all. */
function boundedLines(stream: Readable): string[] {
  const lines: string[] = [];
  let kept = 0;
  stream.setEncoding("utf8");
  stream.on("data", (s: string) => {
    if (kept >= MAX_LAUNCH_OUTPUT) return;
    const room = s.slice(0, MAX_LAUNCH_OUTPUT - kept);
    kept += room.length;
    lines.push(...room.split("\n").filter(Boolean));
  });
  return lines;
}

const SOURCE_FLAGS = { shared: "--source", system: "--system", live: "--source-live", rw: "--source-rw" } as const;

/**
 * What `msb-helper launch` is told after its cgroups (on its command line, or on its arguments' pipe when started
 * ahead): its options, then bwrap's command line, then msb-helper init's as pid 1.
 */
function launchArgs(req: LaunchRequest): { args: string[]; walksEtc: boolean } {
  const helper = helperPath();
  const a = ["--scratch", req.scratch, "--disk", String(req.diskBytes), "--owner", req.owner];
  if (req.mode === "root" && req.ids) a.push(...idPoolArgs(req.ids));
  a.push(...req.rlimits);
  if (req.forceCopy) a.push("--force-copy");
  for (const o of req.plan.overlays) a.push("--overlay", helperLowers(o));
  for (const [name, text] of Object.entries(req.homeFiles ?? {})) a.push("--home-file", `${name}=${text}`);
  for (const s of planSources(req.plan, helper)) a.push(SOURCE_FLAGS[s.kind], `${s.name}=${s.path}`);
  a.push("--", requireTool("bwrap", "bubblewrap"), ...bwrapArgs(req.plan, req.scratch, helper), "--info-fd", "3");
  const holdsRange = req.mode === "root" && req.ids !== undefined && req.ids.slots > 1;
  a.push(
    "--",
    INIT_PATH,
    "init",
    ...(req.seccomp ? [] : ["--no-seccomp"]),
    ...(holdsRange ? ["--holds-id-range"] : []),
  );
  const masks = initMaskArgs(req.plan);
  a.push(...masks.args, req.label);
  return { args: a, walksEtc: masks.walksEtc };
}

const LAUNCH_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" };

/** The cgroups a launch joins, as its first options. */
function cgroupArgs(cgroups: SandboxCgroups): string[] {
  return cgroupDirs(cgroups).flatMap((dir) => ["--cgroup", dir]);
}

/**
 * A launch started ahead of its sandbox: it joins the sandbox's cgroups now (a cgroup v1 move waits for an RCU grace
 * period, 5-15 ms on an idle host), then waits on its stdin for the rest (`launch(req, ahead)`), or "drop".
 */
export function startLaunchAhead(cgroups: SandboxCgroups): Promise<HelperProcess> {
  const argv = [helperPath(), "launch", "--args-fd", "0", ...cgroupArgs(cgroups)];
  return startHelper(argv, LAUNCH_ENV, ["in", "null", "out", "out", "out"]);
}

/**
 * Start the sandbox: a new launch, or `ahead` (started by startLaunchAhead in the request's cgroups, still waiting)
 * told the rest. A launch started ahead takes no descriptors (`fds` must be empty).
 */
export async function launch(req: LaunchRequest, ahead?: HelperProcess): Promise<Launched> {
  checkPlanPaths(req.plan);
  const { args, walksEtc } = launchArgs(req);
  let child: HelperProcess;
  if (ahead) {
    if (req.fds.length) throw new SandboxError("a launch started ahead takes no descriptors");
    child = ahead;
    sendArgs(child.stdin!, args);
  } else {
    const argv = [helperPath(), "launch", ...cgroupArgs(req.cgroups), ...args];
    child = await startHelper(argv, LAUNCH_ENV, ["null", "null", "out", "out", "out", ...req.fds]);
  }
  const [, , stderr, info, ready] = child.stdio as [null, null, Readable, Readable, Readable];
  const stderrLines = boundedLines(stderr);
  const exited = new Promise<string>((resolve) => {
    child.on("exit", (code, sig) => resolve(`launcher exited (${code ?? sig})`));
    child.on("error", (e) => resolve(e.message));
  });
  const pid1 = readUntil(info, isJson).then((t) => (JSON.parse(t) as { "child-pid": number })["child-pid"]);
  pid1.catch(() => undefined); // a launch that died early: its exit says why, whoever awaits pid 1 or not
  // pid 1's report of what its walk masked, then `R` (see rememberEtcSecrets): a NUL ends every entry.
  const readyText = readUntil(ready, (t) => t === "R" || t.endsWith("\0R"));
  const started = readyText.then((t) => {
    if (t !== "R" && !t.endsWith("\0R")) return "not ready";
    if (walksEtc) rememberEtcSecrets(t);
    return "ready";
  });
  const outcome = await Promise.race([started.catch((e: Error) => e.message), exited]);
  if (outcome !== "ready") {
    child.kill("SIGKILL");
    const why = stderrLines.join("\n") || outcome;
    if (/no free id range/.test(why)) throw new LimitError(`sandbox not started: ${why}`);
    throw new SandboxError(`sandbox failed to start: ${why}`);
  }
  // pid 1 redirects its output to /dev/null once ready; the launch's stderr is only bwrap's from now on.
  const pid = await pid1;
  const hostIds = rootOnHostOf(pid);
  if (!hostIds) {
    child.kill("SIGKILL");
    throw new SandboxError(`sandbox failed to start: pid 1 (${pid}) has no user namespace map`);
  }
  return { child, pid1: pid, hostIds, notices: stderrLines };
}
