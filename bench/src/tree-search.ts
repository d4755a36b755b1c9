/**
 * Part of workload 7: what tree search over agent states costs, on the measured workspace — a live rollout that did
 * some work (the gold patch, 1 MB in /tmp, Python run once) reset to its group's start in place, checkpointed, and
 * forked into a spare (`Rollout.fork`: see forkLatency in rollout.ts); and scale: many live rollouts at once on one
 * machine, each running a command, with the memory of an idle one.
 */
import type { Instance } from "../../src/tasks/types.js";
import { RolloutEngine, type Rollout } from "../../src/rollout/index.js";
import { readState } from "../../src/sandbox/state.js";
import { pool } from "../../src/util/progress.js";
import { memoryOf, processTable, sandboxProcesses } from "./proc.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { LiveRollouts, TreeSearchLatency, Unavailable } from "./types.js";

/** The parent's work before each operation (as in forkLatency). */
export const parentWork = (importModule: string): string =>
  `git apply - && head -c 1000000 /dev/urandom > /tmp/scratch && python -c "import ${importModule}"`;

/**
 * Between an agent's commands there is a model call: the pause lets the sandbox's next helper join its cgroups and
 * the group's spare start, as they would in a run (a cgroup v1 move waits for an RCU grace period).
 */
export const THINK_MS = 400;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const errMsg = (e: unknown): string => (e as Error).message.split("\n")[0]!.slice(0, 300);

/** Reset and checkpoint latency of a rollout after some work, `rounds` times (one warm-up). */
export async function treeSearchLatency(
  engine: RolloutEngine,
  inst: Instance,
  importModule: string,
  rounds: number,
): Promise<TreeSearchLatency | Unavailable> {
  const g = await engine.startGroup({ instance: inst.instance_id, n: 1 });
  try {
    const r = g.rollouts[0]!;
    const reset: number[] = [];
    const first: number[] = [];
    const checkpoint: number[] = [];
    for (let i = 0; i <= rounds; i++) {
      await work(r, inst, importModule);
      let t = performance.now();
      const cp = await r.checkpoint();
      const cpMs = performance.now() - t;
      await sleep(THINK_MS);
      t = performance.now();
      await r.reset();
      const resetMs = performance.now() - t;
      const echo = await r.exec("git status --short; ls /tmp");
      const firstMs = performance.now() - t;
      if (echo.stdout !== "") throw new Error(`the reset rollout is not at its start: ${echo.stdout.slice(0, 200)}`);
      await g.dropCheckpoint(cp);
      if (i === 0) continue; // warm-up: the group's pristine sandbox and first spare start here
      reset.push(resetMs);
      first.push(firstMs);
      checkpoint.push(cpMs);
    }
    return {
      available: true,
      method:
        `a rollout does the work (gold patch, 1 MB in /tmp, Python run once), then ${THINK_MS} ms (a model call), ` +
        "then Rollout.reset() back to the group's start in place (same sandbox); checkpoint: Rollout.checkpoint() " +
        "right after the work (a spare given its state)",
      reset: summarize(reset),
      resetFirstOutput: summarize(first),
      checkpoint: summarize(checkpoint),
    };
  } catch (e) {
    return { available: false, reason: `reset failed: ${errMsg(e)}` };
  } finally {
    await engine.closeGroup(g.id);
  }
}

async function work(r: Rollout, inst: Instance, importModule: string): Promise<void> {
  const w = await r.exec(parentWork(importModule), { stdin: inst.patch });
  if (w.exitCode !== 0) throw new Error(`the rollout's work failed: ${w.stderr.trim().slice(-200)}`);
  await sleep(THINK_MS);
}

/**
 * `total` live rollouts at once (groups of 8 started together), each running a command; then the memory of an idle
 * one: RSS and PSS summed over its processes (pid 1, the launch, the next command's helper).
 */
export async function liveRollouts(env: BenchEnvironment, total: number): Promise<LiveRollouts | Unavailable> {
  const engine = new RolloutEngine({
    home: env.home,
    dataset: env.instances,
    specsFile: env.specsFile,
    maxRollouts: total,
  });
  const id = env.primary.instance_id;
  const errors: string[] = [];
  let failed = 0;
  try {
    const t0 = performance.now();
    // Started 16 groups (128 sandboxes) at a time: what is measured is how many live at once, not a start stampede.
    const groups = await pool(
      Array.from({ length: Math.ceil(total / 8) }, (_, i) => i),
      16,
      () => engine.startGroup({ instance: id, n: 8 }),
    );
    const rollouts = groups.flatMap((g) => g.rollouts).slice(0, total);
    const startMs = performance.now() - t0;
    const t1 = performance.now();
    await Promise.all(
      rollouts.map(async (r) => {
        try {
          const out = await r.exec(`echo ${r.repetition} && git -C /testbed rev-parse --short HEAD >/dev/null`);
          if (out.exitCode !== 0 || out.stdout !== `${r.repetition}\n`) throw new Error(out.stderr.slice(0, 200));
        } catch (e) {
          failed++;
          if (errors.length < 3) errors.push(errMsg(e));
        }
      }),
    );
    const commandsMs = performance.now() - t1;
    await sleep(1000); // idle: each one's next helper started and waiting
    const memory = idleMemory(rollouts);
    return {
      available: true,
      rollouts: rollouts.filter((r) => r.state === "ready").length,
      startMs: Math.round(startMs),
      commandsMs: Math.round(commandsMs),
      errors: failed,
      errorSamples: errors,
      ...memory,
    };
  } catch (e) {
    return { available: false, reason: `live rollouts failed: ${errMsg(e)}` };
  } finally {
    await engine.close();
  }
}

function idleMemory(rollouts: Rollout[]): Pick<LiveRollouts, "rssPerIdleBytes" | "pssPerIdleBytes" | "processes"> {
  const table = processTable();
  let rss = 0;
  let pss = 0;
  let procs = 0;
  for (const r of rollouts) {
    const sb = r.sandbox!;
    for (const pid of sandboxProcesses(sb.pid1, table, readState(sb.paths)?.cgroups.pids)) {
      const m = memoryOf(pid);
      if (!m) continue;
      rss += m.rss;
      pss += m.pss;
      procs++;
    }
  }
  const n = Math.max(1, rollouts.length);
  return { rssPerIdleBytes: Math.round(rss / n), pssPerIdleBytes: Math.round(pss / n), processes: procs / n };
}
