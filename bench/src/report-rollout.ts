/** The rollout workload's ratios, targets and Markdown section (see rollout.ts). */
import { ratio } from "./stats.js";
import type {
  BenchResults,
  ForkLatency,
  GroupReady,
  RolloutResults,
  Target,
  TrajectoryOverhead,
  Unavailable,
} from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type RolloutRatios = Pick<
  BenchResults["ratios"],
  "rollout_group_vs_podman" | "rollout_group_pool_vs_podman" | "rollout_overhead_vs_podman" | "fork_vs_podman_commit"
>;
const KEYS: (keyof RolloutRatios)[] = [
  "rollout_group_vs_podman",
  "rollout_group_pool_vs_podman",
  "rollout_overhead_vs_podman",
  "fork_vs_podman_commit",
];

const measured = (r: Partial): RolloutResults | undefined => (r.rollout.available ? r.rollout : undefined);

const reasonOf = (ours: { available: boolean }, theirs: { available: boolean }): string =>
  (theirs.available ? (ours as Unavailable).reason : (theirs as Unavailable).reason) ?? "not measured";

export function rolloutRatios(r: Partial, reasons: Record<string, string>): RolloutRatios {
  const m = measured(r);
  if (!m) {
    for (const k of KEYS) reasons[k] = (r.rollout as Unavailable).reason;
    return Object.fromEntries(KEYS.map((k) => [k, null])) as unknown as RolloutRatios;
  }
  const pair = <T extends { available: boolean }>(
    key: keyof RolloutRatios,
    ours: T,
    theirs: T,
    p50: (x: T) => number | undefined,
  ): number | null => {
    const v = ours.available && theirs.available ? ratio(p50(theirs), p50(ours)) : null;
    if (v === null) reasons[key] = reasonOf(ours, theirs);
    return v;
  };
  const group = (x: GroupReady | Unavailable): number | undefined => (x.available ? x.allReady.p50Ms : undefined);
  const overhead = (x: TrajectoryOverhead | Unavailable): number | undefined =>
    x.available ? x.overhead.p50Ms : undefined;
  const fork = (x: ForkLatency | Unavailable): number | undefined => (x.available ? x.fork.p50Ms : undefined);
  const g = m.group;
  return {
    rollout_group_vs_podman: pair("rollout_group_vs_podman", g.minisandbox, g.podman, group),
    rollout_group_pool_vs_podman: pair("rollout_group_pool_vs_podman", g.minisandbox_warm_pool, g.podman, group),
    rollout_overhead_vs_podman: pair(
      "rollout_overhead_vs_podman",
      m.trajectory.minisandbox,
      m.trajectory.podman,
      overhead,
    ),
    fork_vs_podman_commit: pair("fork_vs_podman_commit", m.fork.minisandbox, m.fork.podman_commit, fork),
  };
}

export const ROLLOUT_RATIO_MEANINGS: Record<keyof RolloutRatios, string> = {
  rollout_group_vs_podman: "group of 8 ready, p50: podman (mini-swe-agent's environment) ÷ startGroup, no warm pool",
  rollout_group_pool_vs_podman: "group of 8 ready, p50: podman ÷ startGroup served by the warm pool (prewarmed)",
  rollout_overhead_vs_podman: "overhead per trajectory outside agent and tests, p50: podman ÷ minisandbox",
  fork_vs_podman_commit: "fork → child started, p50: podman commit + run ÷ Rollout.fork",
};

const x = (n: number | null): string => (n === null ? "n/a" : `${n.toFixed(1)}×`);
const ms = (n: number | null | undefined): string =>
  n == null || !Number.isFinite(n) ? "n/a" : n >= 100 ? `${Math.round(n)} ms` : `${n.toFixed(1)} ms`;
const mib = (bytes: number): string => `${Math.round(bytes / 1024 / 1024)} MiB`;

export function rolloutTargets(r: Omit<BenchResults, "targets">): Target[] {
  const m = measured(r);
  const q = r.ratios.rollout_group_vs_podman;
  const fork = m?.fork.minisandbox.available ? m.fork.minisandbox.fork.p50Ms : null;
  const reset = m?.reset.available ? m.reset.reset.p50Ms : null;
  const live = m?.live.available ? m.live : null;
  const ws = `testbed ${mib(r.source.testbedBytes)}, venv ${mib(r.source.venvBytes)}`;
  return [
    {
      name: "rollout group of 8 ready vs podman (mini-swe-agent's environment)",
      target: "≥ 10×",
      measured: x(q),
      met: q === null ? null : q >= 10,
    },
    {
      name: `fork of a rollout, p50 (${ws})`,
      target: "≤ 10 ms",
      measured: ms(fork),
      met: fork === null ? null : fork <= 10,
    },
    {
      name: `reset of a rollout to its group's start, in place, p50 (${ws})`,
      target: "≤ 5 ms",
      measured: ms(reset),
      met: reset === null ? null : reset <= 5,
    },
    {
      name: `${live?.rollouts ?? "512"} live rollouts at once, each running a command`,
      target: "0 errors",
      measured: live
        ? `${live.errors} errors, ${(live.pssPerIdleBytes / 1024 ** 2).toFixed(1)} MB PSS per idle one`
        : "n/a",
      met: live === null ? null : live.errors === 0,
    },
  ];
}

/** Reset, checkpoint and live-rollout rows (tree-search.ts). */
function treeSearchLines(m: RolloutResults): string[] {
  const L = ["", "### Reset and checkpoint of a live rollout", ""];
  if (!m.reset.available) L.push(`Not available: ${m.reset.reason}`);
  else {
    const t = m.reset;
    L.push("| operation | p50 | p90 |", "|---|---|---|");
    L.push(`| Rollout.reset() | ${ms(t.reset.p50Ms)} | ${ms(t.reset.p90Ms)} |`);
    L.push(`| Rollout.reset() → first output | ${ms(t.resetFirstOutput.p50Ms)} | ${ms(t.resetFirstOutput.p90Ms)} |`);
    L.push(`| Rollout.checkpoint() | ${ms(t.checkpoint.p50Ms)} | ${ms(t.checkpoint.p90Ms)} |`, "", `- ${t.method}`);
  }
  L.push("", "### Live rollouts at once", "");
  if (!m.live.available) return [...L, `Not available: ${m.live.reason}`];
  const v = m.live;
  L.push("| rollouts | started in | a command in each | errors | RSS per idle | PSS per idle | processes |");
  L.push("|---|---|---|---|---|---|---|");
  L.push(
    `| ${v.rollouts} | ${ms(v.startMs)} | ${ms(v.commandsMs)} | ${v.errors} | ` +
      `${(v.rssPerIdleBytes / 1024 ** 2).toFixed(1)} MB | ${(v.pssPerIdleBytes / 1024 ** 2).toFixed(1)} MB | ` +
      `${v.processes.toFixed(1)} |`,
  );
  if (v.errorSamples.length) L.push("", `Errors: ${v.errorSamples.join("; ")}`);
  return [
    ...L,
    "",
    "- groups of 8 (16 groups started at a time), then one command in every rollout at once; memory of an idle one " +
      "(a second later): RSS and PSS summed over its processes (pid 1, the launch, the next command's helper)",
  ];
}

export function rolloutLines(r: BenchResults): string[] {
  const L = ["", "## 7. Rollouts for RL trainers (side by side with mini-swe-agent's podman environment)", ""];
  const m = measured(r);
  if (!m) return [...L, `Not available: ${(r.rollout as Unavailable).reason}`];
  L.push(
    `### Group of ${m.groupSize} ready (request → first output in all), ${m.rounds} rounds`,
    "",
    "| variant | p50 | p90 | failures |",
    "|---|---|---|---|",
  );
  const methods: string[] = [];
  for (const [name, v] of Object.entries(m.group)) {
    if (!v.available) L.push(`| ${name} | not available: ${v.reason} | | |`);
    else {
      L.push(`| ${v.label} | ${ms(v.allReady.p50Ms)} | ${ms(v.allReady.p90Ms)} | ${v.failures} |`);
      methods.push(`- ${v.label}: ${v.method}`);
    }
  }
  L.push("", "### Overhead per trajectory outside the agent and the tests", "");
  L.push("| variant | trajectories | resolved | p50 | mean | mean parts |", "|---|---|---|---|---|---|");
  for (const [name, v] of Object.entries(m.trajectory)) {
    if (!v.available) L.push(`| ${name} | not available: ${v.reason} | | | | |`);
    else {
      const parts = Object.entries(v.meanParts)
        .map(([k, n]) => `${k.replace(/Ms$/, "")} ${ms(n)}`)
        .join(", ");
      L.push(
        `| ${v.label} | ${v.trajectories} | ${v.resolved} | ${ms(v.overhead.p50Ms)} | ${ms(v.overhead.meanMs)} | ` +
          `${parts} |`,
      );
      methods.push(`- ${v.label}: ${v.method}`);
    }
  }
  L.push("", "### Fork of a live rollout", "", "| variant | fork p50 | fork p90 | → first output p50 |");
  L.push("|---|---|---|---|");
  for (const [name, v] of Object.entries(m.fork)) {
    if (!v.available) L.push(`| ${name} | not available: ${v.reason} | | |`);
    else {
      L.push(`| ${v.label} | ${ms(v.fork.p50Ms)} | ${ms(v.fork.p90Ms)} | ${ms(v.firstOutput.p50Ms)} |`);
      methods.push(`- ${v.label}: ${v.method}`);
    }
  }
  return [...L, "", ...methods, ...treeSearchLines(m)];
}
