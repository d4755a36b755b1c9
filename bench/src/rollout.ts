/**
 * Workload 7, rollouts for RL trainers, side by side with mini-swe-agent's podman environment (what SkyRL's example
 * runs: `podman run -d … sleep 2h`, then `podman exec … bash -c <command>` per action, reward in a fresh
 * `podman run -i` that applies the diff with a heredoc and runs the eval script):
 *   - a group of 8 ready: from the request to the first command's output in all 8 (minisandbox: `startGroup`, with and
 *     without the warm pool; podman: 8 containers started at once);
 *   - overhead per trajectory outside the agent and the tests: start, diff, reward sandbox or container, grading,
 *     close (gold patch as the agent's work, trajectories one at a time);
 *   - fork latency of a live rollout on the measured workspace (podman: commit the container, run the image);
 *   - reset and checkpoint latency, and many live rollouts at once (tree-search.ts).
 */
import { randomBytes } from "node:crypto";
import { gradeInstance, heredocDelimiter, makeEvalScript } from "../../src/eval/index.js";
import { pipSettings } from "../../src/env/pip-config.js";
import { RolloutEngine } from "../../src/rollout/index.js";
import type { Instance } from "../../src/tasks/types.js";
import type { Podman } from "./podman.js";
import { mustRun, processesMentioning, timedRun, untilQuiet } from "./proc.js";
import { ensureEnvImageFor } from "./ready.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import { liveRollouts, parentWork, THINK_MS, treeSearchLatency } from "./tree-search.js";
import type { ForkLatency, GroupReady, RolloutResults, TrajectoryOverhead, Unavailable } from "./types.js";

export interface RolloutBenchOptions {
  env: BenchEnvironment;
  podman: Podman | Unavailable;
  /** Groups per variant (rounds interleaved). */
  rounds: number;
  /** Trajectories per variant. */
  trajectories: number;
  forks: number;
  /** Rollouts live at once in the scale run. */
  live: number;
  groupSize?: number;
  log: (m: string) => void;
}

const na = (reason: string): Unavailable => ({ available: false, reason });
const errMsg = (e: unknown): string => (e as Error).message.split("\n")[0]!.slice(0, 300);

export async function benchRollout(o: RolloutBenchOptions): Promise<RolloutResults> {
  const n = o.groupSize ?? 8;
  const engine = new RolloutEngine({
    home: o.env.home,
    dataset: o.env.instances,
    specsFile: o.env.specsFile,
    warmPool: { max: n },
  });
  const pod = "available" in o.podman ? undefined : await podmanSide(o);
  try {
    o.log(`rollout: group of ${n} ready, ${o.rounds} rounds`);
    const group = await groupReady(engine, o, n, pod);
    o.log(`rollout: overhead per trajectory, ${o.trajectories} trajectories per variant`);
    const trajectory = await trajectories(engine, o, pod);
    o.log(`rollout: fork latency, ${o.forks} forks`);
    const fork = await forkLatency(engine, o, pod);
    o.log(`rollout: reset and checkpoint latency, ${o.forks} resets`);
    const reset = await treeSearchLatency(engine, o.env.primary, o.env.importModule, o.forks);
    o.log(`rollout: ${o.live} live rollouts at once`);
    const live = await liveRollouts(o.env, o.live);
    return { available: true, groupSize: n, rounds: o.rounds, group, trajectory, fork, reset, live };
  } finally {
    await engine.close();
  }
}

/** What the podman side needs: the environment's image (built before timing) and the offline pip settings. */
interface PodmanSide {
  podman: Podman;
  image: string;
  pipEnv: Record<string, string>;
  pipMounts: string[];
  spec: BenchEnvironment["primarySpec"];
}

async function podmanSide(o: RolloutBenchOptions): Promise<PodmanSide | Unavailable> {
  const podman = o.podman as Podman;
  if (!podman.hasGit)
    return na("the podman base image has no git (made by an older scripts/bench-setup.sh): re-run it");
  try {
    const image = await ensureEnvImageFor(o.env, podman, o.env.primaryKey);
    const pip = await pipSettings(o.env.toolchain.python);
    const pipEnv = { ...pip.env, PIP_NO_INPUT: "1", PIP_PROGRESS_BAR: "off", PIP_RETRIES: "0" };
    return { podman, image, pipEnv, pipMounts: pip.mounts, spec: o.env.primarySpec };
  } catch (e) {
    return na(`podman image: ${errMsg(e)}`);
  }
}

// --- group of N ready ------------------------------------------------------------------------------------------

async function groupReady(
  engine: RolloutEngine,
  o: RolloutBenchOptions,
  n: number,
  pod: PodmanSide | Unavailable | undefined,
): Promise<RolloutResults["group"]> {
  const id = o.env.primary.instance_id;
  const samples = { minisandbox: [] as number[], pool: [] as number[], podman: [] as number[] };
  const failures = { minisandbox: 0, pool: 0, podman: 0 };
  const errors: string[] = [];
  const ours = async (pool: boolean): Promise<number> => {
    if (pool) await engine.prewarm([id], { sandboxes: n });
    const t = performance.now();
    const g = await engine.startGroup({ instance: id, n });
    try {
      const rs = await Promise.all(g.rollouts.map((r) => r.exec("echo ready")));
      if (rs.some((r) => r.stdout !== "ready\n")) throw new Error("a rollout did not answer");
      if (pool && !g.rollouts.every((r) => r.fromPool)) throw new Error("the warm pool did not serve the group");
      return performance.now() - t;
    } finally {
      await engine.closeGroup(g.id);
    }
  };
  const attempt = async (k: keyof typeof samples, fn: () => Promise<number>): Promise<void> => {
    try {
      samples[k].push(await fn());
    } catch (e) {
      failures[k]++;
      if (errors.length < 3) errors.push(`${k}: ${errMsg(e)}`);
    }
  };
  const podOk = pod && !("available" in pod) ? pod : undefined;
  type Timed = [keyof typeof samples, () => Promise<number>];
  const variants: Timed[] = [
    ["minisandbox", () => ours(false)],
    ["pool", () => ours(true)],
  ];
  if (podOk) variants.push(["podman", () => podmanGroup(podOk, n)]);
  // One warm-up each (page cache, first podman start), not counted.
  for (const [, run] of variants) await run().catch(() => 0);
  for (let round = 0; round < o.rounds; round++) {
    // Each round starts with another variant, and each is timed once the previous one's background work is over.
    for (let i = 0; i < variants.length; i++) {
      const [k, run] = variants[(i + round) % variants.length]!;
      await settle(podOk);
      await attempt(k, run);
    }
  }
  const result = (k: keyof typeof samples, label: string, method: string): GroupReady | Unavailable =>
    samples[k].length === 0
      ? na(`every run failed: ${errors.join("; ")}`)
      : { available: true, label, method, allReady: summarize(samples[k]), failures: failures[k] };
  return {
    minisandbox: result(
      "minisandbox",
      `minisandbox startGroup (n=${n})`,
      `RolloutEngine.startGroup({ n: ${n} }) on a layer in the node cache, then \`echo ready\` in every rollout`,
    ),
    minisandbox_warm_pool: result(
      "pool",
      `minisandbox startGroup from the warm pool (n=${n})`,
      `prewarm(${n} sandboxes) untimed, then the same: the group takes them from the pool`,
    ),
    podman: !pod
      ? (o.podman as Unavailable)
      : "available" in pod
        ? pod
        : result(
            "podman",
            `podman, mini-swe-agent's environment (n=${n})`,
            `${n} × (podman run -d --rm --network none -w /testbed <env image> sleep 2h, then ` +
              "podman exec -w /testbed <c> bash -c 'echo ready'), all at once; removal untimed",
          ),
  };
}

/**
 * Until the previous variant's background work is over: podman's cleanup processes run on for about a second after
 * `podman rm` returns (two per container), dirty pages are written back, closed sandboxes' namespaces are freed; a
 * group timed meanwhile would pay for them.
 */
async function settle(p: PodmanSide | undefined): Promise<void> {
  const until = performance.now() + 10_000;
  while (p && processesMentioning(p.podman.root).length > 0 && performance.now() < until)
    await new Promise((r) => setTimeout(r, 50));
  await timedRun("sync", []);
  await untilQuiet();
}

const containerName = (): string => `msb-bench-ro-${randomBytes(5).toString("hex")}`;

async function startContainer(p: PodmanSide, image: string, name: string): Promise<void> {
  const args = ["run", "-d", "--name", name, "-w", "/testbed", "--rm", "--network", "none", image, "sleep", "2h"];
  await mustRun(p.podman.bin, p.podman.args(...args), { timeoutMs: 120_000 });
}

function podmanExec(p: PodmanSide, name: string, command: string, input?: string): ReturnType<typeof timedRun> {
  // mini-swe-agent's SWE-bench config runs actions with `bash -c` (its docker default `bash -lc` resets PATH).
  const args = ["exec", ...(input === undefined ? [] : ["-i"]), "-w", "/testbed", name, "bash", "-c", command];
  return timedRun(p.podman.bin, p.podman.args(...args), { timeoutMs: 600_000, input });
}

async function removeContainers(p: PodmanSide, names: string[]): Promise<void> {
  if (names.length)
    await timedRun(p.podman.bin, p.podman.args("rm", "-f", "-t", "0", ...names), { timeoutMs: 120_000 });
}

async function podmanGroup(p: PodmanSide, n: number): Promise<number> {
  const names = Array.from({ length: n }, containerName);
  const t = performance.now();
  try {
    await Promise.all(
      names.map(async (name) => {
        await startContainer(p, p.image, name);
        const r = await podmanExec(p, name, "echo ready");
        if (r.stdout !== "ready\n") throw new Error(`podman exec: ${r.stderr.trim().slice(-200)}`);
      }),
    );
    return performance.now() - t;
  } finally {
    await removeContainers(p, names);
  }
}

// --- overhead per trajectory ----------------------------------------------------------------------------------

/** The agent's part of a trajectory (excluded from the overhead): the gold patch, and a look at the tree. */
const AGENT_APPLY = "git apply -";
const AGENT_LOOK = "git status --short";

async function trajectories(
  engine: RolloutEngine,
  o: RolloutBenchOptions,
  pod: PodmanSide | Unavailable | undefined,
): Promise<RolloutResults["trajectory"]> {
  const inst = o.env.primary;
  const runs = { fresh: [] as Trajectory[], inPlace: [] as Trajectory[], podman: [] as Trajectory[] };
  const errors = { fresh: [] as string[], inPlace: [] as string[], podman: [] as string[] };
  const podOk = pod && !("available" in pod) ? pod : undefined;
  const add = async (k: keyof typeof runs, fn: () => Promise<Trajectory>): Promise<void> => {
    try {
      runs[k].push(await fn());
    } catch (e) {
      errors[k].push(errMsg(e));
    }
  };
  for (let i = 0; i < o.trajectories; i++) {
    await add("fresh", () => minisandboxTrajectory(engine, inst, "fresh"));
    await add("inPlace", () => minisandboxTrajectory(engine, inst, "in_place"));
    if (podOk) await add("podman", () => podmanTrajectory(podOk, inst));
  }
  const summary = (k: keyof typeof runs, label: string, method: string): TrajectoryOverhead | Unavailable =>
    runs[k].length === 0
      ? na(`every trajectory failed: ${errors[k].slice(0, 3).join("; ")}`)
      : overhead(runs[k], label, method);
  return {
    minisandbox: summary(
      "fresh",
      "minisandbox rollout, reward in a fresh sandbox",
      "startGroup(n=1) → agent execs → reward() (diff, fresh sandbox, apply, eval.sh, grade) → close",
    ),
    minisandbox_in_place: summary(
      "inPlace",
      "minisandbox rollout, reward in place",
      "the same with reward({ mode: 'in_place' }) (the container-free paper's way)",
    ),
    podman: !pod
      ? (o.podman as Unavailable)
      : "available" in pod
        ? pod
        : summary(
            "podman",
            "podman, mini-swe-agent's environment + a fresh container for the reward",
            "podman run -d … sleep 2h → agent via podman exec bash -c → git diff via podman exec → " +
              "podman run -i (heredoc git apply + eval.sh, tests timed inside) → podman rm -f -t 0",
          ),
  };
}

interface Trajectory {
  totalMs: number;
  agentMs: number;
  testsMs: number;
  resolved: boolean;
  parts: Record<string, number>;
}

function overhead(runs: Trajectory[], label: string, method: string): TrajectoryOverhead {
  const parts: Record<string, number> = {};
  for (const r of runs) for (const [k, v] of Object.entries(r.parts)) parts[k] = (parts[k] ?? 0) + v / runs.length;
  for (const k of Object.keys(parts)) parts[k] = Math.round(parts[k]! * 10) / 10;
  return {
    available: true,
    label,
    method,
    trajectories: runs.length,
    resolved: runs.filter((r) => r.resolved).length,
    overhead: summarize(runs.map((r) => r.totalMs - r.agentMs - r.testsMs)),
    meanParts: parts,
  };
}

async function minisandboxTrajectory(
  engine: RolloutEngine,
  inst: Instance,
  mode: "fresh" | "in_place",
): Promise<Trajectory> {
  const t0 = performance.now();
  const g = await engine.startGroup({ instance: inst.instance_id, n: 1 });
  const startMs = performance.now() - t0;
  const r = g.rollouts[0]!;
  const a = performance.now();
  const applied = await r.exec(AGENT_APPLY, { stdin: inst.patch });
  await r.exec(AGENT_LOOK);
  const agentMs = performance.now() - a;
  if (applied.exitCode !== 0) throw new Error(`git apply: ${applied.stderr.trim()}`);
  const outcome = await r.reward({ mode });
  const c = performance.now();
  await engine.closeGroup(g.id);
  const closeMs = performance.now() - c;
  if (outcome.status !== "scored") throw new Error(`reward: ${outcome.failure?.message}`);
  return {
    totalMs: performance.now() - t0,
    agentMs,
    testsMs: outcome.timings.testsMs,
    resolved: outcome.resolved,
    parts: { startMs, rewardOverheadMs: outcome.timings.overheadMs, closeMs },
  };
}

/** SkyRL's reward: a fresh container applies the diff with a heredoc and runs the eval script (timed inside). */
function podmanRewardScript(inst: Instance, spec: BenchEnvironment["primarySpec"], diff: string): string {
  const evalScript = makeEvalScript({ instance: inst, spec });
  const d1 = heredocDelimiter(diff, "MSB_BENCH_DIFF");
  const d2 = heredocDelimiter(evalScript, "MSB_BENCH_EVAL");
  const bug = inst.bug_patch ? podmanBugSteps(inst.bug_patch) : [];
  return [
    "cd /testbed",
    ...bug,
    `git apply --verbose - <<'${d1}'`,
    diff.endsWith("\n") ? diff.slice(0, -1) : diff,
    d1,
    `cat > /tmp/eval.sh <<'${d2}'`,
    evalScript.endsWith("\n") ? evalScript.slice(0, -1) : evalScript,
    d2,
    "s=$(date +%s%N); bash /tmp/eval.sh 2>&1; e=$(date +%s%N)",
    'echo "MSB_TESTS_NS=$((e - s))"',
  ].join("\n");
}

/** SWE-smith: a container starts before the bug; apply and commit it as a sandbox's setup does. */
function podmanBugSteps(bug: string): string[] {
  const d = heredocDelimiter(bug, "MSB_BENCH_BUG");
  return [
    `git apply --whitespace=nowarn - <<'${d}'`,
    bug.endsWith("\n") ? bug.slice(0, -1) : bug,
    d,
    "git add -A && git -c user.email=bench@localhost -c user.name=bench -c core.hooksPath=/dev/null " +
      "commit -q --no-verify -m 'task bug'",
  ];
}

async function podmanTrajectory(p: PodmanSide, inst: Instance): Promise<Trajectory> {
  const name = containerName();
  const t0 = performance.now();
  let removed = false;
  try {
    await startContainer(p, p.image, name);
    if (inst.bug_patch) await podmanExec(p, name, podmanBugSteps(inst.bug_patch).join("\n"));
    const startMs = performance.now() - t0;
    const a = performance.now();
    const applied = await podmanExec(p, name, AGENT_APPLY, inst.patch);
    await podmanExec(p, name, AGENT_LOOK);
    const agentMs = performance.now() - a;
    if (applied.code !== 0) throw new Error(`git apply: ${applied.stderr.trim()}`);
    const d = performance.now();
    const diff = (await podmanExec(p, name, "git add -A && git diff --cached")).stdout;
    const diffMs = performance.now() - d;
    const rw = performance.now();
    const flags = ["run", "--rm", "-i", "--network", "none"];
    for (const [k, v] of Object.entries(p.pipEnv)) flags.push("-e", `${k}=${v}`);
    for (const m of p.pipMounts) flags.push("-v", `${m}:${m}:ro`);
    const r = await timedRun(p.podman.bin, p.podman.args(...flags, p.image, "bash", "-s"), {
      input: podmanRewardScript(inst, p.spec, diff),
      timeoutMs: 1_800_000,
    });
    const testsNs = Number(/MSB_TESTS_NS=(\d+)/.exec(r.stdout)?.[1] ?? Number.NaN);
    if (!Number.isFinite(testsNs)) throw new Error(`reward container: exit ${r.code}: ${r.stderr.trim().slice(-200)}`);
    const grade = gradeInstance({ instance: inst, modelPatch: diff, testOutput: r.stdout });
    const rewardMs = performance.now() - rw;
    const c = performance.now();
    await removeContainers(p, [name]);
    removed = true;
    const closeMs = performance.now() - c;
    const testsMs = testsNs / 1e6;
    return {
      totalMs: performance.now() - t0,
      agentMs,
      testsMs,
      resolved: grade.report[inst.instance_id]?.resolved === true,
      parts: { startMs, diffMs, rewardOverheadMs: rewardMs - testsMs, closeMs },
    };
  } finally {
    if (!removed) await removeContainers(p, [name]);
  }
}

// --- fork ------------------------------------------------------------------------------------------------------

async function forkLatency(
  engine: RolloutEngine,
  o: RolloutBenchOptions,
  pod: PodmanSide | Unavailable | undefined,
): Promise<RolloutResults["fork"]> {
  const inst = o.env.primary;
  // The parent has done some work: the gold patch, a scratch file, Python run once (bytecode written).
  const work = parentWork(o.env.importModule);
  const ours = await (async (): Promise<ForkLatency | Unavailable> => {
    const g = await engine.startGroup({ instance: inst.instance_id, n: 1 });
    try {
      const parent = g.rollouts[0]!;
      const setup = await parent.exec(work, { stdin: inst.patch });
      if (setup.exitCode !== 0) return na(`parent's work failed: ${setup.stderr.trim().slice(-200)}`);
      const fork: number[] = [];
      const first: number[] = [];
      for (let i = 0; i < o.forks + 1; i++) {
        const t = performance.now();
        const [child] = await parent.fork(1);
        const forkMs = performance.now() - t;
        const r = await child!.exec("echo ready");
        const firstMs = performance.now() - t;
        await child!.close();
        if (r.stdout !== "ready\n") throw new Error("the child did not answer");
        // The model call before the next fork: the group's spare is started again meanwhile.
        await new Promise((res) => setTimeout(res, THINK_MS));
        if (i === 0) continue; // warm-up
        fork.push(forkMs);
        first.push(firstMs);
      }
      return {
        available: true,
        label: "minisandbox Rollout.fork(1)",
        method:
          "a live rollout (gold patch applied, 1 MB in /tmp, Python run once) forked into 1 child: held still, its " +
          "writable state copied into the group's spare (a sandbox of the task started ahead; started again in the " +
          `${THINK_MS} ms before the next fork, a model call); then \`echo ready\` in the child`,
        fork: summarize(fork),
        firstOutput: summarize(first),
      };
    } finally {
      await engine.closeGroup(g.id);
    }
  })().catch((e: unknown) => na(`fork failed: ${errMsg(e)}`));
  const theirs = !pod ? (o.podman as Unavailable) : "available" in pod ? pod : await podmanFork(pod, inst, work, o);
  return { minisandbox: ours, podman_commit: theirs };
}

async function podmanFork(
  p: PodmanSide,
  inst: Instance,
  work: string,
  o: RolloutBenchOptions,
): Promise<ForkLatency | Unavailable> {
  const parent = containerName();
  try {
    await startContainer(p, p.image, parent);
    const setup = await podmanExec(p, parent, work, inst.patch);
    if (setup.code !== 0) return na(`parent's work failed: ${setup.stderr.trim().slice(-200)}`);
    const fork: number[] = [];
    const first: number[] = [];
    for (let i = 0; i < o.forks + 1; i++) {
      const tag = `localhost/msb-bench-fork:${randomBytes(4).toString("hex")}`;
      const child = containerName();
      try {
        const t = performance.now();
        await mustRun(p.podman.bin, p.podman.args("commit", "-q", parent, tag), { timeoutMs: 600_000 });
        await startContainer(p, tag, child);
        const forkMs = performance.now() - t;
        const r = await podmanExec(p, child, "echo ready");
        const firstMs = performance.now() - t;
        if (r.stdout !== "ready\n") throw new Error(`podman exec: ${r.stderr.trim().slice(-200)}`);
        if (i === 0) continue;
        fork.push(forkMs);
        first.push(firstMs);
      } finally {
        await removeContainers(p, [child]);
        await timedRun(p.podman.bin, p.podman.args("rmi", "-f", tag), { timeoutMs: 120_000 });
      }
    }
    return {
      available: true,
      label: "podman commit + run",
      method:
        "the same work in a container; podman commit -q <parent> <tag>, podman run -d <tag> sleep 2h; then " +
        "podman exec echo ready (the parent keeps running; --pause default: paused during the commit)",
      fork: summarize(fork),
      firstOutput: summarize(first),
    };
  } catch (e) {
    return na(`podman fork failed: ${errMsg(e)}`);
  } finally {
    await removeContainers(p, [parent]);
  }
}
