import { InvalidInputError } from "../errors.js";
import type { plan } from "../wire/index.js";
import type { Instance, TaskFormat } from "./types.js";
import { normalizeSweSmithRow, sweSmithSnapshot } from "./swesmith.js";

const TEXT_FIELDS = ["patch", "test_patch", "problem_statement"] as const;
const OPTIONAL_TEXT_FIELDS = ["hints_text", "created_at", "environment_setup_commit"] as const;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** FAIL_TO_PASS / PASS_TO_PASS: a list, or (as published) a JSON string holding a list. */
function testList(value: unknown, field: string, where: string): string[] {
  if (value === undefined || value === null || value === "") return [];
  let list: unknown = value;
  if (typeof value === "string") {
    try {
      list = JSON.parse(value);
    } catch {
      throw new InvalidInputError(
        `${where}: ${field} is a string but not a JSON list: ${JSON.stringify(value.slice(0, 80))}`,
      );
    }
  }
  if (!Array.isArray(list) || !list.every((t) => typeof t === "string")) {
    throw new InvalidInputError(`${where}: ${field} must be a list of test names (or a JSON string of one)`);
  }
  return list as string[];
}

/**
 * Validate and normalize one dataset row into an Instance. `where` (e.g. "data.jsonl line 3") prefixes errors.
 * The row object is copied; unknown fields are kept unchanged.
 */
export function normalizeInstance(raw: unknown, where = "instance", format: "auto" | TaskFormat = "auto"): Instance {
  if (!isRecord(raw))
    throw new InvalidInputError(`${where}: expected an object, got ${Array.isArray(raw) ? "a list" : typeof raw}`);
  const row: Record<string, unknown> = { ...raw };
  const id = row.instance_id;
  if (typeof id !== "string" || id === "") throw new InvalidInputError(`${where}: missing "instance_id"`);
  where = `${where} (${id})`;
  if (typeof row.repo !== "string" || row.repo === "") throw new InvalidInputError(`${where}: missing "repo"`);

  for (const f of [...TEXT_FIELDS, ...OPTIONAL_TEXT_FIELDS, "base_commit"]) {
    const v = row[f];
    if (v !== undefined && v !== null && typeof v !== "string")
      throw new InvalidInputError(`${where}: "${f}" must be a string`);
    if (v === null) delete row[f];
  }
  // Exports through pandas sometimes turn "3.0" into 3; keep what we can and let spec lookup say what's known.
  if (typeof row.version === "number") row.version = String(row.version);
  else if (row.version === null) delete row.version;
  else if (row.version !== undefined && typeof row.version !== "string")
    throw new InvalidInputError(`${where}: "version" must be a string`);

  row.FAIL_TO_PASS = testList(row.FAIL_TO_PASS, "FAIL_TO_PASS", where);
  row.PASS_TO_PASS = testList(row.PASS_TO_PASS, "PASS_TO_PASS", where);

  if (typeof row.spec === "string") {
    // Parquet has no free-form objects; a JSON string is the natural way to carry a row-level spec there.
    try {
      row.spec = JSON.parse(row.spec);
    } catch {
      throw new InvalidInputError(`${where}: "spec" is a string but not JSON`);
    }
  }
  if (row.spec === null) delete row.spec;
  if (row.spec !== undefined && !isRecord(row.spec))
    throw new InvalidInputError(`${where}: "spec" must be an object of spec fields`);

  const snap = format === "swebench" ? undefined : sweSmithSnapshot(row);
  if (format === "swesmith" && !snap) {
    throw new InvalidInputError(
      `${where}: not a SWE-smith row (repo ${JSON.stringify(row.repo)} is not "swesmith/<owner>__<name>.<commit8>")`,
    );
  }
  if (snap) {
    normalizeSweSmithRow(row, snap, where);
  } else {
    if (typeof row.base_commit !== "string" || row.base_commit === "")
      throw new InvalidInputError(`${where}: missing "base_commit"`);
    row.task_format = "swebench";
  }
  for (const f of TEXT_FIELDS) row[f] ??= "";
  return row as Instance;
}

/** An instance as a plan carries it to other nodes: normalized, its format said (a hand-built one's: swebench). */
export function asTaskInstance(instance: Instance): plan.TaskInstance {
  return { ...instance, task_format: instance.task_format ?? "swebench" };
}
