/** Which published task format a row came from. */
export type TaskFormat = "swebench" | "swesmith";

/**
 * One task (SWE-bench schema), normalized: FAIL_TO_PASS / PASS_TO_PASS are always string[], missing text fields
 * are "". Unknown fields of the row are kept as they were (e.g. `image_name`, `eval_script`, `log_parser`).
 *
 * SWE-smith rows are normalized onto the same shape: `repo`/`base_commit` name the shared environment snapshot,
 * `bug_patch` is the row's original `patch` (applied at sandbox start) and `patch` is its reverse (the gold fix).
 */
export interface Instance {
  instance_id: string;
  /** "owner/name"; for SWE-smith the snapshot mirror, e.g. "swesmith/oauthlib__oauthlib.1fd52536". */
  repo: string;
  /** Commit the workspace starts from; for SWE-smith the snapshot commit (or the ref "main", see README). */
  base_commit: string;
  /** Gold fix (unified diff). */
  patch: string;
  /** Tests revealing the bug (unified diff); "" for SWE-smith. */
  test_patch: string;
  problem_statement: string;
  hints_text?: string;
  created_at?: string;
  /** Selects the environment spec (SWE-bench table key). */
  version?: string;
  environment_setup_commit?: string;
  FAIL_TO_PASS: string[];
  PASS_TO_PASS: string[];
  /** Row-level environment spec fields; win over the built-in table and `--specs` overrides. */
  spec?: Record<string, unknown>;
  /** Set by loadDataset / normalizeInstance; absent on hand-built instances means "swebench". */
  task_format?: TaskFormat;
  /** SWE-smith: the patch that introduces the bug, to apply (and commit) when the workspace starts. */
  bug_patch?: string;
  /** SWE-smith: the row's original `base_commit`, i.e. the mirror's `<instance_id>` branch with the bug committed. */
  bug_commit?: string;
  /** SWE-smith: the upstream repository the snapshot was taken from, "owner/name". */
  upstream_repo?: string;
  [k: string]: unknown;
}

export interface LoadDatasetOptions {
  /** Keep only these instances (in dataset order); ids not found raise NotFoundError naming them. */
  instanceIds?: readonly string[];
  /** Force a row format instead of detecting it per row. */
  format?: "auto" | TaskFormat;
}
