/** What the rollout engine takes and gives: options, outcomes, descriptions. */
import type { PhaseTimings } from "../eval/runner/timings.js";
import type { RewardSpec, ResolutionStatus } from "../eval/grading.js";
import type { IntegrityFlag } from "../eval/integrity.js";
import type { EvalCause } from "../eval/runner/instance.js";
import type { Limits } from "../sandbox/limits.js";
import type { Instance } from "../tasks/types.js";

/** Where a reward is graded: a fresh sandbox of the environment (default), or the rollout's own (the paper's way). */
export type RewardMode = "fresh" | "in_place";

export const REWARD_MODES: readonly RewardMode[] = ["fresh", "in_place"];

/** Why an outcome is not a reward to learn from. */
export type InfraFailureKind = "timeout" | "build_error" | "sandbox_lost" | "sandbox_failed" | "eval_error";

/**
 * Why a scored outcome has its reward: `graded` (the tests ran and were graded), or a 0 the attempt caused —
 * `empty_patch`, `patch_apply_failed`, what its patch's code did in the reward sandbox (`eval_timeout`,
 * `eval_crash`, `eval_oom`, `grading_failed`), what the agent did to its own sandbox (`testbed_broken`: no diff
 * could be taken; `sandbox_oom`: its memory use ended the sandbox), or `rollout_expired` (past its time limit after
 * the agent's first command).
 */
export type ScoredReason =
  | "graded"
  | "empty_patch"
  | "patch_apply_failed"
  | EvalCause
  | "sandbox_oom"
  | "rollout_expired";

/** A scored outcome's reason, or an infrastructure failure's kind. */
export type OutcomeReason = ScoredReason | InfraFailureKind;

export interface TestCounts {
  passed: number;
  total: number;
}

/** A rollout's reward, or the reason there is none. */
export interface RolloutOutcome {
  rolloutId: string;
  groupId: string;
  instanceId: string;
  repetition: number;
  /** "scored": `reward` is a real grade, 0 included. "infra_failure": drop or mask it, never learn from it. */
  status: "scored" | "infra_failure";
  /** null exactly when `status` is "infra_failure". */
  reward: number | null;
  resolved: boolean;
  /** FULL / PARTIAL / NO when the tests were graded. */
  resolution: ResolutionStatus | null;
  failToPass: TestCounts | null;
  passToPass: TestCounts | null;
  failure?: { kind: InfraFailureKind; message: string };
  /** Why: a scored outcome's `ScoredReason`, or `failure.kind`. */
  reason: OutcomeReason;
  /** Why a scored attempt got no grade from its tests, in words (e.g. the first line of the apply error). */
  note?: string;
  /** What the graded patch touches that changes how tests run (conftest.py, pytest settings...): filter or penalise. */
  flags: IntegrityFlag[];
  mode: RewardMode;
  /** The graded diff. */
  patch: string;
  timings: PhaseTimings;
}

export interface RewardOptions {
  mode?: RewardMode;
  /** Whole-evaluation timeout (default: the engine's). */
  timeoutMs?: number;
  reward?: RewardSpec;
  /** Write the harness's per-instance files here. */
  logDir?: string;
}

export interface WarmPoolOptions {
  /** Sandboxes held ready at most, over all tasks (default 0: no pool). */
  max?: number;
  /** A pool sandbox not taken within this time is closed (default 15 min). */
  ttlMs?: number;
}

export interface RolloutEngineOptions {
  /** Data directory (default: MINISANDBOX_HOME or the per-user default). */
  home?: string;
  /** Where tasks given by id are found: a dataset file or loaded instances. */
  dataset?: string | readonly Instance[];
  specsFile?: string;
  reposDir?: string;
  /** Build a task's environment on first use if the store lacks it (default false: a clear error). */
  build?: boolean;
  /** Limits of every rollout sandbox. */
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
  /** Live rollouts at most (default 256); more is a LimitError. */
  maxRollouts?: number;
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

export type RolloutState = "ready" | "rewarding" | "closed" | "lost" | "failed";

/** A rollout as lists and the HTTP API show it. */
export interface RolloutInfo {
  id: string;
  groupId: string;
  instanceId: string;
  repetition: number;
  /** `<instance_id>@<repetition>`, the trajectory id trainers use. */
  trajectoryId: string;
  /** The rollout this one was forked from. */
  parent: string | null;
  sandboxId: string | null;
  state: RolloutState;
  /** Taken ready from the warm pool. */
  fromPool: boolean;
  /** From the request to this rollout ready (a fork: the fork's time). */
  startMs: number;
  createdAt: string;
  /** Why the rollout is lost or failed. */
  failure?: { kind: InfraFailureKind; message: string };
  outcome?: RolloutOutcome;
}

export interface GroupTimings {
  goldCheckMs: number;
  /** Resolving the workspace (materializing the layer when it was not on this node). */
  workspaceMs: number;
  /** Starting the N sandboxes, together. */
  startMs: number;
  /** From the request to every rollout ready. */
  readyMs: number;
}

export interface GroupInfo {
  id: string;
  instanceId: string;
  envKey: string;
  createdAt: string;
  timings: GroupTimings;
  rollouts: RolloutInfo[];
}

export interface PrewarmTask {
  instanceId: string;
  envKey: string | null;
  /** "materialized": this call put the layer on the node; "cached": it was there already. */
  layer: "materialized" | "cached" | null;
  layerMs: number;
  /** Sandboxes of this task ready in the pool after the call. */
  warmSandboxes: number;
  goldCheck?: "passed" | "failed";
  error?: string;
}

export interface PrewarmReport {
  tasks: PrewarmTask[];
  pool: { size: number; max: number };
  durationMs: number;
}
