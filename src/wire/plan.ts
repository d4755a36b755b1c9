/**
 * A fleet's plans: what `minisandbox prepare --plan`, `evaluate --plan` and `evaluate --summary-only --json` print
 * (one JSON line each) for a driver that runs the jobs on other nodes (the Python package's `minisandbox.fleet`),
 * and the normalized instance those jobs send back to a node (`POST /environments`, `POST /evaluations`). Produced
 * by library functions (`planPrepare`, `planEvaluation`, `summarizeEvaluation`), never by hand.
 */
import { model, type OutOf, row } from "./model.js";
import { t } from "./types.js";

/**
 * A dataset row as `loadDataset` normalizes it (SWE-bench's schema; a SWE-smith row mapped onto it: `bug_patch`
 * applied at start, `patch` its reverse), its other fields kept as they are. `task_format` says it is normalized:
 * a node takes it as it is, never normalizing it again (that would reverse a SWE-smith patch once more).
 */
export const TaskInstance = row("TaskInstance", {
  instance_id: t.str(),
  repo: t.str(),
  base_commit: t.str(),
  patch: t.str(),
  test_patch: t.str(),
  problem_statement: t.str(),
  hints_text: t.str().optional(),
  created_at: t.str().optional(),
  version: t.str().optional(),
  environment_setup_commit: t.str().optional(),
  FAIL_TO_PASS: t.list(t.str()),
  PASS_TO_PASS: t.list(t.str()),
  spec: t.dict(t.any()).optional(),
  task_format: t.literal("swebench", "swesmith"),
  bug_patch: t.str().optional(),
  bug_commit: t.str().optional(),
  upstream_repo: t.str().optional(),
});

/** Why an instance has no grade: the harness's error kinds. */
export const EVAL_ERROR_KINDS = [
  "Patch Apply Failed",
  "Tests Timed Out",
  "Tests Errored",
  "Environment Build Failed",
  "Environment Missing",
  "Sandbox Failed",
  "Unknown Instance",
  "Grading Failed",
] as const;

/**
 * The kinds that say an instance was not evaluated because our side failed (its environment could not be built, its
 * sandbox could not start), not because of its prediction: `evaluate` (a fleet's too) exits 1 when one occurs.
 */
export const NOT_EVALUATED_KINDS: readonly (typeof EVAL_ERROR_KINDS)[number][] = [
  "Environment Build Failed",
  "Sandbox Failed",
];

/**
 * Set when a failure is the attempt's own doing (its patch's code ran, or the agent's sandbox was in the way): a real
 * grade of 0 for a trainer. Absent: something outside the attempt's reach failed (infrastructure).
 */
export const EVAL_CAUSES = ["eval_timeout", "eval_crash", "eval_oom", "testbed_broken", "grading_failed"] as const;

export const EvalFailure = model("EvalFailure", {
  kind: t.literal(...EVAL_ERROR_KINDS),
  message: t.str(),
  cause: t.literal(...EVAL_CAUSES).optional(),
});

/** One environment to make present somewhere, with the first of its instances (what a node builds it from). */
export const PlannedEnvironment = model("PlannedEnvironment", {
  /** The spec's key (a row on an image: the key its eval script comes from; the image is its environment). */
  env_key: t.str(),
  /** The image its rows run on (canonical reference), when they run on one: a node pulls it or takes a peer's. */
  image: t.str().optional(),
  instance_ids: t.list(t.str()),
  instance: TaskInstance,
});

export const PlanError = model("PlanError", { instance_id: t.str(), error: t.str() });

/** `prepare --plan`: each distinct environment once, and the instances whose spec cannot be made. */
export const PreparePlan = model("PreparePlan", {
  environments: t.list(PlannedEnvironment),
  errors: t.list(PlanError),
});

/** One evaluation job: an instance, its prediction, its environment and where its files go. */
export const PlannedJob = model("PlannedJob", {
  instance_id: t.str(),
  env_key: t.str(),
  /** The image it is evaluated on (canonical reference), when its row runs on one. */
  image: t.str().optional(),
  log_dir: t.str(),
  model_name_or_path: t.str(),
  model_patch: t.str(),
  instance: TaskInstance,
});

/** How an instance of a run ended (or why it needs no job). */
export const RUN_STATUSES = ["resolved", "unresolved", "error", "empty_patch", "no_prediction", "skipped"] as const;

export const PlanRecord = model("PlanRecord", {
  instance_id: t.str(),
  status: t.literal(...RUN_STATUSES),
  error: EvalFailure.nullable(),
});

/** `evaluate --plan`: the run laid out; its jobs run elsewhere, then `--summary-only` sums it up. */
export const EvaluationPlan = model("EvaluationPlan", {
  run_id: t.str(),
  model: t.str(),
  report_dir: t.str(),
  /** Every dataset instance of the run (after the instance-id filter), in order. */
  order: t.list(t.str()),
  jobs: t.list(PlannedJob),
  /** Instances that need no job: already run, no prediction, empty patch, or an error already recorded. */
  records: t.list(PlanRecord),
  unknown_prediction_ids: t.list(t.str()),
});

/** The harness's run summary (`<model>.<run_id>.json`), field for field. */
export const RunSummary = row("RunSummary", {
  total_instances: t.int(),
  submitted_instances: t.int(),
  completed_instances: t.int(),
  resolved_instances: t.int(),
  unresolved_instances: t.int(),
  empty_patch_instances: t.int(),
  error_instances: t.int(),
  completed_ids: t.list(t.str()),
  incomplete_ids: t.list(t.str()),
  empty_patch_ids: t.list(t.str()),
  submitted_ids: t.list(t.str()),
  resolved_ids: t.list(t.str()),
  unresolved_ids: t.list(t.str()),
  error_ids: t.list(t.str()),
  schema_version: t.int(),
});

/** `evaluate --summary-only --json` (its one camelCase key kept as it has always been printed). */
export const EvaluationSummary = model("EvaluationSummary", {
  summaryPath: t.str(),
  htmlPath: t.str().optional(),
  summary: RunSummary,
});

export type TaskInstance = OutOf<typeof TaskInstance>;
export type EvaluationPlan = OutOf<typeof EvaluationPlan>;
export type PreparePlan = OutOf<typeof PreparePlan>;
export type EvaluationSummary = OutOf<typeof EvaluationSummary>;

export const PLAN_MODELS = {
  TaskInstance,
  EvalFailure,
  PlannedEnvironment,
  PlanError,
  PreparePlan,
  PlannedJob,
  PlanRecord,
  EvaluationPlan,
  RunSummary,
  EvaluationSummary,
} as const;
