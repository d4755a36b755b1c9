/** The results file's shape (bench/results/<date>.json, `--out DIR` -> DIR/results.json). See README.md. */

import type { Dist } from "../../src/util/stats.js";
import type { DashboardBenchResult } from "./dashboard.js";
import type { ServerLoadResult } from "./server-load.js";
export type { Dist, ServerLoadResult };

/** A baseline or workload that could not run: why, and what to do about it. */
export interface Unavailable {
  available: false;
  reason: string;
}

/** What `python -v` says about bytecode caches in one variant: nothing compiled from source, nothing written. */
export interface PycCheck {
  /** Modules compiled from source (a stale or missing .pyc) during the checked import. */
  compiledFromSource: number;
  /** .pyc files the interpreter wrote (0 with a valid cache). */
  written: number;
  /** .pyc files newer than the run's start found in the workspace after the timed runs (where observable). */
  newerAfterTimedRuns: number | null;
  /** sys.dont_write_bytecode inside (must be false: a clean environment). */
  dontWriteBytecode: boolean | null;
  ok: boolean;
  /** First offending paths, for diagnosis. */
  examples: string[];
}

export interface ReadyVariant {
  available: true;
  label: string;
  /** How it is measured (command line shape). */
  method: string;
  /** Trivial first command (`echo`): the workspace's own cost. */
  echo: Dist;
  /** Real first command (`python -c "import <pkg>"`), from a fresh workspace as well. */
  import: Dist | null;
  pyc: PycCheck | null;
  /** Failed runs (must be 0). */
  failures: number;
}

export type ReadyVariantName =
  | "minisandbox_warm"
  | "minisandbox_warm_resolved"
  | "minisandbox_cold"
  | "bwrap_raw"
  | "extract_per_task"
  | "podman";

export interface StoragePoint {
  n: number;
  /** The store: objects referenced by the N layers (each once) + their manifests. The ratios use this. */
  minisandboxStoreBytes: number;
  /** The store plus the node cache with all N layers materialized (its files are hard links, its directories not). */
  minisandboxBytes: number;
  /** Sum over the files' sizes (what the layers would take undeduplicated). */
  minisandboxLogicalBytes: number;
  /** One venv.tar.gz + testbed.tar.gz per task. */
  targzBytes: number;
  /** Podman's env layers alone for the N images (shared layers once), without the base OS and toolchain layers. */
  podmanBytes: number | null;
  /** Podman's actual disk use for the N images: every layer once, base OS and toolchain included. */
  podmanTotalBytes: number | null;
  /** Sum of `podman images` sizes (shared layers counted once per image, as podman lists them). */
  podmanListedBytes: number | null;
}

export interface ConcurrencyLevel {
  k: number;
  /** From the first create to the last sandbox's first output. */
  wallMs: number;
  /** Per sandbox: create -> first output, all started at once. */
  perSandbox: Dist | null;
  failures: number;
  errors: string[];
  /** Idle sandbox with one open session: sum over its processes. */
  rssPerIdleBytes: number | null;
  pssPerIdleBytes: number | null;
  processesPerIdle: number | null;
}

export interface EvalMeasurement {
  available: true;
  label: string;
  instances: number;
  workers: number;
  wallMs: number;
  instancesPerMinute: number;
  /** Instances graded resolved with the gold patch (must equal `instances`). */
  resolved: number;
  /** Per instance: create/run -> graded. */
  perInstance: Dist | null;
  /** Mean time per instance outside the test run itself (sandbox, patch, grading, cleanup), where measured. */
  overheadMs?: number;
  detail?: unknown;
}

/** Workload 8: one layer from a node's server into a fresh store, four ways (median of `rounds`). */
export interface LayerTransfer {
  available: true;
  /** Sum of the layer's file sizes (what every rate below divides). */
  layerBytes: number;
  files: number;
  /** The same layer as one tar+zstd pack. */
  packBytes: number;
  rounds: number;
  methods: Record<"http_objects" | "http_pack" | "shared_dir" | "plain_copy", { ms: number; mbPerS: number }>;
  /** A second layer of the same repository, after the first: what actually moves. */
  incremental: {
    ms: number;
    objectsMoved: number;
    bytesMoved: number;
    objectsPresent: number;
    layerBytes: number;
  } | null;
}

export interface FleetEvaluation {
  nodes: number;
  instances: number;
  wallMs: number;
  instancesPerMinute: number;
  resolved: number;
  errors: number;
  placed: Record<string, number>;
}

/** Workload 8 on a 3-node Ray cluster simulated on this host. */
export interface FleetCluster {
  available: true;
  clusterUpMs: number;
  serversUpMs: number;
  /** Placement's decision alone (choose + done), microseconds. */
  decisionUs: number;
  prefetchMs: number;
  /**
   * One sandbox at a time (create, `true`, delete): directly on a node vs through the fleet (placement + Ray task),
   * in alternating rounds; the overhead is the median of the paired differences.
   */
  sandbox: { rounds: number; directP50Ms: number; fleetP50Ms: number; overheadP50Ms: number };
  sandboxBurst: { sandboxes: number; wallMs: number; perSecond: number; errors: number };
  evaluation: { oneNode: FleetEvaluation; threeNodes: FleetEvaluation };
  /** The 3-node run's summary equals the 1-node run's, byte for byte. */
  sameReport: boolean;
  /** Layer fetches over the whole run: at most one per node and layer is the rule. */
  fetches: { total: number; maxPerNodeAndLayer: number };
}

export interface FleetResult {
  available: true;
  cpus: number;
  transfer: LayerTransfer | Unavailable;
  cluster: FleetCluster | Unavailable;
}

export interface GroupReady {
  available: true;
  label: string;
  method: string;
  /** From the request to the first command's output in every member of the group. */
  allReady: Dist;
  failures: number;
}

export interface TrajectoryOverhead {
  available: true;
  label: string;
  method: string;
  trajectories: number;
  /** Trajectories graded resolved (the agent's work is the gold patch: must equal `trajectories`). */
  resolved: number;
  /** Per trajectory: wall time minus the agent's commands minus the test run. */
  overhead: Dist;
  /** Mean of each part of the overhead (start, diff, reward outside the tests, close). */
  meanParts: Record<string, number>;
}

export interface ForkLatency {
  available: true;
  label: string;
  method: string;
  /** Fork request → child started. */
  fork: Dist;
  /** Fork request → the child's first command output. */
  firstOutput: Dist;
}

/** A rollout reset to its group's start in place, and checkpointed, after some work (tree-search.ts). */
export interface TreeSearchLatency {
  available: true;
  method: string;
  /** Rollout.reset() → resolved. */
  reset: Dist;
  /** Rollout.reset() → the first command's output after it. */
  resetFirstOutput: Dist;
  checkpoint: Dist;
}

/** Many live rollouts at once, each running a command, and the memory of an idle one (tree-search.ts). */
export interface LiveRollouts {
  available: true;
  rollouts: number;
  startMs: number;
  commandsMs: number;
  errors: number;
  errorSamples: string[];
  rssPerIdleBytes: number;
  pssPerIdleBytes: number;
  /** Processes per idle rollout (pid 1, the launch, the next command's helper). */
  processes: number;
}

/** Workload 7: rollouts for RL trainers, side by side with mini-swe-agent's podman environment. */
export interface RolloutResults {
  available: true;
  groupSize: number;
  rounds: number;
  group: Record<"minisandbox" | "minisandbox_warm_pool" | "podman", GroupReady | Unavailable>;
  trajectory: Record<"minisandbox" | "minisandbox_in_place" | "podman", TrajectoryOverhead | Unavailable>;
  fork: Record<"minisandbox" | "podman_commit", ForkLatency | Unavailable>;
  reset: TreeSearchLatency | Unavailable;
  live: LiveRollouts | Unavailable;
}

/** Workload 11: one image's pull by each side (the image's position in the sequence, 1 = the first). */
export interface ImagePull {
  image: number;
  minisandboxMs: number;
  podmanMs: number | null;
}

/** Workload 11: N instance images of one repository pulled from a loopback registry, side by side with podman. */
export interface ImagesResult {
  available: true;
  images: number;
  /** The fixture repository's generated history in MiB (in every instance image's /testbed). */
  historyMiB: number;
  pulls: ImagePull[];
  /** Disk use after the N-th pull: the store, and podman's graph root. */
  points: { n: number; minisandboxStoreBytes: number; podmanBytes: number | null }[];
  /** Mean of the 2nd…Nth pulls (base and env layers already present). */
  laterPullMeanMs: { minisandbox: number | null; podman: number | null };
  /** Create → first output on the first pulled image: a sandbox on its root (warm) vs `podman run` of it. */
  ready: ImagesReady | Unavailable;
  /** Gold predictions graded on the pulled instance images: the eval engine vs the same script in `podman run`. */
  evaluation: ImagesEvaluation | Unavailable;
}

/** Workload 11: the two ways of running the pulled image, `runs` interleaved rounds of `echo` and the import. */
export interface ImagesReady {
  available: true;
  image: string;
  runs: number;
  importModule: string;
  variants: Record<"minisandbox_warm" | "podman", ReadyVariant | Unavailable>;
}

/** Workload 11: evaluation on the instance images (a dataset whose rows name them) and on the same in podman. */
export interface ImagesEvaluation {
  available: true;
  instances: number;
  workers: number;
  minisandbox: EvalMeasurement | Unavailable;
  podman: EvalMeasurement | Unavailable;
}

export interface Target {
  name: string;
  target: string;
  measured: string;
  met: boolean | null;
}

export interface BenchResults {
  schema: 1;
  tool: "minisandbox bench";
  date: string;
  quick: boolean;
  durationMs: number;
  /** Wall time of each phase (setup = environments, archives' cache check, podman storage). */
  phaseMs: Record<string, number>;
  machine: {
    hostname: string;
    cpus: number;
    cpuModel: string;
    memoryBytes: number;
    kernel: string;
    os: string;
    node: string;
    bwrap: string | null;
    podman: string | null;
    podmanRuntime: string | null;
    /** 1-minute load average when the run started and when it ended (other work on the machine skews timings). */
    loadAverageStart: number;
    loadAverageEnd: number;
  };
  source: {
    kind: "fixture" | "dataset";
    /** The dataset file's name (never a path of the machine that ran the bench). */
    dataset: string;
    repo: string;
    instances: number;
    python: string;
    /** The instance every single-environment workload uses. */
    instance: string;
    envKey: string;
    importModule: string;
    /** Fixture only: the generated git history's size in MiB (0 = the calc repository alone); null for datasets. */
    historyMiB: number | null;
    /** The testbeds' git history: up to the base commit (the default) or the source's whole history. */
    testbedHistory: "chronological" | "full";
    /** Apparent bytes of the primary instance's testbed (checkout + .git). */
    testbedBytes: number;
    /** Of which its git packs (.git/objects/pack/*.pack). */
    gitPackBytes: number;
    venvBytes: number;
    /** Time to build the environments this run needed (0 when all came from the bench's cache). */
    buildMs: number;
    builtEnvironments: number;
  };
  ready: { runs: number; variants: Record<ReadyVariantName, ReadyVariant | Unavailable> };
  storage: { repo: string; points: StoragePoint[]; podman: Unavailable | { available: true; method: string } };
  concurrency: {
    levels: ConcurrencyLevel[];
    /** Failures at K = 128 (null when that level did not run). */
    k128_failures: number | null;
    /** K sandboxes at once on an evicted layer: it must be materialized exactly once. */
    cold_stampede: { k: number; wallMs: number; failures: number; materializations: number } | null;
  };
  session: { inProcess: Dist | Unavailable; http: Record<string, unknown> | Unavailable };
  /** Workload 6: a real `serve` process under load, killed with SIGKILL and restarted, abandoned by clients. */
  serverLoad: ServerLoadResult | Unavailable;
  /** Workload 8: many nodes (layer transfer; the fleet on a simulated Ray cluster). */
  fleet: FleetResult | Unavailable;
  /** Workload 9: the dashboard with hundreds of live sandboxes, and what watching costs the API. */
  dashboard: DashboardBenchResult | Unavailable;
  /** Workload 10: the command line's own start, beside node's empty script and podman run. */
  cli: CliStartResult | Unavailable;
  /** Workload 12: cold start, a layer's metadata image mounted vs materialized by hard links. */
  coldStart: ColdStartResult | Unavailable;
  /** Workload 13: preparation and storage on the real sympy repository, commits across its versions. */
  preparation?: PreparationResult | Unavailable;
  evaluation: {
    minisandbox_engine: EvalMeasurement | Unavailable;
    /** The same with one worker (overhead is judged at 1 and 2), when the main run uses more. */
    minisandbox_engine_1worker?: EvalMeasurement | Unavailable;
    minisandbox_steps: EvalMeasurement | Unavailable;
    podman: EvalMeasurement | Unavailable;
  };
  rollout: RolloutResults | Unavailable;
  /** Workload 11: OCI images pulled from a loopback registry, side by side with podman pull. */
  images: ImagesResult | Unavailable;
  ratios: {
    warm_vs_extract: number | null;
    warm_vs_podman: number | null;
    cold_vs_extract: number | null;
    storage_vs_targz: number | null;
    /** podman's actual disk use for the N images (every layer once, base OS and toolchain included) ÷ store. */
    storage_vs_podman: number | null;
    /** Stricter: podman's env layers alone (no base OS, no toolchain, which a sandbox takes from the host) ÷ store. */
    storage_vs_podman_env_layers: number | null;
    warm_import_vs_extract_import: number | null;
    warm_import_vs_podman_import: number | null;
    /** Throughput of the eval engine (else the same steps) over podman's. */
    eval_vs_podman: number | null;
    /** The very same script through Sandbox.create + exec vs podman run -i. */
    eval_steps_vs_podman: number | null;
    /** Group of 8 ready, p50: podman (mini-swe-agent's environment) ÷ startGroup (no warm pool). */
    rollout_group_vs_podman: number | null;
    /** The same with the group taken from the warm pool (prewarmed while the previous step trained). */
    rollout_group_pool_vs_podman: number | null;
    /** Overhead per trajectory outside agent and tests, p50: podman ÷ minisandbox (fresh-sandbox reward). */
    rollout_overhead_vs_podman: number | null;
    /** Fork → child started, p50: podman commit + run ÷ Rollout.fork. */
    fork_vs_podman_commit: number | null;
    /** Workspace ready, echo p50: raw bwrap on the same trees ÷ minisandbox warm (1 = the floor). */
    warm_vs_bwrap_raw: number | null;
    /** node starting an empty script ÷ `minisandbox --version` (1 = the floor of any Node.js command). */
    cli_version_vs_node_empty: number | null;
    /** `podman run --rm IMAGE true` ÷ `minisandbox exec --dir D -- true`, whole processes. */
    cli_exec_vs_podman_run: number | null;
    /** Layer into a fresh node: HTTP (missing objects) MB/s ÷ `cp -a` of the materialized tree MB/s. */
    transfer_http_vs_copy: number | null;
    /** Cold start p50, environment layer: materialized by hard links ÷ its metadata image mounted. */
    cold_image_vs_links: number | null;
    /** The same on the generated tree (an image root's size). */
    cold_image_vs_links_tree: number | null;
    /** The same on an OCI image's root filesystem of about as many files (several owners, links). */
    cold_image_vs_links_rootfs: number | null;
    /** Images: podman's graph root ÷ the store after the largest N. */
    images_storage_vs_podman: number | null;
    /** Images: the mean of the 2nd…Nth pulls, podman ÷ minisandbox. */
    images_pull_vs_podman: number | null;
    /** Images: create → `echo` p50 on the first image, `podman run` of it ÷ a sandbox on its root (warm). */
    images_warm_vs_podman: number | null;
    /** Images: gold evaluation on the instance images, minisandbox's instances/min ÷ podman's. */
    images_eval_vs_podman: number | null;
  };
  /** Why a ratio is null. */
  ratio_reasons: Record<string, string>;
  targets: Target[];
  notes: string[];
}

/** One layer's cold starts (evicted, then until `echo ready`), in both forms. */
export interface ColdStartLayer {
  name: string;
  /** File names (hard links counted), and every entry (dirs and symlinks too). */
  files: number;
  entries: number;
  /**
   * `ready`: evicted → first output; `place`: the image placed (linked from the store), or the layer materialized,
   * alone; `write`: the image written into the store, which a build, a fetch or a pull does ahead.
   */
  image: { ready: Dist; place: Dist; write: Dist };
  links: { ready: Dist; place: Dist };
}

export interface ColdStartResult {
  available: true;
  runs: number;
  /** Why this node mounts images (the cache's form choice). */
  reason: string;
  layers: ColdStartLayer[];
}

/** Workload 9: whole-process wall times, medians of `runs` interleaved rounds. */
export interface CliStartResult {
  available: true;
  runs: number;
  /** node starting an empty script: the floor of any command written for Node.js. */
  nodeEmptyMs: number;
  /** `minisandbox --version`. */
  versionMs: number;
  /** `minisandbox exec --dir D -- true`, end to end (start, sandbox, command, cleanup). */
  execMs: number;
  /** `podman run --rm --network none <base image> true`; null without podman (reason beside it). */
  podmanRunMs: number | null;
  podmanReason: string | null;
}

/** Workload 13: environments of real sympy commits across its versions, built one at a time. */
export interface PreparationResult {
  available: true;
  repo: string;
  /** Distinct environments built (one per base commit) and the versions they span. */
  tasks: number;
  versions: number;
  failed: number;
  /** Mean build time per task, every build (the first of each version installs its dependencies). */
  perTaskMs: number | null;
  /** Builds that restored their version's dependencies: how many, and their median. */
  warm: { builds: number; p50Ms: number | null };
  /** Each step's median over the warm builds. */
  steps: { name: string; p50Ms: number }[];
  /** The warm builds after the first of their version (another commit of it built before): median, steps'. */
  later: { builds: number; p50Ms: number | null; steps: { name: string; p50Ms: number }[] };
  storage: {
    /** Allocated bytes of the tasks' objects (each once) and manifests. */
    storeBytes: number;
    perTaskBytes: number;
    /** Logical bytes of the distinct objects, by what they are. */
    logicalByKind: Record<string, number>;
    /** If every object but the git packs were kept compressed (deflate, each object alone), per task. */
    compressedPerTaskBytes: number;
    /** One task's testbed.tar.gz + venv.tar.gz. */
    targzOneTaskBytes: number;
  };
}
