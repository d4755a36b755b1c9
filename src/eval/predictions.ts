/**
 * Predictions input: a JSON list, JSONL, or a JSON object keyed by instance id (mini-swe-agent / SWE-agent
 * `preds.json`), detected from the content; or the keywords `gold` / `empty` given the dataset.
 * Malformed input raises InvalidInputError naming the file and line (or entry).
 */
import { readFile } from "node:fs/promises";
import { InvalidInputError, NotFoundError } from "../errors.js";
import type { Prediction } from "./types.js";

export const KEY_INSTANCE_ID = "instance_id";
export const KEY_MODEL = "model_name_or_path";
export const KEY_PREDICTION = "model_patch";

/** null or "": the harness counts these as empty patches and does not run them. */
export const isEmptyPatch = (p: Pick<Prediction, "model_patch">): boolean =>
  p.model_patch === null || p.model_patch === "";

/** Every instance's gold `patch` (model "gold"). */
export function goldPredictions(dataset: ReadonlyArray<{ instance_id: string; patch?: string }>): Prediction[] {
  return dataset.map((i) => ({ instance_id: i.instance_id, model_name_or_path: "gold", model_patch: i.patch ?? "" }));
}

/**
 * An empty patch for every instance (model "empty"). By the harness's rules these are empty-patch instances and not
 * run; a runner that wants the tests at the base commit (to validate FAIL_TO_PASS fails) must opt in to running them.
 */
export function emptyPredictions(dataset: ReadonlyArray<{ instance_id: string }>): Prediction[] {
  return dataset.map((i) => ({ instance_id: i.instance_id, model_name_or_path: "empty", model_patch: "" }));
}

/**
 * Load predictions from a file, or the keywords "gold" / "empty" (which need the dataset).
 */
export async function loadPredictions(
  pathOrKeyword: string,
  dataset?: ReadonlyArray<{ instance_id: string; patch?: string }>,
): Promise<Prediction[]> {
  if (pathOrKeyword === "gold" || pathOrKeyword === "empty") {
    if (!dataset) throw new InvalidInputError(`predictions "${pathOrKeyword}" need the dataset's instances`);
    return pathOrKeyword === "gold" ? goldPredictions(dataset) : emptyPredictions(dataset);
  }
  let text: string;
  try {
    text = await readFile(pathOrKeyword, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new NotFoundError(`predictions file not found: ${pathOrKeyword}`);
    if (code === "EISDIR") throw new InvalidInputError(`predictions path is a directory: ${pathOrKeyword}`);
    throw e;
  }
  return parsePredictions(text, pathOrKeyword);
}

/** Parse predictions text; `source` names the file in error messages. */
export function parsePredictions(text: string, source: string): Prediction[] {
  const body = text.replace(/^\uFEFF/, "");
  if (body.trim() === "") throw new InvalidInputError(`${source}: contains no predictions (empty file)`);
  let whole: unknown;
  let wholeError: SyntaxError | undefined;
  try {
    whole = JSON.parse(body);
  } catch (e) {
    wholeError = e as SyntaxError;
  }
  if (wholeError === undefined) return fromJson(whole, source);
  // Not one JSON document: JSON Lines, unless it is clearly a (broken) JSON list or a pretty-printed object.
  const first = body.trimStart()[0];
  const firstLine = body.trimStart().split("\n", 1)[0]!.trim();
  if (first === "[" || firstLine === "{") throw jsonSyntaxError(body, wholeError, source);
  return fromJsonl(body, source);
}

function fromJson(doc: unknown, source: string): Prediction[] {
  if (Array.isArray(doc)) return doc.map((entry, i) => toPrediction(entry, `${source}: entry ${i}`));
  if (isObject(doc)) {
    // One prediction object (a one-line JSONL file) or a map keyed by instance id (whose entries are objects).
    if (typeof doc[KEY_INSTANCE_ID] === "string") return [toPrediction(doc, `${source}: line 1`)];
    return Object.entries(doc).map(([key, entry]) => toPrediction(entry, `${source}: entry "${key}"`, key));
  }
  throw new InvalidInputError(
    `${source}: predictions must be a list, JSON Lines, or an object keyed by instance id (got ${typeName(doc)})`,
  );
}

function fromJsonl(body: string, source: string): Prediction[] {
  const out: Prediction[] = [];
  const lines = body.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      throw new InvalidInputError(`${source}:${i + 1}: not valid JSON (${(e as Error).message})`);
    }
    out.push(toPrediction(value, `${source}:${i + 1}`));
  }
  return out;
}

function toPrediction(value: unknown, where: string, key?: string): Prediction {
  if (!isObject(value)) throw new InvalidInputError(`${where}: a prediction must be an object, got ${typeName(value)}`);
  const id = value[KEY_INSTANCE_ID] ?? key;
  if (typeof id !== "string" || id === "") throw new InvalidInputError(`${where}: missing "${KEY_INSTANCE_ID}"`);
  if (key !== undefined && id !== key) {
    throw new InvalidInputError(`${where}: key "${key}" differs from its "${KEY_INSTANCE_ID}" "${id}"`);
  }
  // Both fields are required, as the harness reads them (pred[KEY_PREDICTION], and KEY_MODEL names the report).
  if (!(KEY_PREDICTION in value))
    throw new InvalidInputError(`${where}: missing "${KEY_PREDICTION}" (the diff to evaluate; "" or null for none)`);
  const patch = value[KEY_PREDICTION] ?? null;
  if (patch !== null && typeof patch !== "string") {
    throw new InvalidInputError(`${where}: "${KEY_PREDICTION}" must be a string or null, got ${typeName(patch)}`);
  }
  const model = value[KEY_MODEL];
  if (model === undefined || model === null)
    throw new InvalidInputError(
      `${where}: missing "${KEY_MODEL}" (the model's name; it names the run's report, <model>.<run_id>.json)`,
    );
  if (typeof model !== "string" || model === "") {
    throw new InvalidInputError(`${where}: "${KEY_MODEL}" must be a non-empty string, got ${JSON.stringify(model)}`);
  }
  return { ...value, instance_id: id, model_name_or_path: model, model_patch: patch };
}

/** Predictions by instance id; a later duplicate replaces an earlier one, as in the harness. */
export function indexPredictions(predictions: readonly Prediction[]): Map<string, Prediction> {
  return new Map(predictions.map((p) => [p.instance_id, p]));
}

/** Prediction ids that are not in the dataset (the harness refuses to run when there are any). */
export function unknownPredictionIds(
  predictions: Iterable<{ instance_id: string }>,
  datasetIds: Iterable<string>,
): string[] {
  const known = new Set(datasetIds);
  return [...new Set([...predictions].map((p) => p.instance_id))].filter((id) => !known.has(id));
}

function jsonSyntaxError(body: string, e: SyntaxError, source: string): InvalidInputError {
  const pos = /position (\d+)/.exec(e.message);
  if (!pos) return new InvalidInputError(`${source}: not valid JSON (${e.message})`);
  const before = body.slice(0, Number(pos[1]));
  const line = before.split("\n").length;
  const column = before.length - before.lastIndexOf("\n");
  return new InvalidInputError(`${source}:${line}:${column}: not valid JSON (${e.message})`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "a list" : typeof v);
