/** Types shared by the evaluation modules; names and field spellings follow the SWE-bench harness. */

/** The statuses the harness's parsers produce (SWE-bench `TestStatus`). */
export const TEST_STATUSES = ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"] as const;
export type TestStatus = (typeof TEST_STATUSES)[number];

/**
 * Test name -> status, as a harness parser returns it. Values are TestStatus words, except where the harness itself
 * records a raw token (e.g. pytest's `ERROR: file or directory not found: x` gives `{file: "ERROR:"}`); we keep such
 * tokens so that grading, which only recognises the exact words, reaches the harness's verdicts.
 * Own properties only: look names up with `Object.hasOwn`.
 */
export type StatusMap = Record<string, string>;

/** What evaluation needs from a dataset row (structurally satisfied by the tasks module's Instance). */
export interface EvalInstance {
  instance_id: string;
  /** "owner/name" */
  repo: string;
  base_commit: string;
  /** Tests revealing the bug (unified diff). */
  test_patch: string;
  /** Gold fix (unified diff). */
  patch?: string;
  version?: string;
  /** Lists of test names; published files hold them as JSON strings, so both are accepted. */
  FAIL_TO_PASS?: string | readonly string[];
  PASS_TO_PASS?: string | readonly string[];
  /** Name of the log parser to use (some dataset exports carry it), e.g. "parse_log_pytest". */
  log_parser?: string;
  [key: string]: unknown;
}

/** One prediction, as in SWE-bench predictions files. */
export interface Prediction {
  instance_id: string;
  model_name_or_path: string;
  /** null or "" means no patch (counted as an empty patch, not run). */
  model_patch: string | null;
  [key: string]: unknown;
}

export interface SuccessFailure {
  success: string[];
  failure: string[];
}

/** `tests_status` of report.json, in the harness's key order. */
export interface TestsStatus {
  FAIL_TO_PASS: SuccessFailure;
  PASS_TO_PASS: SuccessFailure;
  FAIL_TO_FAIL: SuccessFailure;
  PASS_TO_FAIL: SuccessFailure;
}

/** The value under the instance id in report.json, in the harness's key order. */
export interface InstanceReport {
  patch_is_None: boolean;
  patch_exists: boolean;
  patch_successfully_applied: boolean;
  resolved: boolean;
  /** Present only when the test log could be graded (as in the harness). */
  tests_status?: TestsStatus;
}

/** report.json: `{<instance_id>: InstanceReport}`. */
export type InstanceReportFile = Record<string, InstanceReport>;
