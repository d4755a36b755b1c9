/**
 * What a grade means for a trainer: a real reward (0 included) or an infrastructure failure that must be dropped or
 * masked, decided by who failed. Whatever the patch's code does in the reward sandbox (spin, crash, kill its
 * process group, fill memory) and whatever the agent did to its own sandbox is a 0 with its reason; only what is
 * outside the policy's reach (build, store, a sandbox that could not start, our own steps) is an infra_failure.
 */
import type { EvaluateResult } from "../eval/reward-api.js";
import type { EvalErrorKind } from "../eval/runner/instance.js";
import { emptyTimings } from "../eval/runner/timings.js";
import type { SuccessFailure } from "../eval/types.js";
import type { InfraFailureKind, RewardMode, RolloutOutcome, TestCounts } from "./types.js";

/** The harness's error kinds, when no cause says the attempt made them: the infrastructure's. */
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
    flags: r.flags,
  };
  if (r.status !== "ERROR" || !r.error) {
    const oom = r.limit === "memory" && !r.resolved;
    const reason = r.status === "NO" && r.patch === "" ? "empty_patch" : oom ? "eval_oom" : "graded";
    return { ...base, status: "scored", reward: r.reward, reason };
  }
  const { kind, cause } = r.error;
  if (kind === "Patch Apply Failed" || cause) {
    const reason = cause ?? "patch_apply_failed";
    return { ...base, status: "scored", reward: r.reward, reason, note: noteOf(r.error.message) };
  }
  const failure = { kind: INFRA_KINDS[kind], ...msg(r) };
  return { ...base, status: "infra_failure", reward: null, reason: failure.kind, failure };
}

/** A 0 the attempt caused without an evaluation (its sandbox died of its own memory use, or it ran out of time). */
export function scoredZero(
  who: OutcomeSubject,
  reason: "sandbox_oom" | "rollout_expired",
  message: string,
  patch = "",
): RolloutOutcome {
  return { ...unGraded(who, patch), status: "scored", reward: 0, reason, note: message };
}

const TELLING = /error|fail|can't|cannot|garbage|exist|malformed|corrupt|timed out|limit/i;

/** The line of an error message that says why (not a bare harness marker such as ">>>>> Patch Apply Failed:"). */
function noteOf(message: string): string {
  const lines = message.split("\n").map((l) => l.trim());
  const told = lines.filter((l) => l !== "" && !/^>>>>> [^:]*:$/.test(l));
  return (told.find((l) => TELLING.test(l)) ?? told[0] ?? message).slice(0, 500);
}

function msg(r: EvaluateResult): { message: string } {
  return { message: `${r.error!.kind}: ${r.error!.message}`.slice(0, 4000) };
}

/** An infrastructure failure without an evaluation (the rollout was lost before, or its sandbox never started). */
export function infraOutcome(
  who: OutcomeSubject,
  failure: { kind: InfraFailureKind; message: string },
  patch = "",
): RolloutOutcome {
  return { ...unGraded(who, patch), status: "infra_failure", reward: null, reason: failure.kind, failure };
}

type UnGraded = Omit<RolloutOutcome, "status" | "reward" | "reason">;

function unGraded(who: OutcomeSubject, patch: string): UnGraded {
  return {
    ...who,
    resolved: false,
    resolution: null,
    failToPass: null,
    passToPass: null,
    patch,
    flags: [],
    timings: emptyTimings(),
  };
}
