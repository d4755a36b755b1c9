/**
 * Grading, exactly as the harness grades (`grading.py`): which listed tests passed, the FAIL_TO_PASS and
 * PASS_TO_PASS ratios, FULL / PARTIAL / NO, the report.json entry; plus rewards for training loops.
 */
import { InvalidInputError } from "../errors.js";
import { evalTestLog, parserForInstance, type LogEval, type ParserName } from "./parsers.js";
import type {
  EvalInstance,
  InstanceReport,
  InstanceReportFile,
  StatusMap,
  SuccessFailure,
  TestsStatus,
} from "./types.js";

/** PASSED or XFAIL. */
export function testPassed(name: string, statusMap: StatusMap): boolean {
  return Object.hasOwn(statusMap, name) && (statusMap[name] === "PASSED" || statusMap[name] === "XFAIL");
}

/** Absent, FAILED or ERROR. (SKIPPED — or an unrecognised token — is neither passed nor failed.) */
export function testFailed(name: string, statusMap: StatusMap): boolean {
  return !Object.hasOwn(statusMap, name) || statusMap[name] === "FAILED" || statusMap[name] === "ERROR";
}

/** "fail_only": a test fails only if it shows FAILED (the harness's JavaScript repos; none of the Python ones). */
export type EvalType = "pass_and_fail" | "fail_only";

/** The harness's FAIL_ONLY_REPOS. */
export const FAIL_ONLY_REPOS: readonly string[] = ["chartjs/Chart.js", "markedjs/marked", "processing/p5.js"];

export interface TestLists {
  FAIL_TO_PASS: readonly string[];
  PASS_TO_PASS: readonly string[];
  FAIL_TO_FAIL?: readonly string[];
  PASS_TO_FAIL?: readonly string[];
}

function classify(tests: readonly string[] | undefined, statusMap: StatusMap, evalType: EvalType): SuccessFailure {
  const out: SuccessFailure = { success: [], failure: [] };
  for (const name of tests ?? []) {
    if (evalType === "fail_only") {
      (Object.hasOwn(statusMap, name) && statusMap[name] === "FAILED" ? out.failure : out.success).push(name);
    } else if (testPassed(name, statusMap)) out.success.push(name);
    else if (testFailed(name, statusMap)) out.failure.push(name);
  }
  return out;
}

/**
 * `tests_status` of report.json. FAIL_TO_FAIL / PASS_TO_FAIL are only computed with `calculateToFail`
 * (the harness never does when it writes reports, so they are empty there).
 */
export function getTestsStatus(
  statusMap: StatusMap,
  tests: TestLists,
  opts: { evalType?: EvalType; calculateToFail?: boolean } = {},
): TestsStatus {
  const evalType = opts.evalType ?? "pass_and_fail";
  const toFail = opts.calculateToFail ?? false;
  return {
    FAIL_TO_PASS: classify(tests.FAIL_TO_PASS, statusMap, evalType),
    PASS_TO_PASS: classify(tests.PASS_TO_PASS, statusMap, evalType),
    FAIL_TO_FAIL: toFail ? classify(tests.FAIL_TO_FAIL, statusMap, evalType) : { success: [], failure: [] },
    PASS_TO_FAIL: toFail ? classify(tests.PASS_TO_FAIL, statusMap, evalType) : { success: [], failure: [] },
  };
}

const ratio = ({ success, failure }: SuccessFailure): number =>
  success.length + failure.length === 0 ? 1 : success.length / (success.length + failure.length);

/** Share of FAIL_TO_PASS tests that pass, among those that passed or failed; 1 when there are none. */
export const f2pRatio = (ts: TestsStatus): number => ratio(ts.FAIL_TO_PASS);
/** Same for PASS_TO_PASS. */
export const p2pRatio = (ts: TestsStatus): number => ratio(ts.PASS_TO_PASS);

export type ResolutionStatus = "FULL" | "PARTIAL" | "NO";

/** FULL: f2p == 1 and p2p == 1; PARTIAL: 0 < f2p < 1 and p2p == 1; else NO. */
export function resolutionStatus(ts: TestsStatus): ResolutionStatus {
  const f2p = f2pRatio(ts);
  const p2p = p2pRatio(ts);
  if (f2p === 1 && p2p === 1) return "FULL";
  if (f2p > 0 && f2p < 1 && p2p === 1) return "PARTIAL";
  return "NO";
}

/** A FAIL_TO_PASS / PASS_TO_PASS field: a list, or a JSON string holding one (as published); absent = []. */
export function parseTestList(value: unknown, field = "test list"): string[] {
  if (value === undefined || value === null) return [];
  let list: unknown = value;
  if (typeof value === "string") {
    try {
      list = JSON.parse(value);
    } catch {
      throw new InvalidInputError(`${field} is a string but not JSON: ${value.slice(0, 80)}`);
    }
  }
  if (!Array.isArray(list) || !list.every((x): x is string => typeof x === "string")) {
    throw new InvalidInputError(`${field} must be a list of test names (or a JSON string of one)`);
  }
  return [...list];
}

export interface GradeInput {
  instance: Pick<EvalInstance, "instance_id" | "repo" | "FAIL_TO_PASS" | "PASS_TO_PASS" | "log_parser">;
  /** The prediction's model_patch; null/undefined means no patch. */
  modelPatch: string | null | undefined;
  /** test_output.txt; null when the eval script never ran (e.g. the patch did not apply). */
  testOutput: string | null;
  /** Override the parser (default: the row's log_parser, else the repo's). */
  parser?: ParserName;
  /** Put tests_status into the report (default true, as the harness's run_instance does). */
  includeTestsStatus?: boolean;
}

export interface Grade {
  instanceId: string;
  /** report.json content. */
  report: InstanceReportFile;
  /** null when there was nothing to grade (no patch, no log, or a log with a failure marker). */
  resolution: ResolutionStatus | null;
  testsStatus: TestsStatus | null;
  /** How the log was read; null when there was no patch or no log. */
  log: LogEval | null;
}

/** The harness's `get_eval_report` for one instance. */
export function gradeInstance(input: GradeInput): Grade {
  const { instance } = input;
  const id = instance.instance_id;
  const entry: InstanceReport = {
    patch_is_None: false,
    patch_exists: false,
    patch_successfully_applied: false,
    resolved: false,
  };
  const done = (resolution: ResolutionStatus | null, testsStatus: TestsStatus | null, log: LogEval | null): Grade => ({
    instanceId: id,
    report: { [id]: entry },
    resolution,
    testsStatus,
    log,
  });
  if (input.modelPatch === null || input.modelPatch === undefined) {
    entry.patch_is_None = true;
    return done(null, null, null);
  }
  entry.patch_exists = true;
  if (input.testOutput === null) return done(null, null, null);
  const log = evalTestLog(input.parser ?? parserForInstance(instance), input.testOutput);
  if (!log.found) return done(null, null, log);
  entry.patch_successfully_applied = true;
  const testsStatus = getTestsStatus(
    log.statusMap,
    {
      FAIL_TO_PASS: parseTestList(instance.FAIL_TO_PASS, "FAIL_TO_PASS"),
      PASS_TO_PASS: parseTestList(instance.PASS_TO_PASS, "PASS_TO_PASS"),
    },
    { evalType: FAIL_ONLY_REPOS.includes(instance.repo) ? "fail_only" : "pass_and_fail" },
  );
  const resolution = resolutionStatus(testsStatus);
  entry.resolved = resolution === "FULL";
  if (input.includeTestsStatus ?? true) entry.tests_status = testsStatus;
  return done(resolution, testsStatus, log);
}

/**
 * How a grade becomes a reward: "binary" (default) 1 for FULL else 0; "fraction": the FAIL_TO_PASS ratio when every
 * PASS_TO_PASS test passes, else 0; or any function of the grade.
 */
export type RewardSpec = "binary" | "fraction" | ((grade: Grade) => number);

export function reward(grade: Grade, spec: RewardSpec = "binary"): number {
  if (typeof spec === "function") return spec(grade);
  if (spec === "binary") return grade.resolution === "FULL" ? 1 : 0;
  if (spec === "fraction") {
    if (!grade.testsStatus || p2pRatio(grade.testsStatus) !== 1) return 0;
    return f2pRatio(grade.testsStatus);
  }
  throw new InvalidInputError(`unknown reward "${String(spec)}" (known: binary, fraction, or a function)`);
}

/** Parse a reward option as given on a command line or in a config ("binary" | "fraction"). */
export function parseRewardSpec(value: string): RewardSpec {
  if (value === "binary" || value === "fraction") return value;
  throw new InvalidInputError(`unknown reward "${value}" (known: binary, fraction)`);
}
