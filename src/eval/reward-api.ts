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
import { envFor } from "../env/environments.js";
import { makePresent } from "../env/present.js";
import { openSandbox, type InstanceEnv } from "../env/workspace.js";
import { resolveHome } from "../util/home.js";
import { InvalidInputError, NotFoundError } from "../errors.js";
import { gradeInstance, reward as rewardOf, type Grade, type RewardSpec } from "./grading.js";
import { integrityFlags, type IntegrityFlag } from "./integrity.js";
import type { InstanceReportFile } from "./types.js";
import { agentDiff, pristineListing } from "./runner/agent-diff.js";
import { evalSandboxRequest } from "./runner/sandbox.js";
import { runInstanceEvaluation, type EvalFailure, type InstanceEvalResult } from "./runner/instance.js";
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
  /** Every instance's base image (`--base`), as `SpecSource.base` (src/env/environments.ts). */
  base?: string;
  reposDir?: string;
  /** Build the environment if the store lacks it (default true; never for an attempt on an image). */
  build?: boolean;
  /**
   * An instance and a patch: grade it on this image of the store (its root filesystem, the spec's eval script)
   * instead of the built environment. A live sandbox on an image is graded on its own image.
   */
  image?: string;
  /** Whole-instance timeout (default 1800 s). */
  timeoutMs?: number;
  /** "binary" (default: 1 for FULL, else 0), "fraction", or a function of the grade. */
  reward?: RewardSpec;
  limits?: Limits;
  /** Write the harness's per-instance files here. */
  logDir?: string;
  /**
   * A live sandbox only: grade it in place, as the container-free paper's code does — the eval script (test files
   * reset, test patch applied, tests run) runs in the agent's own sandbox, which stays open with the test patch
   * applied. Faster (no fresh sandbox per attempt), but edits to the venv or outside /testbed now count.
   */
  inPlace?: boolean;
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
  /** "memory" when the tests ran into the reward sandbox's memory limit. */
  limit?: "memory";
  /** What the graded patch touches that changes how tests run (conftest.py, pytest settings...): see integrity.ts. */
  flags: IntegrityFlag[];
  /** run_instance.log text. */
  log: string;
}

async function resolveInstance(
  ref: Instance | string | undefined,
  dataset: EvaluateOptions["dataset"],
): Promise<Instance> {
  if (ref === undefined) {
    throw new InvalidInputError(
      "evaluate: which instance? pass opts.instance (or create the sandbox with Sandbox.create({ instance }), " +
        "which labels it)",
    );
  }
  if (typeof ref !== "string") return ref;
  if (dataset === undefined)
    throw new InvalidInputError(`evaluate: instance ${ref} given by id: pass opts.dataset (a file or the instances)`);
  if (typeof dataset === "string") return (await loadDataset(dataset, { instanceIds: [ref] }))[0]!;
  const [found] = selectInstances([...dataset], [ref]);
  return found!;
}

/** One attempt being graded: what it is, and what has been measured so far. */
interface Attempt {
  started: number;
  instance: Instance;
  home: string;
  env: InstanceEnv;
  /** The image the agent's sandbox runs on (graded on that image too), when it runs on one. */
  image?: string;
  /** The agent's sandbox, for a live attempt. */
  live?: Sandbox;
  /** The patch given with the instance (null: none). */
  givenPatch: string | null;
  reward: RewardSpec;
  timings: PhaseTimings;
  skippedPaths: string[];
}

/** A fresh sandbox and the patch to grade in it. */
interface Graded {
  fresh: Sandbox;
  sandboxMs: number;
  patch: string | null;
  patchBytes?: Buffer;
  preamble: string[];
  diffMs: number;
}

/**
 * Grade one attempt. Per-attempt failures (patch does not apply, tests time out, environment cannot be built...)
 * give status "ERROR" and the reward of an ungraded attempt (0 for "binary" and "fraction"); only misuse (no
 * instance, a closed sandbox, a sandbox of another environment) throws.
 */
export async function evaluate(target: EvaluateTarget, opts: EvaluateOptions = {}): Promise<EvaluateResult> {
  if (opts.inPlace && !(target instanceof Sandbox))
    throw new InvalidInputError("evaluate: inPlace grades a live sandbox, not a patch");
  const a = await startAttempt(target, opts);
  if (a.live && opts.inPlace) return evaluateInPlace(a, a.live, opts);
  if ((opts.build ?? true) && a.image === undefined) {
    const failure = await environmentFailure(a, opts);
    if (failure) return errored(a, { kind: "Environment Build Failed", message: failure }, a.givenPatch ?? "");
  }
  const fresh = await openFresh(a, opts);
  if (!("fresh" in fresh)) return fresh;
  const graded = a.live
    ? await takeAgentDiff(a, a.live, fresh)
    : { ...fresh, patch: a.givenPatch, preamble: [], diffMs: 0 };
  if (!("fresh" in graded)) return graded;
  // Empty patches are not run (the harness's rule): nothing to grade.
  if (graded.patch === null || graded.patch === "") return noPatch(a, graded);
  return runInFresh(a, graded, opts);
}

/**
 * The attempt's environment made present as a job's is (`makePresent`: its base image pulled, its layer here, else
 * fetched, else built); why not, when it could not be.
 */
async function environmentFailure(a: Attempt, opts: EvaluateOptions): Promise<string | undefined> {
  try {
    const made = await makePresent(
      { env: a.env },
      { home: a.home, build: true, reposDir: opts.reposDir, specsFile: opts.specsFile },
    );
    return made.status === "failed" ? made.error : undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** The same function under a name that reads well next to the rest of the SDK. */
export const evaluateAttempt = evaluate;

async function startAttempt(target: EvaluateTarget, opts: EvaluateOptions): Promise<Attempt> {
  const started = performance.now();
  const live = target instanceof Sandbox ? target : undefined;
  if (live?.isClosed) throw new InvalidInputError(`evaluate: sandbox ${live.id} is closed`);
  const given = live ? undefined : (target as { instance: Instance | string; patch: string | null });
  const instance = await resolveInstance(
    live ? (opts.instance ?? live.labels["instance"]) : given!.instance,
    opts.dataset,
  );
  const home = resolveHome(opts.home ?? live?.home);
  const env = envFor(instance, opts);
  const image = live ? live.labels["image"] : opts.image;
  if (live && opts.image !== undefined && opts.image !== image)
    throw new InvalidInputError(`evaluate: sandbox ${live.id} does not run on image ${opts.image}; leave image out`);
  if (!image && live?.labels["env"] && live.labels["env"] !== env.key) {
    throw new InvalidInputError(
      `evaluate: sandbox ${live.id} runs environment ${live.labels["env"].slice(0, 12)}, ` +
        `but ${instance.instance_id}'s spec gives ${env.key.slice(0, 12)} ` +
        "(pass the specsFile and base the sandbox was created with)",
    );
  }
  return {
    started,
    instance,
    home,
    env,
    ...(image ? { image } : {}),
    ...(live ? { live } : {}),
    givenPatch: given ? given.patch : "",
    reward: opts.reward ?? "binary",
    timings: emptyTimings(),
    skippedPaths: [],
  };
}

function errored(a: Attempt, error: EvalFailure, patch: string): EvaluateResult {
  const grade = gradeInstance({ instance: a.instance, modelPatch: patch, testOutput: null });
  a.timings.totalMs = performance.now() - a.started;
  a.timings.overheadMs = a.timings.totalMs - a.timings.testsMs;
  return {
    ...resultBase(a),
    resolved: false,
    status: "ERROR",
    reward: rewardOf(grade, a.reward),
    report: null,
    grade,
    error,
    timings: roundTimings(a.timings),
    patch,
    testOutput: null,
    flags: patch ? integrityFlags(patch, a.instance.test_patch ?? "", a.env.spec.test_cmd) : [],
  };
}

function resultBase(a: Attempt): Pick<EvaluateResult, "instanceId" | "skippedPaths" | "warnings" | "log"> {
  return { instanceId: a.instance.instance_id, skippedPaths: a.skippedPaths, warnings: [], log: "" };
}

/** The fresh sandbox the verdict comes from. */
async function openFresh(
  a: Attempt,
  opts: EvaluateOptions,
): Promise<{ fresh: Sandbox; sandboxMs: number } | EvaluateResult> {
  const t = performance.now();
  try {
    const fresh = await openSandbox(await evalSandboxRequest({ ...a, limits: opts.limits }));
    return { fresh, sandboxMs: performance.now() - t };
  } catch (e) {
    a.timings.sandboxMs = performance.now() - t;
    const kind = e instanceof NotFoundError ? "Environment Missing" : "Sandbox Failed";
    return errored(a, { kind, message: (e as Error).message }, a.givenPatch ?? "");
  }
}

/** An instance's pristine workspace, listed once per home, environment and instance (layers never change). */
const listings = new Map<string, Promise<Buffer>>();
const MAX_LISTINGS = 64;

function cachedPristineListing(a: Attempt, opts: EvaluateOptions): Promise<Buffer> {
  const id = `${a.home}\0${a.image ?? a.env.key}\0${a.instance.instance_id}`;
  let p = listings.get(id);
  if (!p) {
    p = (async () => {
      await using fresh = await openSandbox(await evalSandboxRequest({ ...a, limits: opts.limits }));
      return await pristineListing(fresh);
    })();
    listings.set(id, p);
    p.catch(() => listings.delete(id));
    if (listings.size > MAX_LISTINGS) listings.delete(listings.keys().next().value!);
  }
  return p;
}

/** Grade the live sandbox itself: its diff for the record, then the eval script where the agent worked. */
async function evaluateInPlace(a: Attempt, live: Sandbox, opts: EvaluateOptions): Promise<EvaluateResult> {
  const t = performance.now();
  let d: Awaited<ReturnType<typeof agentDiff>>;
  try {
    d = await agentDiff(live, await cachedPristineListing(a, opts));
  } catch (e) {
    a.timings.diffMs = performance.now() - t;
    const message = `could not take the agent's diff: ${(e as Error).message}`;
    if (e instanceof NotFoundError) return errored(a, { kind: "Environment Missing", message }, "");
    return errored(a, { kind: "Tests Errored", message, cause: "testbed_broken" }, "");
  }
  a.skippedPaths = d.skipped;
  const diffMs = performance.now() - t;
  if (d.patch === "") {
    a.timings.diffMs = diffMs;
    return emptyPatch(a, "");
  }
  const r = await runInstanceEvaluation({
    home: a.home,
    instance: a.instance,
    env: a.env,
    ...(a.image ? { image: a.image } : {}),
    patch: d.patchBytes,
    inPlace: true,
    sandbox: live,
    timeoutMs: opts.timeoutMs,
    specsFile: opts.specsFile,
    base: opts.base,
    reposDir: opts.reposDir,
    diffMs,
    preamble: [`Patch for ${a.instance.instance_id} in sandbox ${live.id}: ${d.patchBytes.length} bytes`],
    ...(opts.logDir ? { logDir: opts.logDir } : {}),
    ...(opts.onWarning ? { onWarning: opts.onWarning } : {}),
  });
  return graded(a, r, d.patch, r.timings);
}

/** The agent's changes: its /testbed against the pristine state listed in the fresh sandbox. */
async function takeAgentDiff(
  a: Attempt,
  live: Sandbox,
  opened: { fresh: Sandbox; sandboxMs: number },
): Promise<Graded | EvaluateResult> {
  const t = performance.now();
  const id = a.instance.instance_id;
  let inAgentSandbox = false;
  try {
    const listing = await pristineListing(opened.fresh);
    inAgentSandbox = true;
    const d = await agentDiff(live, listing);
    a.skippedPaths = d.skipped;
    const preamble = [`Patch for ${id} taken from sandbox ${live.id}: ${d.patchBytes.length} bytes`];
    if (d.skipped.length > 0)
      preamble.push(`Left out changes to files the environment had untracked at the start: ${d.skipped.join(", ")}`);
    return { ...opened, patch: d.patch, patchBytes: d.patchBytes, preamble, diffMs: performance.now() - t };
  } catch (e) {
    a.timings.sandboxMs = opened.sandboxMs;
    a.timings.diffMs = performance.now() - t;
    await opened.fresh.close().catch(() => {});
    const message = `could not take the agent's diff: ${(e as Error).message}`;
    // The pristine listing is ours; the diff is git in the agent's sandbox, on what the agent left of /testbed.
    return errored(a, { kind: "Tests Errored", message, ...(inAgentSandbox ? { cause: "testbed_broken" } : {}) }, "");
  }
}

/** An empty (or absent) patch: status NO without running anything. */
async function noPatch(a: Attempt, g: Graded): Promise<EvaluateResult> {
  const t = performance.now();
  await g.fresh.close().catch(() => {});
  a.timings.sandboxMs = g.sandboxMs;
  a.timings.diffMs = g.diffMs;
  a.timings.cleanupMs = performance.now() - t;
  return emptyPatch(a, g.patch);
}

function emptyPatch(a: Attempt, patch: string | null): EvaluateResult {
  const grade = gradeInstance({ instance: a.instance, modelPatch: null, testOutput: null });
  grade.report[a.instance.instance_id]!.patch_is_None = patch === null;
  a.timings.totalMs = performance.now() - a.started;
  a.timings.overheadMs = a.timings.totalMs;
  return {
    ...resultBase(a),
    resolved: false,
    status: "NO",
    reward: rewardOf(grade, a.reward),
    report: grade.report,
    grade,
    timings: roundTimings(a.timings),
    patch: patch ?? "",
    testOutput: null,
    flags: [],
  };
}

/** Apply the patch and run the tests in the fresh sandbox (it is closed afterwards). */
async function runInFresh(a: Attempt, g: Graded, opts: EvaluateOptions): Promise<EvaluateResult> {
  const patch = g.patch!;
  const r = await runInstanceEvaluation({
    home: a.home,
    instance: a.instance,
    env: a.env,
    ...(a.image ? { image: a.image } : {}),
    patch: g.patchBytes ?? patch,
    timeoutMs: opts.timeoutMs,
    specsFile: opts.specsFile,
    base: opts.base,
    reposDir: opts.reposDir,
    sandbox: g.fresh,
    diffMs: g.diffMs,
    preamble: g.preamble,
    ...(opts.logDir ? { logDir: opts.logDir } : {}),
    ...(opts.onWarning ? { onWarning: opts.onWarning } : {}),
  });
  return graded(a, r, patch, { ...r.timings, sandboxMs: Math.round(g.sandboxMs * 10) / 10 });
}

/** The runner's result as a reward. */
function graded(a: Attempt, r: InstanceEvalResult, patch: string, runTimings: PhaseTimings): EvaluateResult {
  const timings: PhaseTimings = { ...runTimings };
  timings.totalMs = Math.round((performance.now() - a.started) * 10) / 10;
  timings.overheadMs = Math.round((timings.totalMs - timings.testsMs) * 10) / 10;
  const grade = r.grade ?? gradeInstance({ instance: a.instance, modelPatch: patch, testOutput: null });
  return {
    ...resultBase(a),
    resolved: r.status === "resolved",
    status: r.error ? "ERROR" : (r.resolution ?? "NO"),
    reward: rewardOf(grade, a.reward),
    report: r.report,
    grade,
    ...(r.error ? { error: r.error } : {}),
    timings,
    patch,
    testOutput: r.testOutput,
    warnings: r.warnings,
    flags: r.flags,
    ...(r.limit ? { limit: r.limit } : {}),
    log: r.log,
  };
}
