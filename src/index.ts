/** minisandbox's public TypeScript API. */
export {
  Sandbox,
  SessionManager,
  type SandboxOptions,
  type SessionCreateOptions,
  type InstanceSandboxRequest,
} from "./sandbox/sandbox.js";
export type { ExecOptions, ExecResult, LimitHit } from "./sandbox/exec.js";
export type { Limits } from "./sandbox/limits.js";
export type { FileEntry } from "./sandbox/files.js";
export {
  BashSession,
  type RunOptions as SessionRunOptions,
  type RunResult as SessionRunResult,
} from "./session/bash-session.js";
export * from "./errors.js";
export { loadDataset, type Instance } from "./tasks/index.js";
export { specForInstance, specKey } from "./env/spec.js";
export { prepareInstances, type PrepareResult } from "./env/prepare.js";
export { createInstanceSandbox } from "./env/workspace.js";
export { runDoctor } from "./sandbox/doctor.js";
export { evaluate, evaluateAttempt, runEvaluation, validateInstances, benchEvaluation } from "./eval/index.js";
export type { EvaluateOptions, EvaluateResult, EvaluateTarget } from "./eval/index.js";
