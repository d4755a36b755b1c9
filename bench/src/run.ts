/** Runs every workload side by side and assembles the results (see README.md for what each one measures). */
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { cpus, hostname, loadavg, release, totalmem } from "node:os";
import { findTool } from "../../src/sandbox/host.js";
import { benchConcurrency, coldStampede } from "./concurrency.js";
import { benchEvalEngine, benchEvalPodman, benchEvalSteps, prepareNode } from "./evaluation.js";
import { Podman } from "./podman.js";
import { timedRun } from "./proc.js";
import { benchReady } from "./ready.js";
import { benchRollout } from "./rollout.js";
import { computeRatios, computeTargets } from "./report.js";
import { benchDashboard } from "./dashboard.js";
import { benchServerLoad } from "./server-load.js";
import { benchSessionHttp, benchSessionInProcess } from "./session.js";
import { defaultWorkDir, setupEnvironment, type BenchEnvironment } from "./setup.js";
import { benchStorage } from "./storage.js";
import { benchFleet } from "./fleet.js";
import { benchCliStart } from "./cli-start.js";
import { benchImages } from "./images.js";
import { benchPreparation, defaultSympyRepo } from "./preparation.js";
import { benchColdStart } from "./cold-start.js";
import type { BenchResults, Unavailable } from "./types.js";

const PODMAN_STORAGE_METHOD =
  "overlay layer dirs of the N images (du, each layer once): all of them — base OS, toolchain and env layers, " +
  "what podman really keeps on disk for these images (storage_vs_podman) — and the env layers alone " +
  "(storage_vs_podman_env_layers)";

export type Workload =
  | "ready"
  | "storage"
  | "concurrency"
  | "session"
  | "evaluation"
  | "server"
  | "rollout"
  | "fleet"
  | "dashboard"
  | "cli"
  | "images"
  | "coldstart"
  | "preparation";
export const ALL_WORKLOADS: Workload[] = [
  "ready",
  "storage",
  "concurrency",
  "session",
  "evaluation",
  "server",
  "rollout",
  "fleet",
  "dashboard",
  "cli",
  "images",
  "coldstart",
  "preparation",
];
/** What `--dataset` runs (workloads 1, 2, 5 and 7); the others do not depend on the environment. */
export const DATASET_WORKLOADS: Workload[] = ["ready", "storage", "evaluation", "rollout"];

export interface BenchOptions {
  quick?: boolean;
  /** Dataset instead of the fixture (SWE-bench format), with its repositories and spec overrides. */
  dataset?: string;
  repos?: string;
  specs?: string;
  /** Module the real first command imports (default: guessed from the repository). */
  importModule?: string;
  /** Where built environments, archives and podman images are kept between runs. */
  work?: string;
  /**
   * Fixture only: approximate size of the fixture repository's git pack in MiB, generated before the calc commits.
   * Default 0 (the small repository alone: what tests want); the CLI passes DEFAULT_HISTORY_MIB.
   */
  historyMiB?: number;
  /** Overrides of the sizes (the test uses tiny ones). */
  runs?: number;
  storageNs?: number[];
  /** Images workload: N images pulled, disk use after each N (default storageNs, else 1, 5, 20; --quick 1, 3). */
  imagesNs?: number[];
  concurrency?: number[];
  /** Measure idle memory at levels up to this K. */
  memoryUpToK?: number;
  sessionCommands?: number;
  evalInstances?: number;
  evalWorkers?: number;
  coldStampedeK?: number;
  /** Server load: clients (one sandbox each) x commands, and sandboxes live at the SIGKILL. */
  serverSandboxes?: number;
  serverCommands?: number;
  serverKillWithLive?: number;
  /** Rollout workload: groups per variant, trajectories per variant, forks. */
  rolloutRounds?: number;
  rolloutTrajectories?: number;
  rolloutForks?: number;
  /** Rollouts live at once in the rollout workload's scale run (512: DeepSWE's parallel containers). */
  rolloutLive?: number;
  /** false: skip the HTTP round trip (http.ts). */
  sessionHttp?: boolean;
  /** false: skip the eval runner's own benchmark (eval-engine.ts). */
  evalEngine?: boolean;
  /** Fleet: instances of the 1-vs-3-node run (default 6, quick 4); a Python with Ray (default: python3). */
  fleetInstances?: number;
  /** Rounds of the command-line workload (default 15, --quick 5). */
  cliRuns?: number;
  /** Workload 12: rounds, and the size of its generated tree (default 40 000 files). */
  coldRuns?: number;
  coldTreeFiles?: number;
  rayPython?: string;
  /** false: skip the fleet's simulated Ray cluster (the layer transfer still runs). */
  fleetCluster?: boolean;
  /** Workload 13: a git repository of sympy/sympy, base commits per version, spec overrides for its builds. */
  sympyRepo?: string;
  sympyPerVersion?: number;
  sympySpecs?: string;
  /** Workload 13: only these versions (default: every version it knows). */
  sympyVersions?: string[];
  /** false: do not use podman even if installed. */
  podman?: boolean;
  workloads?: Workload[];
  buildWorkers?: number;
  log?: (msg: string) => void;
}

/**
 * Real SWE-bench testbeds are mostly git history (sympy: a 203 MB pack in a 247 MB testbed): the CLI's
 * fixture has a pack that size, for the full run and --quick alike, so that both measure the same workspace and share
 * one set of built environments, archives and images.
 */
export const DEFAULT_HISTORY_MIB = 200;

export function sizesFor(
  o: BenchOptions,
): Required<
  Pick<
    BenchOptions,
    | "runs"
    | "storageNs"
    | "concurrency"
    | "memoryUpToK"
    | "sessionCommands"
    | "evalInstances"
    | "evalWorkers"
    | "coldStampedeK"
    | "rolloutRounds"
    | "rolloutTrajectories"
    | "rolloutForks"
    | "rolloutLive"
    | "historyMiB"
    | "imagesNs"
  >
> {
  const quick = o.quick ?? false;
  return {
    historyMiB: o.historyMiB ?? 0,
    runs: o.runs ?? (quick ? 6 : 25),
    storageNs: o.storageNs ?? [1, 5, 20],
    // The images workload builds one image per instance (once per machine and history size): --quick builds 3.
    imagesNs: o.imagesNs ?? o.storageNs ?? (quick ? [1, 3] : [1, 5, 20]),
    concurrency: o.concurrency ?? [1, 8, 32, 128],
    memoryUpToK: o.memoryUpToK ?? (quick ? 32 : 128),
    sessionCommands: o.sessionCommands ?? (quick ? 100 : 500),
    evalInstances: o.evalInstances ?? (quick ? 2 : o.dataset ? 5 : 10),
    evalWorkers: o.evalWorkers ?? 2,
    coldStampedeK: o.coldStampedeK ?? 16,
    rolloutRounds: o.rolloutRounds ?? (quick ? 3 : 10),
    rolloutTrajectories: o.rolloutTrajectories ?? (quick ? 2 : 5),
    rolloutForks: o.rolloutForks ?? (quick ? 10 : 30),
    rolloutLive: o.rolloutLive ?? (quick ? 128 : 512),
  };
}

function osName(): string {
  try {
    return /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync("/etc/os-release", "utf8"))?.[1] ?? "Linux";
  } catch {
    return "Linux";
  }
}

type PartialResults = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type Sizes = ReturnType<typeof sizesFor>;

/** What every workload of one run shares. */
interface BenchRun {
  o: BenchOptions;
  size: Sizes;
  env: BenchEnvironment;
  work: string;
  podman: Podman | Unavailable;
  results: PartialResults;
  notes: string[];
  log: (msg: string) => void;
}

const na = (reason: string): Unavailable => ({ available: false, reason });
const fleetInstances = (o: BenchOptions): number => o.fleetInstances ?? (o.quick ? 4 : 6);
const notRun = (what: string): Unavailable => na(`${what} not run in this configuration`);

export async function runBench(o: BenchOptions = {}): Promise<BenchResults> {
  process.env.PIP_RETRIES ??= "0";
  const log = o.log ?? ((m: string) => process.stderr.write(`bench: ${m}\n`));
  const t0 = performance.now();
  const loadStart = Math.round(loadavg()[0]! * 100) / 100;
  const size = sizesFor(o);
  if (!Number.isInteger(size.historyMiB) || size.historyMiB < 0)
    throw new Error(`historyMiB must be a non-negative integer, got ${size.historyMiB}`);
  const workloads = new Set(o.workloads ?? (o.dataset ? DATASET_WORKLOADS : ALL_WORKLOADS));
  const work = o.work ?? defaultWorkDir();
  const notes: string[] = [];
  const phaseMs: Record<string, number> = {};
  let phaseStart = performance.now();
  const phase = (name: string): void => {
    const now = performance.now();
    phaseMs[name] = Math.round(now - phaseStart);
    phaseStart = now;
  };
  const env = await setupFor(o, size, workloads, work, notes, log);
  const podman = await openPodman(o, workloads, work, notes, log);
  phase("setup");
  const results = await skeleton({ o, size, env, podman, loadStart, phaseMs, notes });
  const run: BenchRun = { o, size, env, work, podman, results, notes, log };
  for (const w of ALL_WORKLOADS) {
    if (workloads.has(w)) {
      await WORKLOADS[w](run);
      phase(w);
    } else skipped(run, w);
  }
  results.durationMs = Math.round(performance.now() - t0);
  results.machine.loadAverageEnd = Math.round(loadavg()[0]! * 100) / 100;
  const m = results.machine;
  if (Math.max(m.loadAverageStart, m.loadAverageEnd) > m.cpus) {
    notes.push(
      `the machine was busy with other work (1-min load ${m.loadAverageStart} at start, ${m.loadAverageEnd} at end, ` +
        `${m.cpus} CPUs): absolute times are inflated; ratios are taken side by side in the same rounds`,
    );
  }
  const withRatios = { ...results, ...computeRatios(results) };
  return { ...withRatios, targets: computeTargets(withRatios) };
}

/** The environments: built once (the largest N any workload needs), then reused by later runs. */
async function setupFor(
  o: BenchOptions,
  size: Sizes,
  workloads: Set<Workload>,
  work: string,
  notes: string[],
  log: (msg: string) => void,
): Promise<BenchEnvironment> {
  const maxInstances = Math.max(
    1,
    ...(workloads.has("storage") ? size.storageNs : [1]),
    workloads.has("evaluation") ? size.evalInstances : 1,
    workloads.has("fleet") ? fleetInstances(o) : 1,
  );
  log(`environments in ${work} (built once, reused by later runs)`);
  const env = await setupEnvironment({
    work,
    maxInstances,
    historyMiB: size.historyMiB,
    dataset: o.dataset,
    reposDir: o.repos,
    specsFile: o.specs,
    importModule: o.importModule,
    workers: o.buildWorkers ?? 2,
    log,
  });
  notes.push(...env.notes);
  if (env.built) {
    const s = (env.buildMs / 1000).toFixed(0);
    notes.push(`this run built ${env.built} environment(s) first (${s} s); later runs reuse them (see --work)`);
  }
  return env;
}

/** podman for the baselines, when enabled, installed and a workload needs it. */
async function openPodman(
  o: BenchOptions,
  workloads: Set<Workload>,
  work: string,
  notes: string[],
  log: (msg: string) => void,
): Promise<Podman | Unavailable> {
  const needsPodman = ["ready", "storage", "evaluation", "rollout", "cli"].some((w) => workloads.has(w as Workload));
  if (o.podman === false || !needsPodman) return na("disabled for this run");
  const podman = await Podman.open(work, log).catch((e: unknown) =>
    na(`podman setup failed: ${(e as Error).message.split("\n")[0]}`),
  );
  if (!(podman instanceof Podman)) {
    notes.push(`podman baselines not measured: ${podman.reason}`);
    log(`podman baselines unavailable: ${podman.reason}`);
  }
  return podman;
}

/** The results before any workload ran: machine, source, and every workload "not run". */
async function skeleton(x: {
  o: BenchOptions;
  size: Sizes;
  env: BenchEnvironment;
  podman: Podman | Unavailable;
  loadStart: number;
  phaseMs: Record<string, number>;
  notes: string[];
}): Promise<PartialResults> {
  const { env, podman } = x;
  return {
    schema: 1,
    tool: "minisandbox bench",
    date: new Date().toISOString(),
    quick: x.o.quick ?? false,
    durationMs: 0,
    phaseMs: x.phaseMs,
    machine: await machineInfo(podman, x.loadStart),
    source: sourceInfo(env),
    ready: { runs: x.size.runs, variants: {} as BenchResults["ready"]["variants"] },
    storage: {
      repo: env.repo,
      points: [],
      podman: podman instanceof Podman ? { available: true, method: PODMAN_STORAGE_METHOD } : podman,
    },
    concurrency: { levels: [], k128_failures: null, cold_stampede: null },
    session: { inProcess: notRun("session round trip"), http: notRun("HTTP round trip") },
    serverLoad: notRun("server load"),
    fleet: notRun("many nodes"),
    dashboard: notRun("dashboard"),
    cli: notRun("command line"),
    coldStart: notRun("cold start"),
    evaluation: {
      minisandbox_engine: notRun("evaluation"),
      minisandbox_steps: notRun("evaluation"),
      podman: podman instanceof Podman ? notRun("evaluation") : podman,
    },
    rollout: notRun("rollout"),
    images: notRun("images"),
    preparation: notRun("preparation"),
    notes: x.notes,
  };
}

async function machineInfo(podman: Podman | Unavailable, loadStart: number): Promise<BenchResults["machine"]> {
  const bwrap = findTool("bwrap");
  return {
    hostname: hostname(),
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? "unknown",
    memoryBytes: totalmem(),
    kernel: release(),
    os: osName(),
    node: process.version,
    bwrap: bwrap ? (await timedRun(bwrap, ["--version"])).stdout.trim().replace(/^bubblewrap /, "") : null,
    podman: podman instanceof Podman ? podman.version : null,
    podmanRuntime: podman instanceof Podman ? podman.runtime : null,
    loadAverageStart: loadStart,
    loadAverageEnd: loadStart,
  };
}

function sourceInfo(env: BenchEnvironment): BenchResults["source"] {
  return {
    kind: env.kind,
    dataset: basename(env.datasetPath), // a name, not this machine's path
    repo: env.repo,
    instances: env.instances.length,
    python: env.toolchain.version,
    instance: env.primary.instance_id,
    envKey: env.primaryKey,
    importModule: env.importModule,
    historyMiB: env.historyMiB,
    testbedHistory: env.primarySpec.history ?? "chronological",
    testbedBytes: env.testbedBytes,
    gitPackBytes: env.gitPackBytes,
    venvBytes: env.venvBytes,
    buildMs: Math.round(env.buildMs),
    builtEnvironments: env.built,
  };
}

const READY_VARIANTS = [
  "minisandbox_warm",
  "minisandbox_warm_resolved",
  "minisandbox_cold",
  "bwrap_raw",
  "extract_per_task",
  "podman",
] as const;

/** What a workload left out of this run says in the results. */
function skipped(run: BenchRun, w: Workload): void {
  if (w === "ready") for (const n of READY_VARIANTS) run.results.ready.variants[n] = notRun("workspace ready");
  if (w === "concurrency" && run.o.dataset)
    run.notes.push(
      "concurrency and session round trip are environment-independent: not run with --dataset (run without it)",
    );
}

const WORKLOADS: Record<Workload, (run: BenchRun) => Promise<void>> = {
  async ready({ results, env, work, size, podman, log }) {
    log(`workload 1: workspace ready, ${size.runs} rounds`);
    results.ready.variants = await benchReady({ env, work, runs: size.runs, podman, log });
  },
  async storage({ results, env, work, size, podman, notes, log }) {
    log(`workload 2: storage for N = ${size.storageNs.join(", ")}`);
    const s = await benchStorage({ env, work, ns: size.storageNs, podman, log });
    results.storage.points = s.points;
    if (s.podmanNote) notes.push(`storage: ${s.podmanNote}`);
  },
  async concurrency({ results, env, size, log }) {
    log(`workload 3: concurrency K = ${size.concurrency.join(", ")}`);
    const c = results.concurrency;
    c.levels = await benchConcurrency({ env, levels: size.concurrency, memoryUpToK: size.memoryUpToK, log });
    c.k128_failures = c.levels.find((l) => l.k === 128)?.failures ?? null;
    if (size.coldStampedeK > 0)
      c.cold_stampede = { k: size.coldStampedeK, ...(await coldStampede(env, size.coldStampedeK)) };
  },
  async session({ o, results, env, size, log }) {
    log("workload 4: session round trip");
    results.session.inProcess = await benchSessionInProcess(env, size.sessionCommands);
    if (o.sessionHttp !== false) results.session.http = await benchSessionHttp(env, { quick: o.quick ?? false, log });
  },
  async server({ o, results, work, log }) {
    const q = o.quick ?? false;
    const sizes = {
      sandboxes: o.serverSandboxes ?? (q ? 16 : 128),
      commandsPerSandbox: o.serverCommands ?? (q ? 20 : 100),
      killWithLive: o.serverKillWithLive ?? (q ? 8 : 32),
    };
    log(`workload 6: server load, ${sizes.sandboxes} clients x ${sizes.commandsPerSandbox} commands over HTTP`);
    results.serverLoad = await benchServerLoad({ ...sizes, workDir: work }).catch((e: unknown) =>
      na(`server load failed: ${(e as Error).message.split("\n")[0]}`),
    );
  },
  async dashboard({ o, results, work, log }) {
    const q = o.quick ?? false;
    const sizes = { sandboxes: q ? 16 : 500, commands: q ? 20 : 200, watchSeconds: q ? 3 : 15 };
    log(`workload 9: the dashboard with ${sizes.sandboxes} live sandboxes`);
    results.dashboard = await benchDashboard({ ...sizes, workDir: work }).catch((e: unknown) =>
      na(`dashboard failed: ${(e as Error).message.split("\n")[0]}`),
    );
  },
  async fleet({ o, results, env, work, log }) {
    const instances = fleetInstances(o);
    log(`workload 8: many nodes (layer transfer; ${instances} instance(s) on 1 vs 3 simulated nodes)`);
    results.fleet = await benchFleet({
      env,
      work,
      instances,
      rounds: o.quick ? 1 : 3,
      sandboxRounds: o.quick ? 5 : 15,
      rayPython: o.rayPython,
      cluster: o.fleetCluster ?? true,
      log,
    });
    const c = results.fleet.available ? results.fleet.cluster : undefined;
    if (c?.available && results.fleet.available && results.fleet.cpus < 3 * 2)
      results.notes.push(
        `fleet: the 3 simulated nodes share this machine's ${results.fleet.cpus} CPUs, so 1 vs 3 nodes shows the ` +
          "fleet's overhead (placement, Ray tasks, HTTP), not a speed-up; on real machines each node brings its own",
      );
  },
  async cli({ o, results, work, podman, log }) {
    const runs = o.cliRuns ?? (o.quick ? 5 : 15);
    log(`workload 10: command line, ${runs} rounds`);
    results.cli = await benchCliStart({ work, runs, podman }).catch((e: unknown) =>
      na(`command line failed: ${(e as Error).message.split("\n")[0]}`),
    );
  },
  async coldstart({ o, results, env, work, log }) {
    const runs = o.coldRuns ?? (o.quick ? 3 : 10);
    const treeFiles = o.coldTreeFiles ?? 40_000;
    log(`workload 12: cold start, image mounted vs hard links, ${runs} rounds (and a ${treeFiles}-file tree)`);
    // The image root's image is built by podman (once per machine).
    const imageRoot = o.podman !== false;
    results.coldStart = await benchColdStart({ env, work, runs, treeFiles, imageRoot, log }).catch((e: unknown) =>
      na(`cold start failed: ${(e as Error).message.split("\n")[0]}`),
    );
  },
  async evaluation({ o, results, env, size, podman, log }) {
    const instances = env.instances.slice(0, size.evalInstances);
    const workers = size.evalWorkers;
    log(`workload 5: evaluation of ${instances.length} instance(s), ${workers} workers`);
    await prepareNode(env, instances);
    const e = results.evaluation;
    if (o.evalEngine !== false) {
      e.minisandbox_engine = await benchEvalEngine(env, instances, workers);
      if (workers > 1) e.minisandbox_engine_1worker = await benchEvalEngine(env, instances, 1);
    }
    e.minisandbox_steps = await benchEvalSteps(env, instances, workers);
    if (podman instanceof Podman) {
      e.podman = await benchEvalPodman(env, podman, instances, workers).catch((err: unknown) =>
        na(`podman evaluation failed: ${(err as Error).message.split("\n")[0]}`),
      );
    }
  },
  async images({ o, results, work, size, log }) {
    log(`workload 11: environments from images, N = ${size.imagesNs.join(", ")}`);
    results.images = await benchImages({
      work,
      ns: o.dataset ? [] : size.imagesNs,
      historyMiB: size.historyMiB,
      podman: o.podman !== false,
      runs: size.runs,
      workers: size.evalWorkers,
      log,
    }).catch((err: unknown) => na(`images workload failed: ${(err as Error).message.split("\n")[0]}`));
  },
  async preparation({ o, results, work, log }) {
    const perVersion = o.sympyPerVersion ?? (o.quick ? 1 : 3);
    const repo = o.sympyRepo ?? defaultSympyRepo();
    log(`workload 13: preparation and storage on real sympy, ${perVersion} commit(s) per version`);
    const versions = o.sympyVersions;
    const specsFile = o.sympySpecs;
    results.preparation = await benchPreparation({ repo, perVersion, versions, specsFile, work, log }).catch(
      (err: unknown) => na(`preparation failed: ${(err as Error).message.split("\n")[0]}`),
    );
  },
  async rollout({ results, env, size, podman, log }) {
    log("workload 7: rollouts (group of 8 ready, overhead per trajectory, fork, reset, live rollouts at once)");
    await prepareNode(env, [env.primary]);
    results.rollout = await benchRollout({
      env,
      podman,
      rounds: size.rolloutRounds,
      trajectories: size.rolloutTrajectories,
      forks: size.rolloutForks,
      live: size.rolloutLive,
      log,
    }).catch((err: unknown) => na(`rollout workload failed: ${(err as Error).message.split("\n")[0]}`));
  },
};
