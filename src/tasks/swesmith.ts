import { InvalidInputError } from "../errors.js";
import { reversePatch } from "./patch.js";

/**
 * SWE-smith rows (HF `SWE-bench/SWE-smith*`, or `swesmith harness gather` output):
 *   instance_id  "<owner>__<name>.<commit8>.<bug id>"   e.g. "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc"
 *   repo         "swesmith/<owner>__<name>.<commit8>"   (older exports: "<owner>__<name>.<commit8>")
 *   patch        the diff that INTRODUCES the bug
 *   FAIL_TO_PASS / PASS_TO_PASS (lists), image_name, problem_statement, created_at
 *   base_commit  (gather output only) the commit on the mirror's `<instance_id>` branch with the bug committed
 * The snapshot mirror is `git init` of upstream at <commit8> with one commit on `main`; every task of that
 * snapshot shares one environment.
 */
const MIRROR_RE = /^(?:swesmith\/)?([A-Za-z0-9_.-]+?)__([A-Za-z0-9_.-]+)\.([0-9a-f]{8})$/;
const INSTANCE_RE = /^([A-Za-z0-9_.-]+?)__([A-Za-z0-9_.-]+)\.([0-9a-f]{8})\.[^./]+$/;

export interface SnapshotId {
  /** "swesmith/<owner>__<name>.<commit8>" */
  mirror: string;
  /** "<owner>/<name>" */
  upstream: string;
  commit8: string;
}

function snapshotFrom(m: RegExpExecArray): SnapshotId {
  const [, owner, name, commit8] = m;
  return { mirror: `swesmith/${owner}__${name}.${commit8}`, upstream: `${owner}/${name}`, commit8: commit8! };
}

/** Whether a repository name is a SWE-smith snapshot mirror ("swesmith/<owner>__<name>.<commit8>"). */
export function isSweSmithMirror(repo: string): boolean {
  return repo.startsWith("swesmith/") && MIRROR_RE.test(repo);
}

/** The snapshot a SWE-smith row belongs to, or undefined when the row is not SWE-smith shaped. */
export function sweSmithSnapshot(row: Record<string, unknown>): SnapshotId | undefined {
  const repo = typeof row.repo === "string" ? row.repo : "";
  const byRepo = MIRROR_RE.exec(repo);
  if (byRepo) return snapshotFrom(byRepo);
  // Some exports keep the upstream "owner/name" in `repo`; the instance id still names the snapshot.
  const id = typeof row.instance_id === "string" ? row.instance_id : "";
  const image = typeof row.image_name === "string" ? row.image_name : "";
  const byId = INSTANCE_RE.exec(id);
  if (byId && (image.includes("swesmith") || !("test_patch" in row))) return snapshotFrom(byId);
  return undefined;
}

/**
 * Rewrite a SWE-smith row in place onto the Instance shape. `where` names the row in errors.
 * Snapshot commit: the row's `snapshot_commit` (a minisandbox extension, e.g. written by the fixture
 * generator) or the mirror's `main` branch, which is the snapshot by construction.
 */
export function normalizeSweSmithRow(row: Record<string, unknown>, snap: SnapshotId, where: string): void {
  if (row.task_format === "swesmith" && typeof row.bug_patch === "string") {
    // Already normalized (e.g. a dataset we wrote back out): reversing again would turn the fix into the bug.
    if (typeof row.base_commit !== "string" || row.base_commit === "") row.base_commit = "main";
    row.repo = snap.mirror;
    row.upstream_repo ??= snap.upstream;
    row.test_patch ??= "";
    return;
  }
  const bug = row.patch;
  if (typeof bug !== "string" || bug.trim() === "")
    throw new InvalidInputError(`${where}: SWE-smith row has no bug patch in "patch"`);
  let gold: string;
  try {
    gold = reversePatch(bug);
  } catch (e) {
    throw new InvalidInputError(`${where}: cannot reverse the SWE-smith bug patch: ${(e as Error).message}`);
  }
  if (typeof row.base_commit === "string" && row.base_commit !== "") row.bug_commit = row.base_commit;
  const snapshotCommit = row.snapshot_commit;
  row.base_commit = typeof snapshotCommit === "string" && snapshotCommit !== "" ? snapshotCommit : "main";
  row.repo = snap.mirror;
  row.upstream_repo = snap.upstream;
  row.bug_patch = bug;
  row.patch = gold;
  row.test_patch ??= "";
  row.task_format = "swesmith";
}
