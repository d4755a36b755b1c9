/**
 * The rollout API of `minisandbox serve` (`/rollouts/...`, snake_case JSON): groups of rollouts of one task, their
 * commands and files, rewards that say whether they are real or an infrastructure failure, forks, prewarm and gold
 * pre-checks. Commands use the native `ExecRequest` / `ExecResponse`.
 */
import { type In, model, type Out } from "./model.js";
import { t } from "./types.js";

const MAX_GROUP = 256;

export const RolloutFailure = model("RolloutFailure", {
  kind: t.literal("timeout", "build_error", "sandbox_lost", "sandbox_failed", "eval_error"),
  message: t.str(),
});

/**
 * Why a scored outcome has its reward: `graded` (the tests ran and were graded), or a 0 the attempt caused —
 * `empty_patch`, `patch_apply_failed`, what its patch's code did in the reward sandbox (`eval_timeout`,
 * `eval_crash`, `eval_oom`, `grading_failed`), what the agent did to its own sandbox (`testbed_broken`: no diff
 * could be taken; `sandbox_oom`: its memory use ended the sandbox), or `rollout_expired` (past its time limit after
 * the agent's first command). Or an infrastructure failure's kind (the last five).
 */
export const OUTCOME_REASONS = [
  "graded",
  "empty_patch",
  "patch_apply_failed",
  "eval_timeout",
  "eval_crash",
  "eval_oom",
  "grading_failed",
  "testbed_broken",
  "sandbox_oom",
  "rollout_expired",
  "timeout",
  "build_error",
  "sandbox_lost",
  "sandbox_failed",
  "eval_error",
] as const;

export const IntegrityFlag = model("IntegrityFlag", {
  kind: t.literal("conftest", "test_config", "interpreter_startup", "pytest_plugin", "test_file", "test_runner"),
  path: t.str(),
  reason: t.str(),
});

export const TestCounts = model("TestCounts", { passed: t.int(), total: t.int() });

export const RewardTimings = model("RewardTimings", {
  diff_ms: t.float(),
  sandbox_ms: t.float(),
  apply_ms: t.float(),
  tests_ms: t.float(),
  grading_ms: t.float(),
  cleanup_ms: t.float(),
  total_ms: t.float(),
  overhead_ms: t.float(),
});

/** A rollout's reward, or the reason there is none. */
export const RolloutOutcome = model("RolloutOutcome", {
  rollout_id: t.str(),
  group_id: t.str(),
  instance_id: t.str(),
  repetition: t.int(),
  /** "scored": `reward` is a real grade (0 included); "infra_failure": drop or mask it, never learn from it. */
  status: t.literal("scored", "infra_failure"),
  /** null exactly when `status` is "infra_failure". */
  reward: t.float().nullable(),
  resolved: t.bool(),
  /** FULL / PARTIAL / NO when the tests were graded. */
  resolution: t.literal("FULL", "PARTIAL", "NO").nullable(),
  fail_to_pass: TestCounts.nullable(),
  pass_to_pass: TestCounts.nullable(),
  failure: RolloutFailure.optional(),
  /** Why: a scored outcome's reason, or `failure.kind`. Absent from servers before it: then `failure.kind`, or
   * "graded" for a scored outcome. */
  reason: t.literal(...OUTCOME_REASONS).optional(),
  /** Why a scored attempt got no grade from its tests, in words (e.g. the line of the apply error that says why). */
  note: t.str().optional(),
  /** Test infrastructure the graded patch touches (absent: none, or a server before it): filter or penalise. */
  flags: t.list(IntegrityFlag).default([]),
  /** Where it was graded: a fresh sandbox of the environment, or the rollout's own (the paper's way). */
  mode: t.literal("fresh", "in_place"),
  /** The graded diff. */
  patch: t.str(),
  timings: RewardTimings,
});

export const RolloutInfo = model("RolloutInfo", {
  id: t.str(),
  group_id: t.str(),
  instance_id: t.str(),
  repetition: t.int(),
  /** `<instance_id>@<repetition>`, the trajectory id trainers use. */
  trajectory_id: t.str(),
  /** The rollout this one was forked from. */
  parent: t.str().nullable(),
  sandbox_id: t.str().nullable(),
  state: t.literal("ready", "rewarding", "closed", "lost", "failed"),
  /** Taken ready from the warm pool. */
  from_pool: t.bool(),
  /** From the request to this rollout ready (a fork: the fork's time). */
  start_ms: t.float(),
  created_at: t.str(),
  /** Why the rollout is lost or failed. */
  failure: RolloutFailure.optional(),
  outcome: RolloutOutcome.optional(),
});

export const GroupTimings = model("GroupTimings", {
  gold_check_ms: t.float(),
  /** Resolving the workspace (materializing the layer when it was not on this node). */
  workspace_ms: t.float(),
  /** Starting the N sandboxes, together. */
  start_ms: t.float(),
  /** From the request to every rollout ready. */
  ready_ms: t.float(),
});

export const GroupInfo = model("GroupInfo", {
  id: t.str(),
  instance_id: t.str(),
  env_key: t.str(),
  created_at: t.str(),
  /** The task's problem statement: what the agent is asked to do. */
  problem_statement: t.str(),
  timings: GroupTimings,
  rollouts: t.list(RolloutInfo),
});

export const GroupList = model("GroupList", { groups: t.list(GroupInfo) });
export const RolloutList = model("RolloutList", { rollouts: t.list(RolloutInfo) });
export const ClosedResponse = model("ClosedResponse", { id: t.str(), closed: t.bool() });

export const CreateGroupRequest = model(
  "CreateGroupRequest",
  {
    instance_id: t.str(),
    n: t.int().gt(0).le(MAX_GROUP),
    gold_check: t.bool().optional(),
    ttl_seconds: t.float().gt(0).optional(),
  },
  { extra: "forbid", objectError: "dict" },
);

export const RewardRequest = model(
  "RewardRequest",
  {
    mode: t.literal("fresh", "in_place").optional(),
    timeout_seconds: t.float().gt(0).optional(),
    reward: t.literal("binary", "fraction").optional(),
  },
  { extra: "forbid", objectError: "dict", absentBody: "empty" },
);

export const ForkRequest = model(
  "ForkRequest",
  {
    k: t.int().gt(0).le(MAX_GROUP).default(1),
    /** Fork a checkpoint of the group instead of the rollout's current state. */
    checkpoint_id: t.str().optional(),
  },
  { extra: "forbid", objectError: "dict", absentBody: "empty" },
);

/** Back to the group's start state (or to a checkpoint's), in place: the same rollout, the same sandbox. */
export const ResetRequest = model(
  "ResetRequest",
  { checkpoint_id: t.str().optional() },
  { extra: "forbid", objectError: "dict", absentBody: "empty" },
);

export const ResetResponse = model("ResetResponse", { rollout: RolloutInfo, reset_ms: t.float() });

/** A checkpoint of a rollout's state, kept by its group: reset or fork to it by id. */
export const CheckpointResponse = model("CheckpointResponse", {
  checkpoint_id: t.str(),
  rollout_id: t.str(),
  checkpoint_ms: t.float(),
});

export const WriteFileRequest = model(
  "RolloutWriteFileRequest",
  { path: t.str(), content: t.str() },
  { extra: "forbid", objectError: "dict" },
);

export const PrewarmRequest = model(
  "PrewarmRequest",
  { instance_ids: t.list(t.str()), sandboxes: t.int().gt(0).le(MAX_GROUP).optional() },
  { extra: "forbid", objectError: "dict" },
);

export const PrewarmTask = model("PrewarmTask", {
  instance_id: t.str(),
  env_key: t.str().nullable(),
  /** "materialized": this call put the layer on the node; "cached": it was there already. */
  layer: t.literal("materialized", "cached").nullable(),
  layer_ms: t.float(),
  /** Sandboxes of this task ready in the pool after the call. */
  warm_sandboxes: t.int(),
  gold_check: t.literal("passed", "failed").optional(),
  error: t.str().optional(),
});

export const PrewarmReport = model("PrewarmReport", {
  tasks: t.list(PrewarmTask),
  pool: model("PoolSize", { size: t.int(), max: t.int() }),
  duration_ms: t.float(),
});

export const GoldCheckRequest = model(
  "GoldCheckRequest",
  { instance_id: t.str() },
  { extra: "forbid", objectError: "dict" },
);

export const GoldVerdict = model("GoldVerdict", {
  instance_id: t.str(),
  env_key: t.str(),
  passed: t.bool(),
  checked_at: t.str(),
  /** How it was decided: this check, or the environment's validation. */
  source: t.literal("gold-check", "validation"),
  /** Why it failed. */
  problem: t.str().optional(),
});

export type RolloutOutcome = Out<typeof RolloutOutcome.shape>;
export type RolloutInfo = Out<typeof RolloutInfo.shape>;
export type GroupInfo = Out<typeof GroupInfo.shape>;
export type CreateGroupIn = In<typeof CreateGroupRequest.shape>;
export type RewardIn = In<typeof RewardRequest.shape>;
export type ForkIn = In<typeof ForkRequest.shape>;
export type ResetIn = In<typeof ResetRequest.shape>;
export type PrewarmReport = Out<typeof PrewarmReport.shape>;
export type GoldVerdict = Out<typeof GoldVerdict.shape>;

export const ROLLOUT_MODELS = {
  RolloutFailure,
  TestCounts,
  RewardTimings,
  RolloutOutcome,
  RolloutInfo,
  GroupTimings,
  GroupInfo,
  GroupList,
  RolloutList,
  ClosedResponse,
  CreateGroupRequest,
  RewardRequest,
  ForkRequest,
  ResetRequest,
  ResetResponse,
  CheckpointResponse,
  WriteFileRequest,
  PrewarmRequest,
  PrewarmTask,
  PrewarmReport,
  GoldCheckRequest,
  GoldVerdict,
} as const;
