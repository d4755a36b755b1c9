/**
 * What a grade means for a trainer: a real reward (0 included) or an infrastructure failure that must be dropped or
 * masked. The harness's own error kinds decide; only an agent's patch that does not apply is the agent's doing.
 */
import type { EvaluateResult } from "../eval/reward-api.js";
import type { EvalErrorKind } from "../eval/runner/instance.js";
import { emptyTimings } from "../eval/runner/timings.js";
import type { SuccessFailure } from "../eval/types.js";
import type { InfraFailureKind, RewardMode, RolloutOutcome, TestCounts } from "./types.js";

/** The harness's error kinds that are the infrastructure's, not the agent's. */
const INFRA_KINDS: Record<Exclude<EvalErrorKind, "Patch Apply Failed">, InfraFailureKind> = {
  "Tests Timed Out": "timeout",
  "Tests Errored": "eval_error",
  "Environment Build Failed": "build_error",
  "Environment Missing": "build_error",
  "Sandbox Failed": "sandbox_failed",
  "Unknown Instance": "build_error",
  "Grading Failed": "eval_error",
};

/** Who the outcome belongs to. */
export interface OutcomeSubject {
  rolloutId: string;
  groupId: string;
  instanceId: string;
  repetition: number;
  mode: RewardMode;
}

const counts = (s: SuccessFailure): TestCounts => ({
  passed: s.success.length,
  total: s.success.length + s.failure.length,
});

/** An evaluation's result as a rollout outcome. */
export function classifyOutcome(r: EvaluateResult, who: OutcomeSubject): RolloutOutcome {
  const ts = r.grade.testsStatus;
  const base = {
    ...who,
    resolved: r.resolved,
    resolution: r.grade.resolution,
    failToPass: ts ? counts(ts.FAIL_TO_PASS) : null,
    passToPass: ts ? counts(ts.PASS_TO_PASS) : null,
    patch: r.patch,
    timings: r.timings,
  };
  if (r.status !== "ERROR" || !r.error) return { ...base, status: "scored", reward: r.reward };
  if (r.error.kind === "Patch Apply Failed") {
    const note = firstLine(r.error.message);
    return { ...base, status: "scored", reward: r.reward, ...(note ? { note } : {}) };
  }
  return { ...base, status: "infra_failure", reward: null, failure: { kind: INFRA_KINDS[r.error.kind], ...msg(r) } };
}

const firstLine = (s: string): string => s.split("\n").find((l) => l.trim() !== "") ?? s;

function msg(r: EvaluateResult): { message: string } {
  return { message: `${r.error!.kind}: ${r.error!.message}`.slice(0, 4000) };
}

/** An infrastructure failure without an evaluation (the rollout was lost before, or its sandbox never started). */
export function infraOutcome(
  who: OutcomeSubject,
  failure: { kind: InfraFailureKind; message: string },
  patch = "",
): RolloutOutcome {
  return {
    ...who,
    status: "infra_failure",
    reward: null,
    resolved: false,
    resolution: null,
    failToPass: null,
    passToPass: null,
    failure,
    patch,
    timings: emptyTimings(),
  };
}
