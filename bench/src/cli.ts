import type { Command } from "commander";
import type { BenchOptions } from "./index.js";
import { ALL_WORKLOADS, DEFAULT_HISTORY_MIB, type Workload } from "./run.js";
import { parsePositive } from "../../src/cli/common.js";

export interface BenchCliOptions {
  quick?: boolean;
  out?: string;
  dataset?: string;
  repos?: string;
  specs?: string;
  import?: string;
  work?: string;
  runs?: string;
  historyMb?: string;
  only?: string;
  podman?: boolean;
  json?: boolean;
  rayPython?: string;
  sympy?: string;
  sympyCommits?: string;
  sympySpecs?: string;
  sympyVersions?: string;
}

export function addBenchOptions(cmd: Command): Command {
  return cmd
    .option("--quick", "fewer runs (under 3 minutes once environments are built)")
    .option("--out <DIR>", "write DIR/results.json (+ .md, .svg) instead of bench/results/<date>.*")
    .option("--dataset <FILE>", "benchmark a real dataset (workloads 1, 2, 5, 7) instead of the fixture")
    .option("--repos <DIR>", "local clones or mirrors for --dataset, laid out as DIR/<owner>/<name>")
    .option("--specs <FILE>", 'environment spec overrides (JSON), e.g. {"*": {"history": "full"}}')
    .option("--import <MODULE>", "module of the real first command (default: guessed from the repository)")
    .option("--work <DIR>", "where built environments, archives and podman images are kept between runs")
    .option("--runs <N>", "rounds of the ready workload (default 25, --quick 6)")
    .option(
      "--history-mb <N>",
      "fixture: git history (pack) of about N MiB before its commits, like a real repository's " +
        `(default ${DEFAULT_HISTORY_MIB}, like sympy's; 0 = the small repository alone)`,
    )
    .option("--only <LIST>", `comma-separated workloads (${ALL_WORKLOADS.join(",")})`)
    .option("--no-podman", "skip the podman baselines even if podman is installed")
    .option("--ray-python <PATH>", "fleet workload: a Python with Ray (default $MINISANDBOX_RAY_PYTHON, else python3)")
    .option("--sympy <DIR>", "preparation workload: a git repository of sympy/sympy (default: its mirror, if any)")
    .option("--sympy-commits <N>", "preparation workload: base commits per sympy version (default 3, --quick 1)")
    .option("--sympy-specs <FILE>", "preparation workload: environment spec overrides for its builds (JSON)")
    .option(
      "--sympy-versions <LIST>",
      "preparation workload: only these sympy versions, comma-separated (e.g. 1.12,1.13)",
    )
    .option("--json", "print the results JSON instead of the Markdown table");
}

export function benchOptionsFrom(o: BenchCliOptions): BenchOptions & { outDir?: string; json?: boolean } {
  if (o.repos && !o.dataset) throw new Error("--repos goes with --dataset");
  let workloads: Workload[] | undefined;
  if (o.only) {
    workloads = o.only.split(",").map((w) => w.trim()) as Workload[];
    const bad = workloads.filter((w) => !ALL_WORKLOADS.includes(w));
    if (bad.length)
      throw new Error(`--only: unknown workload(s) ${bad.join(", ")} (known: ${ALL_WORKLOADS.join(", ")})`);
  }
  const runs = o.runs === undefined ? undefined : parsePositive(o.runs, "--runs", { integer: true });
  if (o.historyMb !== undefined && !/^\d{1,6}$/.test(o.historyMb.trim()))
    throw new Error(`--history-mb expects a non-negative integer (MiB), got ${o.historyMb}`);
  if (o.historyMb !== undefined && o.dataset)
    throw new Error("--history-mb sizes the fixture; it does not go with --dataset");
  // The CLI measures a realistic workspace by default (the API's default, for tests, is the small repository).
  const historyMiB = o.historyMb !== undefined ? Number(o.historyMb) : o.dataset ? undefined : DEFAULT_HISTORY_MIB;
  return {
    quick: o.quick ?? false,
    outDir: o.out,
    dataset: o.dataset,
    repos: o.repos,
    specs: o.specs,
    importModule: o.import,
    work: o.work,
    runs,
    historyMiB,
    workloads,
    podman: o.podman,
    rayPython: o.rayPython,
    json: o.json,
    ...(o.sympy ? { sympyRepo: o.sympy } : {}),
    ...(o.sympyCommits ? { sympyPerVersion: parsePositive(o.sympyCommits, "--sympy-commits", { integer: true }) } : {}),
    ...(o.sympySpecs ? { sympySpecs: o.sympySpecs } : {}),
    ...(o.sympyVersions ? { sympyVersions: o.sympyVersions.split(",").map((v) => v.trim()) } : {}),
  };
}
