/**
 * What the rollout engine takes and gives. What it gives (outcomes, rollouts, groups, prewarm reports, gold verdicts)
 * is the rollout API's wire contract (src/wire/rollout.ts) in its camelCase form: declared once there, converted by
 * the contract's own `toCamel` / `fromCamel`.
 */
import type { ImagePolicy } from "../env/instance-image.js";
import type { RewardSpec } from "../eval/grading.js";
import type { Limits } from "../sandbox/limits.js";
import type { Instance } from "../tasks/types.js";
import type { CamelOf, rollout as wire } from "../wire/index.js";

/** A rollout's reward, or the reason there is none (see the wire model for each field). */
export type RolloutOutcome = CamelOf<typeof wire.RolloutOutcome>;
/** A rollout as lists and the HTTP API show it; `trajectoryId` is `<instance_id>@<repetition>`. */
export type RolloutInfo = CamelOf<typeof wire.RolloutInfo>;
export type GroupInfo = CamelOf<typeof wire.GroupInfo>;
export type GroupTimings = CamelOf<typeof wire.GroupTimings>;
export type PrewarmTask = CamelOf<typeof wire.PrewarmTask>;
export type PrewarmReport = CamelOf<typeof wire.PrewarmReport>;
export type TestCounts = CamelOf<typeof wire.TestCounts>;
export type RolloutState = RolloutInfo["state"];
/** Why an outcome is not a reward to learn from. */
export type InfraFailureKind = CamelOf<typeof wire.RolloutFailure>["kind"];

/** Where a reward is graded: a fresh sandbox of the environment (default), or the rollout's own (the paper's way). */
export type RewardMode = RolloutOutcome["mode"];

export const REWARD_MODES: readonly RewardMode[] = ["fresh", "in_place"];

export interface RewardOptions {
  mode?: RewardMode;
  /** Whole-evaluation timeout (default: the engine's). */
  timeoutMs?: number;
  reward?: RewardSpec;
  /** Write the harness's per-instance files here. */
  logDir?: string;
}

export interface WarmPoolOptions {
  /** Sandboxes held ready at most, over all tasks: at least 1 (no `warmPool`: no pool). */
  max: number;
  /** A pool sandbox not taken within this time is closed (default 15 min). */
  ttlMs?: number;
}

export interface RolloutEngineOptions {
  /** Data directory (default: MINISANDBOX_HOME or the per-user default). */
  home?: string;
  /** Where tasks given by id are found: a dataset file or loaded instances. */
  dataset?: string | readonly Instance[];
  specsFile?: string;
  /** Every task's base image (`--base`), as `SpecSource.base` (src/env/environments.ts). */
  base?: string;
  reposDir?: string;
  /** Build a task's environment on first use if the store lacks it (default false: a clear error). */
  build?: boolean;
  /**
   * Which tasks run on an image of the store instead of an environment built from their spec (src/env/instance-image:
   * default `auto`, a row's own image_name / docker_image when the store holds it): their rollouts, pool sandboxes,
   * fresh rewards and gold checks all run on that image's root filesystem, with the spec's eval script.
   */
  images?: ImagePolicy;
  /**
   * Limits of every rollout, pool and reward sandbox. What is not given is derived from the machine, as a server
   * derives its own: memory and processes split so that `maxRollouts` rollouts and the warm pool at their limits fit
   * MemAvailable and pid_max together (src/sandbox/capacity.ts); disk 8 GiB.
   */
  limits?: Limits;
  /** Network in rollout sandboxes (default false). */
  network?: boolean;
  /**
   * The host's pip configuration in rollout sandboxes (local indexes bound read-only), so that an in-place reward's
   * eval.sh can reinstall offline (default true). false saves those mounts at each start when rewards are fresh.
   */
  offlinePip?: boolean;
  /** A rollout closes itself after this long (default 2 h); a group can ask for less or more. */
  ttlMs?: number;
  /** Default reward mode (default "fresh"). */
  rewardMode?: RewardMode;
  /** Whole-evaluation timeout of a reward (default 1800 s). */
  rewardTimeoutMs?: number;
  reward?: RewardSpec;
  /** Check every task's gold patch before its first group (default false). */
  goldCheck?: boolean;
  warmPool?: WarmPoolOptions;
  /**
   * Sandboxes each group keeps ready for forks and checkpoints once it has forked (default 1, 0 to 16): a fork into
   * them is a copy and nothing else. They count as the owner's, as does the one pristine sandbox a group keeps once
   * it has reset (the start state it goes back to).
   */
  forkSpares?: number;
  /**
   * Live rollouts at most; more is a LimitError. Default: as many as get 1 GiB and 512 processes each of what the
   * machine has for sandboxes (`defaultAdmitted`), at most 256.
   */
  maxRollouts?: number;
  /**
   * Fresh reward and gold check sandboxes at once (default: the machine's CPUs, at least 2); more wait their turn.
   * They count beside rollouts and the warm pool in the limits derived from the machine.
   */
  maxFreshRewards?: number;
  /** Told of every outcome as it is decided (e.g. a server's dashboard counts them); it cannot change one. */
  onOutcome?: (outcome: RolloutOutcome) => void;
}

/**
 * Who starts rollouts: its groups, forks and warm pool sandboxes count against `maxSandboxes` (with what it holds
 * elsewhere, e.g. a server's plain sandboxes), and its prewarmed batch and pool are its own.
 */
export interface RolloutOwner {
  name: string;
  maxSandboxes?: number;
  /** Sandboxes it holds outside the engine. */
  heldElsewhere?: () => number;
}

export interface GroupRequest {
  /** The task: an instance or its id in the engine's dataset. */
  instance: Instance | string;
  /** Default: the engine's one anonymous owner (no cap of its own). */
  owner?: RolloutOwner;
  /** Rollouts in the group (1 to 256). */
  n: number;
  /** Override the engine's gold pre-check for this group. */
  goldCheck?: boolean;
  /** Override the engine's rollout TTL. */
  ttlMs?: number;
}
