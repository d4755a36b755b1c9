/**
 * One instance, evaluated the way the harness's `run_instance` does it, in a fresh sandbox: write patch.diff and
 * apply it (`git apply --verbose`, `git apply --verbose --reject`, `patch --batch --fuzz=5 -p1 -i`), run eval.sh
 * under the whole-instance timeout, save test_output.txt, grade, write report.json. Failures become the
 * instance's error status (no report.json, as in the harness), never an exception.
 */
import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Instance } from "../../tasks/types.js";
import type { Sandbox } from "../../sandbox/sandbox.js";
import type { Limits } from "../../sandbox/limits.js";
import type { ExecResult } from "../../sandbox/exec.js";
import type { EnvSpec, LayerKey } from "../../env/types.js";
import { TESTBED_PATH } from "../../env/types.js";
import { envFor, readEnvRecord } from "../../env/environments.js";
import { NotFoundError } from "../../errors.js";
import { makeEvalScript } from "../eval-script.js";
import { gradeInstance, type Grade, type ResolutionStatus } from "../grading.js";
import { MARKERS } from "../parsers.js";
import {
  appendInstanceLog,
  formatLogLine,
  LOG_FILES,
  timeoutNote,
  writeInstanceFiles,
  type LogLevel,
} from "../report.js";
import type { InstanceReportFile } from "../types.js";
import { pyRepr } from "../../util/pyrepr.js";
import { openEvalSandbox } from "./sandbox.js";
import { describeTimings, emptyTimings, roundTimings, type PhaseTimings } from "./timings.js";

/** The harness's GIT_APPLY_CMDS, tried in order on /tmp/patch.diff. */
export const GIT_APPLY_CMDS = [
  "git apply --verbose",
  "git apply --verbose --reject",
  "patch --batch --fuzz=5 -p1 -i",
] as const;
/** The harness's DOCKER_PATCH. */
export const SANDBOX_PATCH_PATH = "/tmp/patch.diff";
export const SANDBOX_EVAL_PATH = "/eval.sh";
/** The harness's default whole-instance timeout (seconds). */
export const DEFAULT_TIMEOUT_SECONDS = 1800;

/** Why an instance has no grade. */
export type EvalErrorKind =
  | "Patch Apply Failed"
  | "Tests Timed Out"
  | "Tests Errored"
  | "Environment Build Failed"
  | "Environment Missing"
  | "Sandbox Failed"
  | "Unknown Instance"
  | "Grading Failed";

export interface EvalFailure {
  kind: EvalErrorKind;
  message: string;
}

export interface InstanceEvalInput {
  home: string;
  instance: Instance;
  /** The instance's environment (computed from specsFile when absent). */
  env?: { spec: EnvSpec; key: LayerKey };
  /** The patch to apply (bytes are kept as they are); null runs eval.sh on the untouched base (validation's "no patch" run). */
  patch: string | Buffer | null;
  /** Model name, for log lines only. */
  model?: string;
  /** Whole-instance timeout (default 1800 s). */
  timeoutMs?: number;
  specsFile?: string;
  reposDir?: string;
  limits?: Limits;
  /** Default false. */
  network?: boolean;
  /** Write the harness's files (patch.diff, eval.sh, test_output.txt, report.json, run_instance.log) and timings.json here. */
  logDir?: string;
  /** A fresh sandbox of the instance's environment to use (it is closed afterwards); default: one is created. */
  sandbox?: Sandbox;
  /** Extra phase time measured by the caller (the rewards API's diff). */
  diffMs?: number;
  /** Lines to log first (e.g. how the patch was obtained). */
  preamble?: string[];
  /** Warn when the environment's stored validation verdict is invalid (default true). */
  checkValidation?: boolean;
  onWarning?: (message: string) => void;
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
  /** run_instance.log text. */
  log: string;
  logDir?: string;
  sandboxId?: string;
}

/** Collects run_instance.log lines; appends them to the file when there is one. */
class InstanceLogger {
  private text = "";
  private chain: Promise<void> = Promise.resolve();
  constructor(private readonly dir: string | undefined) {}

  write(level: LogLevel, message: string): void {
    this.text += formatLogLine(level, message);
    if (this.dir) {
      const dir = this.dir;
      this.chain = this.chain.then(() => appendInstanceLog(dir, level, message)).catch(() => {});
    }
  }
  info(message: string): void {
    this.write("INFO", message);
  }
  warn(message: string): void {
    this.write("WARNING", message);
  }
  error(message: string): void {
    this.write("ERROR", message);
  }
  async flush(): Promise<string> {
    await this.chain;
    return this.text;
  }
}

/** Split output on lines `\n<nonce> <tag>\n` the scripts print between steps. */
function splitOnNonce(output: string, nonce: string): { segments: string[]; tags: string[] } {
  const re = new RegExp(`\\n${nonce} ([^\\n]*)\\n`, "g");
  const segments: string[] = [];
  const tags: string[] = [];
  let last = 0;
  for (let m = re.exec(output); m; m = re.exec(output)) {
    segments.push(output.slice(last, m.index));
    tags.push(m[1]!);
    last = m.index + m[0].length;
  }
  segments.push(output.slice(last));
  return { segments, tags };
}

function applyScript(nonce: string): string {
  const attempts = GIT_APPLY_CMDS.map(
    (c) =>
      `${c} ${SANDBOX_PATCH_PATH} 2>&1; rc=$?; printf '\\n%s %s\\n' ${nonce} "$rc"; ` +
      `if [ "$rc" -eq 0 ]; then git -c core.fileMode=false diff 2>&1; printf '\\n%s diff\\n' ${nonce}; exit 0; fi`,
  );
  return [`cat > ${SANDBOX_PATCH_PATH} || exit 97`, `cd ${TESTBED_PATH} || exit 97`, ...attempts, "exit 1"].join("\n");
}

function evalRunScript(nonce: string): string {
  return [
    `cat > ${SANDBOX_EVAL_PATH} 2>/dev/null || { printf 'cannot write ${SANDBOX_EVAL_PATH}\\n'; exit 97; }`,
    `/bin/bash ${SANDBOX_EVAL_PATH}`,
    `printf '\\n%s end\\n' ${nonce}`,
    `cd ${TESTBED_PATH} && git -c core.fileMode=false diff 2>&1`,
  ].join("\n");
}

const seconds = (ms: number): number => Math.round(ms / 1000);
const fmtSeconds = (ms: number): string =>
  (ms / 1000).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }).replaceAll(",", "_");

/** Evaluate one patch on one instance in a fresh sandbox. Never throws for per-instance failures. */
export async function runInstanceEvaluation(input: InstanceEvalInput): Promise<InstanceEvalResult> {
  const started = performance.now();
  const { instance } = input;
  const id = instance.instance_id;
  const timeoutMs = input.timeoutMs ?? DEFAULT_TIMEOUT_SECONDS * 1000;
  const timings = emptyTimings();
  timings.diffMs = input.diffMs ?? 0;
  const warnings: string[] = [];
  const log = new InstanceLogger(input.logDir);
  if (input.logDir) {
    await mkdir(input.logDir, { recursive: true });
    // The harness opens run_instance.log in "w" mode.
    await writeFile(join(input.logDir, LOG_FILES.instanceLog), "");
  }
  const warn = (message: string): void => {
    warnings.push(message);
    log.warn(message);
    input.onWarning?.(message);
  };
  let sandbox = input.sandbox;
  let result: Omit<InstanceEvalResult, "timings" | "warnings" | "log"> = {
    instanceId: id,
    status: "error",
    resolution: null,
    grade: null,
    report: null,
    testOutput: null,
    applyCommand: null,
    ...(input.logDir ? { logDir: input.logDir } : {}),
  };
  const fail = (kind: EvalErrorKind, message: string): void => {
    result = { ...result, status: "error", error: { kind, message } };
    log.error(`Error in evaluating model for ${id}: ${message}`);
  };

  try {
    for (const line of input.preamble ?? []) log.info(line);
    let env = input.env;
    if (!env) {
      try {
        env = envFor(instance, { specsFile: input.specsFile });
      } catch (e) {
        fail("Environment Missing", (e as Error).message);
        return await finish();
      }
    }
    if (input.checkValidation ?? true) {
      const verdict = readEnvRecord(input.home, env.key)?.validation;
      if (verdict && !verdict.valid) {
        warn(
          `environment ${env.key.slice(0, 12)} of ${id} failed validation (checked ${verdict.checkedAt} with ${verdict.instanceId}): ` +
            verdict.problems.join("; "),
        );
      }
    }

    // 1. A fresh sandbox of the environment.
    let t = performance.now();
    if (!sandbox) {
      try {
        sandbox = await openEvalSandbox({
          home: input.home,
          instance,
          spec: env.spec,
          specsFile: input.specsFile,
          reposDir: input.reposDir,
          limits: input.limits,
          network: input.network,
        });
      } catch (e) {
        timings.sandboxMs = performance.now() - t;
        fail(e instanceof NotFoundError ? "Environment Missing" : "Sandbox Failed", (e as Error).message);
        return await finish();
      }
    }
    timings.sandboxMs = performance.now() - t;
    result.sandboxId = sandbox.id;
    log.info(
      `Sandbox for ${id} created: ${sandbox.id} (environment ${env.key.slice(0, 12)}, network ${sandbox.network ? "on" : "off"})`,
    );

    // 2. The patch.
    t = performance.now();
    let diffBefore: string | undefined;
    if (input.patch !== null) {
      if (input.logDir) {
        await writeFile(join(input.logDir, LOG_FILES.patch), input.patch);
        log.info(
          `Intermediate patch for ${id} written to ${join(input.logDir, LOG_FILES.patch)}, now applying to sandbox...`,
        );
      } else log.info(`Intermediate patch for ${id}, now applying to sandbox...`);
      const nonce = `MSB_${randomBytes(8).toString("hex")}`;
      let r: ExecResult;
      try {
        r = await sandbox.exec(applyScript(nonce), {
          stdin: input.patch,
          mergeOutput: true,
          timeoutMs,
          cwd: TESTBED_PATH,
        });
      } catch (e) {
        timings.applyMs = performance.now() - t;
        fail("Sandbox Failed", `the sandbox failed while applying the patch: ${(e as Error).message}`);
        return await finish();
      }
      const { segments, tags } = splitOnNonce(r.stdout, nonce);
      let lastOutput = segments[0] ?? "";
      for (let i = 0; i < tags.length; i++) {
        const tag = tags[i]!;
        if (tag === "diff") {
          diffBefore = segments[i]!.trim();
          continue;
        }
        const command = GIT_APPLY_CMDS[i];
        lastOutput = segments[i]!;
        if (tag === "0") {
          result.applyCommand = command ?? null;
          log.info(`${MARKERS.applyPatchPass}:\n${lastOutput}`);
        } else log.info(`Failed to apply patch to sandbox: ${command}`);
      }
      timings.applyMs = performance.now() - t;
      if (result.applyCommand === null) {
        const why = r.timedOut
          ? `timed out after ${seconds(timeoutMs)} seconds`
          : r.exitCode === 97
            ? r.stdout.trim()
            : lastOutput;
        log.info(`${MARKERS.applyPatchFail}:\n${why}`);
        fail("Patch Apply Failed", `${MARKERS.applyPatchFail}:\n${why}`);
        return await finish();
      }
      log.info(`Git diff before:\n${diffBefore ?? ""}`);
    } else {
      log.info(`No patch for ${id}: running the eval script on the untouched base`);
    }

    // 3. eval.sh under the timeout.
    t = performance.now();
    const evalScript = makeEvalScript({ instance, spec: env.spec });
    if (input.logDir) {
      await writeInstanceFiles(input.logDir, { evalScript });
      log.info(`Eval script for ${id} written to ${join(input.logDir, LOG_FILES.evalScript)}; copying to sandbox...`);
    }
    const nonce = `MSB_${randomBytes(8).toString("hex")}`;
    let r: ExecResult;
    try {
      r = await sandbox.exec(evalRunScript(nonce), {
        stdin: evalScript,
        mergeOutput: true,
        timeoutMs,
        cwd: TESTBED_PATH,
      });
    } catch (e) {
      timings.testsMs = performance.now() - t;
      fail("Tests Errored", `${MARKERS.testsError}: ${(e as Error).message}`);
      return await finish();
    }
    timings.testsMs = performance.now() - t;
    log.info(`Test runtime: ${fmtSeconds(timings.testsMs)} seconds`);
    if (r.exitCode === 97 && !r.stdout.includes(nonce)) {
      fail("Tests Errored", `${MARKERS.testsError}: ${r.stdout.trim()}`);
      return await finish();
    }
    const { segments, tags } = splitOnNonce(r.stdout, nonce);
    const finished = tags.includes("end");
    let testOutput = segments[0]!;
    const diffAfter = finished ? segments[1]!.trim() : undefined;
    const timedOut = r.timedOut && !finished;
    if (r.truncated) warn(`test output exceeded the output limit: its middle was cut`);
    if (r.limit === "memory" || r.limit === "pids") warn(`the test run hit the sandbox's ${r.limit} limit`);
    if (timedOut) testOutput += timeoutNote(seconds(timeoutMs));
    result.testOutput = testOutput;
    if (input.logDir) {
      await writeInstanceFiles(input.logDir, { testOutput });
      log.info(`Test output for ${id} written to ${join(input.logDir, LOG_FILES.testOutput)}`);
    }
    if (timedOut) {
      log.info(MARKERS.testsTimeout);
      fail("Tests Timed Out", `Test timed out after ${seconds(timeoutMs)} seconds.`);
      return await finish();
    }
    if (!finished) {
      fail(
        "Tests Errored",
        `${MARKERS.testsError}: the eval script ended without completing (exit ${r.exitCode}${r.signal ? `, ${r.signal}` : ""})`,
      );
      return await finish();
    }
    if (diffAfter !== undefined) {
      log.info(`Git diff after:\n${diffAfter}`);
      if (diffBefore !== undefined && diffAfter !== diffBefore) log.info("Git diff changed after running eval script");
    }

    // 4. Grade.
    t = performance.now();
    log.info(`Grading answer for ${id}...`);
    let grade: Grade;
    try {
      grade = gradeInstance({
        instance,
        modelPatch: input.patch === null ? "" : String(input.patch.length > 0 ? "patch" : ""),
        testOutput,
        includeTestsStatus: true,
      });
    } catch (e) {
      timings.gradingMs = performance.now() - t;
      fail("Grading Failed", (e as Error).message);
      return await finish();
    }
    if (input.logDir) await writeInstanceFiles(input.logDir, { report: grade.report });
    timings.gradingMs = performance.now() - t;
    const resolved = grade.report[id]!.resolved;
    log.info(`report: ${pyRepr(grade.report)}\nResult for ${id}: resolved: ${resolved ? "True" : "False"}`);
    result = {
      ...result,
      status: resolved ? "resolved" : "unresolved",
      resolution: grade.resolution,
      grade,
      report: grade.report,
    };
    return await finish();
  } catch (e) {
    // Anything unexpected (disk full writing logs...) is still this instance's error, not the run's.
    fail("Tests Errored", `unexpected error: ${(e as Error).message}`);
    return await finish();
  }

  async function finish(): Promise<InstanceEvalResult> {
    const t = performance.now();
    if (sandbox) await sandbox.close().catch(() => {});
    timings.cleanupMs = sandbox ? performance.now() - t : 0;
    timings.totalMs = performance.now() - started + timings.diffMs;
    timings.overheadMs = timings.totalMs - timings.testsMs;
    const rounded = roundTimings(timings);
    log.info(`Timings for ${id}: ${describeTimings(rounded)}`);
    if (input.logDir) {
      const status = result.status === "error" ? `error: ${result.error?.kind}` : result.status;
      await writeFile(
        join(input.logDir, TIMINGS_FILE),
        `${JSON.stringify({ instance_id: id, status, resolution: result.resolution, ...rounded }, null, 2)}\n`,
      ).catch(() => {});
    }
    return { ...result, timings: rounded, warnings, log: await log.flush() };
  }
}

/** Per-instance side file next to report.json (report.json itself stays byte-compatible with the harness). */
export const TIMINGS_FILE = "timings.json";

/** Remove a previous attempt's outputs before re-running an instance into the same directory. */
export async function clearInstanceOutputs(dir: string): Promise<void> {
  for (const f of [LOG_FILES.report, LOG_FILES.testOutput, LOG_FILES.patch, LOG_FILES.evalScript, TIMINGS_FILE]) {
    await rm(join(dir, f), { force: true });
  }
}
