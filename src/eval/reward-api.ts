/**
 * Rewards for training loops: grade an attempt — a live agent sandbox, or an instance and a patch — the way the
 * harness would, and turn the grade into a reward.
 *
 * A live sandbox is never trusted for the verdict: its diff (tracked, untracked and binary files, taken without
 * changing the agent's repository) is applied in a *fresh* sandbox of the same environment and the tests run
 * there, so an agent that edited the tests, the venv or anything outside /testbed cannot fake a pass.
 */
import type { Instance } from "../tasks/types.js";
import { loadDataset, selectInstances } from "../tasks/index.js";
import { Sandbox } from "../sandbox/sandbox.js";
import type { Limits } from "../sandbox/limits.js";
import { ensureBuilt, envFor } from "../env/environments.js";
import type { EnvSpec, LayerKey } from "../env/types.js";
import { resolveHome } from "../util/home.js";
import { InvalidInputError, NotFoundError } from "../errors.js";
import { gradeInstance, reward as rewardOf, type Grade, type RewardSpec } from "./grading.js";
import type { InstanceReportFile } from "./types.js";
import { agentDiff, pristineListing } from "./runner/agent-diff.js";
import { openEvalSandbox } from "./runner/sandbox.js";
import { runInstanceEvaluation, type EvalFailure } from "./runner/instance.js";
import { emptyTimings, roundTimings, type PhaseTimings } from "./runner/timings.js";

export type RewardStatus = "FULL" | "PARTIAL" | "NO" | "ERROR";

/** What to grade: a live sandbox (its /testbed diff), or an instance and a patch. */
export type EvaluateTarget = Sandbox | { instance: Instance | string; patch: string | null };

export interface EvaluateOptions {
  /** The instance (object or id). For a sandbox, default: its `labels.instance`. */
  instance?: Instance | string;
  /** Where to find an instance given by id: a dataset file or loaded instances. */
  dataset?: string | readonly Instance[];
  /** Default: the sandbox's home, else MINISANDBOX_HOME / the per-user default. */
  home?: string;
  specsFile?: string;
  reposDir?: string;
  /** Build the environment if the store lacks it (default true). */
  build?: boolean;
  /** Whole-instance timeout (default 1800 s). */
  timeoutMs?: number;
  /** "binary" (default: 1 for FULL, else 0), "fraction", or a function of the grade. */
  reward?: RewardSpec;
  limits?: Limits;
  /** Write the harness's per-instance files here. */
  logDir?: string;
  onWarning?: (message: string) => void;
}

export interface EvaluateResult {
  instanceId: string;
  resolved: boolean;
  status: RewardStatus;
  reward: number;
  /** report.json content (null on ERROR, as the harness writes none then). */
  report: InstanceReportFile | null;
  grade: Grade;
  error?: EvalFailure;
  timings: PhaseTimings;
  /** The patch that was graded (for a sandbox: its diff). */
  patch: string;
  /** Paths of a sandbox whose changes were left out (files the environment had untracked at the start). */
  skippedPaths: string[];
  testOutput: string | null;
  warnings: string[];
  /** run_instance.log text. */
  log: string;
}

async function resolveInstance(
  ref: Instance | string | undefined,
  dataset: EvaluateOptions["dataset"],
): Promise<Instance> {
  if (ref === undefined) {
    throw new InvalidInputError(
      "evaluate: which instance? pass opts.instance (or create the sandbox with createInstanceSandbox, which labels it)",
    );
  }
  if (typeof ref !== "string") return ref;
  if (dataset === undefined)
    throw new InvalidInputError(`evaluate: instance ${ref} given by id: pass opts.dataset (a file or the instances)`);
  if (typeof dataset === "string") return (await loadDataset(dataset, { instanceIds: [ref] }))[0]!;
  const [found] = selectInstances([...dataset], [ref]);
  return found!;
}

/**
 * Grade one attempt. Per-attempt failures (patch does not apply, tests time out, environment cannot be built...)
 * give status "ERROR" and the reward of an ungraded attempt (0 for "binary" and "fraction"); only misuse (no
 * instance, a closed sandbox, a sandbox of another environment) throws.
 */
export async function evaluate(target: EvaluateTarget, opts: EvaluateOptions = {}): Promise<EvaluateResult> {
  const started = performance.now();
  const live = target instanceof Sandbox ? target : undefined;
  if (live?.isClosed) throw new InvalidInputError(`evaluate: sandbox ${live.id} is closed`);
  const instance = await resolveInstance(
    live ? (opts.instance ?? live.labels["instance"]) : (target as { instance: Instance | string }).instance,
    opts.dataset,
  );
  const home = resolveHome(opts.home ?? live?.home);
  const env: { spec: EnvSpec; key: LayerKey } = envFor(instance, { specsFile: opts.specsFile });
  if (live?.labels["env"] && live.labels["env"] !== env.key) {
    throw new InvalidInputError(
      `evaluate: sandbox ${live.id} runs environment ${live.labels["env"].slice(0, 12)}, but ${instance.instance_id}'s spec gives ` +
        `${env.key.slice(0, 12)} (pass the specsFile the sandbox was created with)`,
    );
  }
  const spec = opts.reward ?? "binary";
  const timings = emptyTimings();
  const base = { instanceId: instance.instance_id, skippedPaths: [] as string[], warnings: [] as string[], log: "" };

  const errored = (error: EvalFailure, patch: string, extra: Partial<EvaluateResult> = {}): EvaluateResult => {
    const grade = gradeInstance({ instance, modelPatch: patch, testOutput: null });
    timings.totalMs = performance.now() - started;
    timings.overheadMs = timings.totalMs - timings.testsMs;
    return {
      ...base,
      resolved: false,
      status: "ERROR",
      reward: rewardOf(grade, spec),
      report: null,
      grade,
      error,
      timings: roundTimings(timings),
      patch,
      testOutput: null,
      ...extra,
    };
  };

  if (opts.build ?? true) {
    try {
      await ensureBuilt({ home, spec: env.spec, key: env.key, reposDir: opts.reposDir, specsFile: opts.specsFile });
    } catch (e) {
      return errored(
        { kind: "Environment Build Failed", message: (e as Error).message },
        live ? "" : ((target as { patch: string | null }).patch ?? ""),
      );
    }
  }

  // The fresh sandbox the verdict comes from.
  let t = performance.now();
  let fresh: Sandbox;
  try {
    fresh = await openEvalSandbox({
      home,
      instance,
      spec: env.spec,
      specsFile: opts.specsFile,
      reposDir: opts.reposDir,
      limits: opts.limits,
    });
  } catch (e) {
    timings.sandboxMs = performance.now() - t;
    const kind = e instanceof NotFoundError ? "Environment Missing" : "Sandbox Failed";
    return errored(
      { kind, message: (e as Error).message },
      live ? "" : ((target as { patch: string | null }).patch ?? ""),
    );
  }
  const sandboxMs = performance.now() - t;

  let patch: string | null;
  let patchBytes: Buffer | undefined;
  const preamble: string[] = [];
  let diffMs = 0;
  if (live) {
    t = performance.now();
    try {
      const listing = await pristineListing(fresh);
      const d = await agentDiff(live, listing);
      patch = d.patch;
      patchBytes = d.patchBytes;
      base.skippedPaths = d.skipped;
      preamble.push(`Patch for ${instance.instance_id} taken from sandbox ${live.id}: ${d.patchBytes.length} bytes`);
      if (d.skipped.length > 0)
        preamble.push(`Left out changes to files the environment had untracked at the start: ${d.skipped.join(", ")}`);
    } catch (e) {
      timings.sandboxMs = sandboxMs;
      timings.diffMs = performance.now() - t;
      await fresh.close().catch(() => {});
      return errored(
        { kind: "Tests Errored", message: `could not take the agent's diff: ${(e as Error).message}` },
        "",
      );
    }
    diffMs = performance.now() - t;
  } else {
    patch = (target as { patch: string | null }).patch;
  }

  // Empty patches are not run (the harness's rule): nothing to grade.
  if (patch === null || patch === "") {
    t = performance.now();
    await fresh.close().catch(() => {});
    timings.sandboxMs = sandboxMs;
    timings.diffMs = diffMs;
    timings.cleanupMs = performance.now() - t;
    const grade = gradeInstance({ instance, modelPatch: null, testOutput: null });
    grade.report[instance.instance_id]!.patch_is_None = patch === null;
    timings.totalMs = performance.now() - started;
    timings.overheadMs = timings.totalMs;
    return {
      ...base,
      resolved: false,
      status: "NO",
      reward: rewardOf(grade, spec),
      report: grade.report,
      grade,
      timings: roundTimings(timings),
      patch: patch ?? "",
      testOutput: null,
    };
  }

  const r = await runInstanceEvaluation({
    home,
    instance,
    env,
    patch: patchBytes ?? patch,
    timeoutMs: opts.timeoutMs,
    specsFile: opts.specsFile,
    reposDir: opts.reposDir,
    sandbox: fresh,
    diffMs,
    preamble,
    ...(opts.logDir ? { logDir: opts.logDir } : {}),
    ...(opts.onWarning ? { onWarning: opts.onWarning } : {}),
  });
  const timingsOut: PhaseTimings = { ...r.timings, sandboxMs: Math.round(sandboxMs * 10) / 10 };
  timingsOut.totalMs = Math.round((performance.now() - started) * 10) / 10;
  timingsOut.overheadMs = Math.round((timingsOut.totalMs - timingsOut.testsMs) * 10) / 10;
  const grade = r.grade ?? gradeInstance({ instance, modelPatch: patch, testOutput: null });
  return {
    ...base,
    resolved: r.status === "resolved",
    status: r.error ? "ERROR" : (r.resolution ?? "NO"),
    reward: rewardOf(grade, spec),
    report: r.report,
    grade,
    ...(r.error ? { error: r.error } : {}),
    timings: timingsOut,
    patch,
    testOutput: r.testOutput,
    warnings: r.warnings,
    log: r.log,
  };
}

/** The same function under a name that reads well next to the rest of the SDK. */
export const evaluateAttempt = evaluate;
