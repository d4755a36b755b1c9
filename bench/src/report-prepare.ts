/** Workload 13's targets and section: preparation and storage per task on real sympy. */
import type { BenchResults, Target } from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;

const MB = 1_000_000;
const mb = (n: number): string => `${(n / MB).toFixed(1)} MB`;
const s = (ms: number | null): string => (ms === null ? "n/a" : `${(ms / 1000).toFixed(1)} s`);

export function preparationTargets(r: Partial): Target[] {
  const p = r.preparation?.available ? r.preparation : undefined;
  return [
    {
      name: "environment preparation, sympy (worker time per task, dependencies restored, p50)",
      target: "≤ 5 s",
      measured: p ? `${s(p.warm.p50Ms)} (${p.warm.builds} builds; every build's mean ${s(p.perTaskMs)})` : "not run",
      met: p?.warm.p50Ms != null ? p.warm.p50Ms <= 5000 : null,
    },
    {
      name: "real sympy tasks, stored per task",
      target: "≤ 10 MB",
      measured: p ? `${mb(p.storage.perTaskBytes)} (${p.tasks} tasks, ${p.versions} versions)` : "not run",
      met: p ? p.storage.perTaskBytes <= 10 * MB : null,
    },
  ];
}

type Steps = { name: string; p50Ms: number }[];
const stepNames = (p: { steps: Steps; later: { steps: Steps } }): string[] => [
  ...new Set([...p.steps, ...p.later.steps].map((x) => x.name)),
];
const secs = (steps: Steps, name: string): string => {
  const x = steps.find((y) => y.name === name);
  return x ? (x.p50Ms / 1000).toFixed(2) : "—";
};

export function preparationLines(r: BenchResults): string[] {
  const L = ["", "## 13. Preparation and storage on real sympy (base commits across its versions)", ""];
  const p = r.preparation;
  if (!p) return [...L, "Not available — not run in this configuration"];
  if (!p.available) return [...L, `Not available — ${p.reason}`];
  const st = p.storage;
  L.push(
    `${p.tasks} environments of ${p.versions} versions built one at a time from the repository` +
      `${p.failed ? ` (${p.failed} failed)` : ""}; worker time per task: ${s(p.perTaskMs)} on average, ` +
      `${s(p.warm.p50Ms)} p50 over the ${p.warm.builds} builds that restored their version's dependencies.`,
    "",
    `Builds after another commit of their version: ${p.later.builds}, ${s(p.later.p50Ms)} p50.`,
    "",
    "| step, p50 (seconds) | warm builds | later commits of a version |",
    "|---|---:|---:|",
    ...stepNames(p).map((n) => `| ${n} | ${secs(p.steps, n)} | ${secs(p.later.steps, n)} |`),
    "",
    `Store: ${mb(st.storeBytes)} for ${p.tasks} tasks, **${mb(st.perTaskBytes)} per task** (allocated); ` +
      `one task's tar.gz pair ${mb(st.targzOneTaskBytes)}; with every object but the git packs kept compressed ` +
      `(deflate, each alone) ${mb(st.compressedPerTaskBytes)} per task.`,
    "",
    "| distinct objects, by kind | logical bytes | per task |",
    "|---|---:|---:|",
    ...Object.entries(st.logicalByKind)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `| ${k} | ${mb(v)} | ${mb(v / p.tasks)} |`),
  );
  return L;
}
