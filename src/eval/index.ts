/** Public API of SWE-bench-compatible evaluation (pure logic and file formats). See README.md. */
export * from "./types.js";
export * from "./parsers.js";
export * from "./grading.js";
export * from "./diff.js";
export * from "./eval-script.js";
export * from "./report.js";
export * from "./predictions.js";
export { pyJsonDumps, pySorted } from "./pystr.js";

// The runner (sandboxes, patches, tests): `minisandbox evaluate`, validation, rewards.
export {
  runEvaluation,
  planEvaluation,
  summarizeEvaluation,
  defaultRunId,
  timingsFileName,
  type RunEvaluationOptions,
  type RunEvaluationResult,
  type InstanceRunRecord,
  type InstanceRunStatus,
  type RunTimings,
  type EvaluationPlan,
  type PlannedJob,
} from "./run.js";
export {
  runEvalJob,
  runEvalJobToFiles,
  writeErrorLog,
  JOB_FILES,
  type EvalJobInput,
  type EvalJobResult,
} from "./job.js";
export { renderRun, runResultJson } from "./render.js";
export {
  runInstanceEvaluation,
  clearInstanceOutputs,
  GIT_APPLY_CMDS,
  DEFAULT_TIMEOUT_SECONDS,
  TIMINGS_FILE,
  type EvalSettings,
  type InstanceEvalInput,
  type InstanceEvalResult,
  type EvalFailure,
  type EvalErrorKind,
} from "./runner/instance.js";
export { agentDiff, pristineListing, type AgentDiff } from "./runner/agent-diff.js";
export {
  evalSandboxRequest,
  evalSandboxSettings,
  type EvalSandboxInput,
  type EvalSandboxSettings,
} from "./runner/sandbox.js";
export { timingStats, describeTimings, PHASES, type PhaseTimings, type TimingStats } from "./runner/timings.js";
export {
  validateInstances,
  renderValidation,
  validationSummary,
  goldProblems,
  baseProblems,
  type ValidateOptions,
  type ValidationReport,
  type InstanceValidation,
  type ValidationRun,
} from "./validate.js";
export {
  evaluate,
  evaluateAttempt,
  type EvaluateTarget,
  type EvaluateOptions,
  type EvaluateResult,
  type RewardStatus,
} from "./reward-api.js";
