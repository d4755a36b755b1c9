/**
 * One instance, evaluated the way the harness's `run_instance` does it, in a fresh sandbox: write patch.diff and
 * apply it (`git apply --verbose`, `git apply --verbose --reject`, `patch --batch --fuzz=5 -p1 -i`), run eval.sh
 * under the whole-instance timeout, save test_output.txt, grade, write report.json. Failures become the
 * instance's error status (no report.json, as in the harness), never an exception.
 */
import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { NotFoundError } from "../../errors.js";
import { envFor, readEnvRecord, type SpecSource } from "../../env/environments.js";
import { TESTBED_PATH, VENV_PATH } from "../../env/types.js";
import { openSandbox, type InstanceEnv } from "../../env/workspace.js";
import type { ExecResult } from "../../sandbox/exec.js";
import type { Limits } from "../../sandbox/limits.js";
import type { Sandbox } from "../../sandbox/sandbox.js";
import type { Instance } from "../../tasks/types.js";
import type { CamelOf, plan } from "../../wire/index.js";
import { pyRepr } from "../../util/pyrepr.js";
import { CONDA_ACTIVATION, HAS_CONDA_TESTBED, makeEvalScript, venvActivation } from "../eval-script.js";
import { gradeInstance, type Grade, type ResolutionStatus } from "../grading.js";
import { integrityFlags, type IntegrityFlag } from "../integrity.js";
import { MARKERS } from "../parsers.js";
import { LOG_FILES, timeoutNote, writeInstanceFiles } from "../report.js";
import type { InstanceReportFile } from "../types.js";
import { evalSandboxRequest } from "./sandbox.js";
import {
  applyScript,
  evalRunScript,
  fmtSeconds,
  GIT_APPLY_CMDS,
  InstanceLogger,
  SCRIPT_SETUP_FAILED,
  seconds,
  splitOnNonce,
} from "./steps.js";
import { describeTimings, emptyTimings, roundTimings, type PhaseTimings } from "./timings.js";

export { GIT_APPLY_CMDS, SANDBOX_EVAL_PATH, SANDBOX_PATCH_PATH } from "./steps.js";

/** The harness's default whole-instance timeout (seconds). */
export const DEFAULT_TIMEOUT_SECONDS = 1800;

/** Per-instance side file next to report.json (report.json itself stays byte-compatible with the harness). */
export const TIMINGS_FILE = "timings.json";
/** Beside report.json too: the patch's integrity flags (written whenever a patch was graded). */
export const INTEGRITY_FILE = "integrity.json";

/** Why an instance has no grade: the harness's error kinds (declared with the fleet's plans, src/wire/plan.ts). */
export type EvalErrorKind = EvalFailure["kind"];

export type EvalFailure = CamelOf<typeof plan.EvalFailure>;

/** Set when the failure is the attempt's own doing: a real grade of 0 for a trainer (see the wire's `EVAL_CAUSES`). */
export type EvalCause = NonNullable<EvalFailure["cause"]>;

/**
 * What every evaluation of a run shares. It goes down unchanged, field for field: `RunEvaluationOptions` extends it,
 * each job's `EvalJobInput` (which is an `InstanceEvalInput`) carries it, and `evalSandboxRequest` makes the fresh
 * sandbox's request from it.
 */
export interface EvalSettings extends SpecSource {
  home: string;
  reposDir?: string;
  /** Whole-instance timeout (default 1800 s, as the harness). */
  timeoutMs?: number;
  limits?: Limits;
  /** Network in the evaluation's sandbox (default false: verdicts must not depend on it). */
  network?: boolean;
  onWarning?: (message: string) => void;
}

export interface InstanceEvalInput extends EvalSettings {
  instance: Instance;
  /** The instance's environment (computed from specsFile and base when absent). */
  env?: InstanceEnv;
  /**
   * The image of the store it runs on instead of `env`'s built layer: the same eval script (from `env`'s spec),
   * activating the image's own environment as the harness's does.
   */
  image?: string;
  /** The patch to apply (bytes kept as they are); null runs eval.sh on the untouched base (validation's run). */
  patch: string | Buffer | null;
  /** Model name, for log lines only. */
  model?: string;
  /** Write the harness's files (patch.diff, eval.sh, test_output.txt, report.json, run_instance.log) here. */
  logDir?: string;
  /** A fresh sandbox of the instance's environment to use (it is closed afterwards); default: one is created. */
  sandbox?: Sandbox;
  /** Or how to create it (timed as the sandbox phase); default: `openSandbox(await evalSandboxRequest(input))`. */
  openSandbox?: (env: InstanceEnv) => Promise<Sandbox>;
  /**
   * `sandbox` is the agent's own, graded in place: `patch` is already in its /testbed (it is graded, not applied
   * again), and the sandbox stays open afterwards.
   */
  inPlace?: boolean;
  /** Extra phase time measured by the caller (the rewards API's diff). */
  diffMs?: number;
  /** Lines to log first (e.g. how the patch was obtained). */
  preamble?: string[];
  /** Warn when the environment's stored validation verdict is invalid (default true). */
  checkValidation?: boolean;
}

export interface InstanceEvalResult {
  instanceId: string;
  /** resolved / unresolved when graded; error otherwise (no report.json). */
  status: "resolved" | "unresolved" | "error";
  /** FULL / PARTIAL / NO when the log could be graded. */
  resolution: ResolutionStatus | null;
  error?: EvalFailure;
  grade: Grade | null;
  report: InstanceReportFile | null;
  /** test_output.txt as written (null when eval.sh did not run). */
  testOutput: string | null;
  /** Which command applied the patch (null: no patch, or none applied). */
  applyCommand: string | null;
  timings: PhaseTimings;
  warnings: string[];
  /** "memory" when the tests ran into the sandbox's memory limit (the grade is kept; a 0 then says why). */
  limit?: "memory";
  /** What the patch touches that changes how tests run (`integrity.ts`); also in integrity.json beside report.json. */
  flags: IntegrityFlag[];
  /** run_instance.log text. */
  log: string;
  logDir?: string;
  sandboxId?: string;
}

/** Evaluate one patch on one instance in a fresh sandbox. Never throws for per-instance failures. */
export async function runInstanceEvaluation(input: InstanceEvalInput): Promise<InstanceEvalResult> {
  const run = new InstanceRun(input);
  await run.begin();
  const steps = [
    () => run.resolveEnv(),
    () => run.openSandbox(),
    () => run.applyPatch(),
    () => run.runTests(),
    () => run.grade(),
  ];
  try {
    for (const step of steps) if (!(await step())) break;
  } catch (e) {
    // Anything unexpected (disk full writing logs...) is still this instance's error, not the run's.
    run.fail("Tests Errored", `unexpected error: ${(e as Error).message}`);
  }
  return run.finish();
}

/**
 * How the eval script activates an image's environment: as the harness does in SWE-bench's images (their conda env
 * `testbed`), else a venv where built environments have theirs, else nothing (the image's own PATH).
 */
async function imageActivation(sb: Sandbox): Promise<readonly string[]> {
  const venv = `${VENV_PATH}/bin/activate`;
  const r = await sb.exec(`if ${HAS_CONDA_TESTBED}; then echo conda; elif test -f ${venv}; then echo venv; fi`);
  const found = r.stdout.trim();
  return found === "conda" ? CONDA_ACTIVATION : found === "venv" ? venvActivation() : [];
}

/** Remove a previous attempt's outputs before re-running an instance into the same directory. */
export async function clearInstanceOutputs(dir: string): Promise<void> {
  const files = [LOG_FILES.report, LOG_FILES.testOutput, LOG_FILES.patch, LOG_FILES.evalScript, TIMINGS_FILE];
  for (const f of [...files, INTEGRITY_FILE]) {
    await rm(join(dir, f), { force: true });
  }
}

type Outcome = Omit<InstanceEvalResult, "timings" | "warnings" | "log" | "flags">;

/** The state of one evaluation; each step returns false when the instance ends there (with its error). */
class InstanceRun {
  private readonly started = performance.now();
  private readonly id: string;
  private readonly timeoutMs: number;
  private readonly timings = emptyTimings();
  private readonly warnings: string[] = [];
  private readonly log: InstanceLogger;
  private sandbox: Sandbox | undefined;
  private env: InstanceEnv | undefined;
  private diffBefore: string | undefined;
  private testOutput = "";
  private outcome: Outcome;

  constructor(private readonly input: InstanceEvalInput) {
    this.id = input.instance.instance_id;
    this.timeoutMs = input.timeoutMs ?? DEFAULT_TIMEOUT_SECONDS * 1000;
    this.timings.diffMs = input.diffMs ?? 0;
    this.log = new InstanceLogger(input.logDir);
    this.sandbox = input.sandbox;
    this.env = input.env;
    this.outcome = {
      instanceId: this.id,
      status: "error",
      resolution: null,
      grade: null,
      report: null,
      testOutput: null,
      applyCommand: null,
      ...(input.logDir ? { logDir: input.logDir } : {}),
    };
  }

  async begin(): Promise<void> {
    if (!this.input.logDir) return;
    await mkdir(this.input.logDir, { recursive: true });
    // The harness opens run_instance.log in "w" mode.
    await writeFile(join(this.input.logDir, LOG_FILES.instanceLog), "");
  }

  fail(kind: EvalErrorKind, message: string, cause?: EvalCause): false {
    this.outcome = { ...this.outcome, status: "error", error: { kind, message, ...(cause ? { cause } : {}) } };
    this.log.error(`Error in evaluating model for ${this.id}: ${message}`);
    return false;
  }

  private warn(message: string): void {
    this.warnings.push(message);
    this.log.warn(message);
    this.input.onWarning?.(message);
  }

  async resolveEnv(): Promise<boolean> {
    for (const line of this.input.preamble ?? []) this.log.info(line);
    if (!this.env) {
      try {
        this.env = envFor(this.input.instance, this.input);
      } catch (e) {
        return this.fail("Environment Missing", (e as Error).message);
      }
    }
    const check = (this.input.checkValidation ?? true) && this.input.image === undefined;
    const verdict = check ? readEnvRecord(this.input.home, this.env.key)?.validation : undefined;
    if (verdict && !verdict.valid) {
      this.warn(
        `environment ${this.env.key.slice(0, 12)} of ${this.id} failed validation ` +
          `(checked ${verdict.checkedAt} with ${verdict.instanceId}): ${verdict.problems.join("; ")}`,
      );
    }
    return true;
  }

  /** 1. A fresh sandbox of the environment. */
  async openSandbox(): Promise<boolean> {
    const { input } = this;
    const env = this.env!;
    const t = performance.now();
    if (!this.sandbox) {
      try {
        this.sandbox = input.openSandbox
          ? await input.openSandbox(env)
          : await openSandbox(await evalSandboxRequest({ ...input, env }));
      } catch (e) {
        this.timings.sandboxMs = performance.now() - t;
        return this.fail(e instanceof NotFoundError ? "Environment Missing" : "Sandbox Failed", (e as Error).message);
      }
    }
    this.timings.sandboxMs = performance.now() - t;
    this.outcome.sandboxId = this.sandbox.id;
    const network = this.sandbox.network ? "on" : "off";
    const on = input.image ? `image ${input.image}` : `environment ${env.key.slice(0, 12)}`;
    this.log.info(`Sandbox for ${this.id} created: ${this.sandbox.id} (${on}, network ${network})`);
    return true;
  }

  /** 2. The patch: written to patch.diff, then the harness's apply commands in one exec. */
  async applyPatch(): Promise<boolean> {
    const { input, id } = this;
    if (input.patch === null) {
      this.log.info(`No patch for ${id}: running the eval script on the untouched base`);
      return true;
    }
    if (input.inPlace) {
      this.log.info(`Patch for ${id} already in place in sandbox ${this.sandbox!.id}: graded where it was made`);
      return true;
    }
    const t = performance.now();
    if (input.logDir) {
      const file = join(input.logDir, LOG_FILES.patch);
      await writeFile(file, input.patch);
      this.log.info(`Intermediate patch for ${id} written to ${file}, now applying to sandbox...`);
    } else this.log.info(`Intermediate patch for ${id}, now applying to sandbox...`);
    const nonce = newNonce();
    let r: ExecResult;
    try {
      r = await this.sandbox!.exec(applyScript(nonce), {
        stdin: input.patch,
        mergeOutput: true,
        timeoutMs: this.timeoutMs,
        cwd: TESTBED_PATH,
      });
    } catch (e) {
      this.timings.applyMs = performance.now() - t;
      return this.fail("Sandbox Failed", `the sandbox failed while applying the patch: ${(e as Error).message}`);
    }
    const { lastOutput, attempts } = this.readApplyOutput(r.stdout, nonce);
    this.timings.applyMs = performance.now() - t;
    if (this.outcome.applyCommand === null) return this.applyFailed(r, attempts, lastOutput);
    this.log.info(`Git diff before:\n${this.diffBefore ?? ""}`);
    return true;
  }

  /**
   * No apply command worked. The patch's failure (a real 0): every command refused it, or it is too large for the
   * time, memory or disk given (the script could not even write it). A script that ended otherwise is our own step
   * that broke, which says nothing about the patch.
   */
  private applyFailed(r: ExecResult, attempts: number, lastOutput: string): false {
    const refused = attempts === GIT_APPLY_CMDS.length && r.exitCode === 1;
    const tooLarge = r.timedOut || r.limit !== undefined || r.exitCode === SCRIPT_SETUP_FAILED;
    if (!refused && !tooLarge) {
      const how = `exit ${r.exitCode}${r.signal ? `, ${r.signal}` : ""}`;
      const output = r.stdout.trim().slice(-2000) || "no output";
      return this.fail(
        "Sandbox Failed",
        `the apply script ended after ${attempts} of ${GIT_APPLY_CMDS.length} attempts (${how}): ${output}`,
      );
    }
    const why = r.timedOut
      ? `timed out after ${seconds(this.timeoutMs)} seconds`
      : r.exitCode === SCRIPT_SETUP_FAILED
        ? r.stdout.trim()
        : lastOutput;
    this.log.info(`${MARKERS.applyPatchFail}:\n${why}`);
    return this.fail("Patch Apply Failed", `${MARKERS.applyPatchFail}:\n${why}`);
  }

  /**
   * Log each apply attempt; remember the command that worked and `git diff`. Returns the last attempt's output and
   * how many attempts reported their status.
   */
  private readApplyOutput(stdout: string, nonce: string): { lastOutput: string; attempts: number } {
    const { segments, tags } = splitOnNonce(stdout, nonce);
    let lastOutput = segments[0] ?? "";
    let attempts = 0;
    for (let i = 0; i < tags.length; i++) {
      const tag = tags[i]!;
      if (tag === "diff") {
        this.diffBefore = segments[i]!.trim();
        continue;
      }
      const command = GIT_APPLY_CMDS[i];
      lastOutput = segments[i]!;
      attempts++;
      if (tag === "0") {
        this.outcome.applyCommand = command ?? null;
        this.log.info(`${MARKERS.applyPatchPass}:\n${lastOutput}`);
      } else this.log.info(`Failed to apply patch to sandbox: ${command}`);
    }
    return { lastOutput, attempts };
  }

  /** 3. eval.sh under the timeout; test_output.txt. */
  async runTests(): Promise<boolean> {
    const { input, id } = this;
    const t = performance.now();
    const activate = input.image ? await imageActivation(this.sandbox!) : undefined;
    const evalScript = makeEvalScript({
      instance: input.instance,
      spec: this.env!.spec,
      ...(activate ? { activate } : {}),
    });
    if (input.logDir) {
      await writeInstanceFiles(input.logDir, { evalScript });
      const file = join(input.logDir, LOG_FILES.evalScript);
      this.log.info(`Eval script for ${id} written to ${file}; copying to sandbox...`);
    }
    const nonce = newNonce();
    let r: ExecResult;
    try {
      r = await this.sandbox!.exec(evalRunScript(nonce), {
        stdin: evalScript,
        mergeOutput: true,
        timeoutMs: this.timeoutMs,
        cwd: TESTBED_PATH,
      });
    } catch (e) {
      this.timings.testsMs = performance.now() - t;
      // The tests ran the patch's code: a sandbox its memory use killed is its doing; any other end is not, but in
      // the agent's own sandbox (graded in place) whatever broke it is the agent's.
      const oom = this.sandbox!.limitCounters().oomKills > 0;
      const cause = oom ? "eval_oom" : input.inPlace ? "testbed_broken" : undefined;
      return this.fail("Tests Errored", `${MARKERS.testsError}: ${(e as Error).message}`, cause);
    }
    this.timings.testsMs = performance.now() - t;
    this.log.info(`Test runtime: ${fmtSeconds(this.timings.testsMs)} seconds`);
    if (r.exitCode === SCRIPT_SETUP_FAILED && !r.stdout.includes(nonce)) {
      const cause = input.inPlace ? "testbed_broken" : undefined;
      return this.fail("Tests Errored", `${MARKERS.testsError}: ${r.stdout.trim()}`, cause);
    }
    return this.readTestOutput(r, nonce);
  }

  private async readTestOutput(r: ExecResult, nonce: string): Promise<boolean> {
    const { input, id } = this;
    const { segments, tags } = splitOnNonce(r.stdout, nonce);
    const finished = tags.includes("end");
    const diffAfter = finished ? segments[1]!.trim() : undefined;
    const timedOut = r.timedOut && !finished;
    this.testOutput = segments[0]! + (timedOut ? timeoutNote(seconds(this.timeoutMs)) : "");
    if (r.truncated) this.warn(`test output exceeded the output limit: its middle was cut`);
    if (r.limit === "memory" || r.limit === "pids") this.warn(`the test run hit the sandbox's ${r.limit} limit`);
    if (r.limit === "memory") this.outcome.limit = "memory";
    this.outcome.testOutput = this.testOutput;
    if (input.logDir) {
      await writeInstanceFiles(input.logDir, { testOutput: this.testOutput });
      this.log.info(`Test output for ${id} written to ${join(input.logDir, LOG_FILES.testOutput)}`);
    }
    const oom = r.limit === "memory" ? "eval_oom" : undefined;
    if (timedOut) {
      this.log.info(MARKERS.testsTimeout);
      const message = `Test timed out after ${seconds(this.timeoutMs)} seconds.`;
      return this.fail("Tests Timed Out", message, oom ?? "eval_timeout");
    }
    if (!finished) {
      const how = `exit ${r.exitCode}${r.signal ? `, ${r.signal}` : ""}${r.limit ? `, ${r.limit} limit` : ""}`;
      const message = `${MARKERS.testsError}: the eval script ended without completing (${how})`;
      return this.fail("Tests Errored", message, oom ?? "eval_crash");
    }
    if (diffAfter !== undefined) {
      this.log.info(`Git diff after:\n${diffAfter}`);
      if (this.diffBefore !== undefined && diffAfter !== this.diffBefore)
        this.log.info("Git diff changed after running eval script");
    }
    return true;
  }

  /** 4. Grade; report.json. */
  async grade(): Promise<boolean> {
    const { input, id } = this;
    const t = performance.now();
    this.log.info(`Grading answer for ${id}...`);
    let grade: Grade;
    try {
      grade = gradeInstance({
        instance: input.instance,
        modelPatch: input.patch === null ? "" : String(input.patch.length > 0 ? "patch" : ""),
        testOutput: this.testOutput,
        includeTestsStatus: true,
      });
    } catch (e) {
      this.timings.gradingMs = performance.now() - t;
      // The log is the patch's tests' output: whatever makes grading fail came from the attempt.
      return this.fail("Grading Failed", (e as Error).message, "grading_failed");
    }
    if (input.logDir) await writeInstanceFiles(input.logDir, { report: grade.report });
    this.timings.gradingMs = performance.now() - t;
    const resolved = grade.report[id]!.resolved;
    this.log.info(`report: ${pyRepr(grade.report)}\nResult for ${id}: resolved: ${resolved ? "True" : "False"}`);
    const status = resolved ? "resolved" : "unresolved";
    this.outcome = { ...this.outcome, status, resolution: grade.resolution, grade, report: grade.report };
    return true;
  }

  /** Close the sandbox, total the timings, write timings.json. */
  async finish(): Promise<InstanceEvalResult> {
    const { input, id, timings, outcome } = this;
    const t = performance.now();
    const closes = this.sandbox !== undefined && !input.inPlace;
    if (closes) await this.sandbox!.close().catch(() => {});
    timings.cleanupMs = closes ? performance.now() - t : 0;
    timings.totalMs = performance.now() - this.started + timings.diffMs;
    timings.overheadMs = timings.totalMs - timings.testsMs;
    const rounded = roundTimings(timings);
    this.log.info(`Timings for ${id}: ${describeTimings(rounded)}`);
    const flags = await this.integrity();
    if (input.logDir) {
      const status = outcome.status === "error" ? `error: ${outcome.error?.kind}` : outcome.status;
      const cause = outcome.error?.cause ? { cause: outcome.error.cause } : {};
      const body = { instance_id: id, status, ...cause, resolution: outcome.resolution, ...rounded };
      await writeFile(join(input.logDir, TIMINGS_FILE), `${JSON.stringify(body, null, 2)}\n`).catch(() => {});
    }
    return { ...outcome, timings: rounded, warnings: this.warnings, flags, log: await this.log.flush() };
  }

  /** The patch's integrity flags, logged and written beside report.json. */
  private async integrity(): Promise<IntegrityFlag[]> {
    const { input, id } = this;
    if (input.patch === null) return [];
    const flags = integrityFlags(String(input.patch), input.instance.test_patch ?? "", this.env?.spec.test_cmd);
    for (const f of flags) this.log.warn(`Patch for ${id} touches test infrastructure: ${f.path} (${f.reason})`);
    if (input.logDir) {
      const body = `${JSON.stringify({ instance_id: id, flags }, null, 2)}\n`;
      await writeFile(join(input.logDir, INTEGRITY_FILE), body).catch(() => {});
    }
    return flags;
  }
}

const newNonce = (): string => `MSB_${randomBytes(8).toString("hex")}`;
