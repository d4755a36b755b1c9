/** Per-phase timings of instance evaluations, and their totals and means. */

export interface PhaseTimings {
  /** Rewards API on a live sandbox: taking the agent's diff (0 otherwise). */
  diffMs: number;
  /** Fresh sandbox of the environment ready. */
  sandboxMs: number;
  /** patch.diff written and applied (and `git diff` recorded). */
  applyMs: number;
  /** eval.sh: reinstall, test patch, the tests themselves. */
  testsMs: number;
  /** Parsing the log, grading, writing report.json. */
  gradingMs: number;
  /** Closing the sandbox. */
  cleanupMs: number;
  totalMs: number;
  /** Everything but the test run: totalMs - testsMs. */
  overheadMs: number;
}

export const PHASES = [
  "diffMs",
  "sandboxMs",
  "applyMs",
  "testsMs",
  "gradingMs",
  "cleanupMs",
  "totalMs",
  "overheadMs",
] as const;
export type Phase = (typeof PHASES)[number];

export function emptyTimings(): PhaseTimings {
  return { diffMs: 0, sandboxMs: 0, applyMs: 0, testsMs: 0, gradingMs: 0, cleanupMs: 0, totalMs: 0, overheadMs: 0 };
}

const round = (n: number): number => Math.round(n * 10) / 10;

export function roundTimings(t: PhaseTimings): PhaseTimings {
  const out = { ...t };
  for (const p of PHASES) out[p] = round(t[p]);
  return out;
}

export interface TimingStats {
  count: number;
  totals: PhaseTimings;
  means: PhaseTimings;
}

export function timingStats(all: readonly PhaseTimings[]): TimingStats {
  const totals = emptyTimings();
  for (const t of all) for (const p of PHASES) totals[p] += t[p];
  const means = emptyTimings();
  if (all.length > 0) for (const p of PHASES) means[p] = totals[p] / all.length;
  return { count: all.length, totals: roundTimings(totals), means: roundTimings(means) };
}

/** "sandbox ready 512 ms, patch apply 140 ms, tests 10230 ms, grading 3 ms, cleanup 21 ms, total 10906 ms" */
export function describeTimings(t: PhaseTimings): string {
  const ms = (n: number): string => `${Math.round(n)} ms`;
  return [
    ...(t.diffMs > 0 ? [`agent diff ${ms(t.diffMs)}`] : []),
    `sandbox ready ${ms(t.sandboxMs)}`,
    `patch apply ${ms(t.applyMs)}`,
    `tests ${ms(t.testsMs)}`,
    `grading ${ms(t.gradingMs)}`,
    `cleanup ${ms(t.cleanupMs)}`,
    `total ${ms(t.totalMs)}`,
    `overhead ${ms(t.overheadMs)}`,
  ].join(", ");
}
