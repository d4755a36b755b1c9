import { open, readFile } from "node:fs/promises";
import { basename } from "node:path";
import * as zlib from "node:zlib";
import type { Compressors } from "hyparquet";
import { InvalidInputError, NotFoundError } from "../errors.js";
import { normalizeInstance } from "./normalize.js";
import type { Instance, LoadDatasetOptions } from "./types.js";

/** One raw row and how to name it in errors ("row 3", "line 7"). */
interface RawRow {
  value: unknown;
  where: string;
}

/**
 * Load a SWE-bench / SWE-smith dataset: a JSON list, JSONL (one object per line), or parquet as published on
 * HuggingFace. The format is sniffed from the content (parquet magic, a leading "["), not the file name.
 * Errors name the file and the row (JSON list, parquet) or line (JSONL).
 */
export async function loadDataset(file: string, opts: LoadDatasetOptions = {}): Promise<Instance[]> {
  const parquet = await isParquet(file);
  // Content decides the format; a file named .parquet that is not one is said to be so, not "invalid JSON".
  if (!parquet && /\.parquet$/i.test(file))
    throw new InvalidInputError(`${file}: not a parquet file (it does not start with the parquet magic bytes PAR1)`);
  const rows = parquet ? await readParquetRows(file) : await readTextRows(file);
  const instances = rows.map((r) => normalizeInstance(r.value, r.where, opts.format ?? "auto"));
  checkUnique(instances, rows, file);
  return opts.instanceIds ? selectInstances(instances, opts.instanceIds, file) : instances;
}

/** Keep the given ids (dataset order); throw NotFoundError naming every id that is missing. */
export function selectInstances(instances: Instance[], ids: readonly string[], file = "the dataset"): Instance[] {
  const wanted = new Set(ids);
  const found = new Set(instances.map((i) => i.instance_id));
  const missing = [...wanted].filter((id) => !found.has(id));
  if (missing.length > 0) {
    const shown = missing.slice(0, 20).join(", ") + (missing.length > 20 ? `, … (${missing.length - 20} more)` : "");
    throw new NotFoundError(
      `${missing.length} instance id${missing.length === 1 ? "" : "s"} not found in ${file} ` +
        `(${instances.length} instances): ${shown}`,
    );
  }
  return instances.filter((i) => wanted.has(i.instance_id));
}

function checkUnique(instances: Instance[], rows: RawRow[], file: string): void {
  const seen = new Map<string, string>();
  instances.forEach((inst, n) => {
    const prev = seen.get(inst.instance_id);
    if (prev)
      throw new InvalidInputError(`${file}: duplicate instance_id ${inst.instance_id} (${prev} and ${rows[n]!.where})`);
    seen.set(inst.instance_id, rows[n]!.where);
  });
}

async function isParquet(file: string): Promise<boolean> {
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(file, "r");
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "ENOENT") throw new NotFoundError(`dataset file not found: ${file}`);
    throw new InvalidInputError(`cannot read dataset ${file}: ${err.message}`);
  }
  try {
    const buf = Buffer.alloc(4);
    const { bytesRead } = await fh.read(buf, 0, 4, 0);
    return bytesRead === 4 && buf.toString("latin1") === "PAR1";
  } finally {
    await fh.close();
  }
}

async function readTextRows(file: string): Promise<RawRow[]> {
  const text = (await readFile(file, "utf8")).replace(/^\uFEFF/, "");
  const name = basename(file);
  if (text.trim() === "") throw new InvalidInputError(`${file}: empty dataset`);
  if (text.trimStart().startsWith("[")) {
    let list: unknown;
    try {
      list = JSON.parse(text);
    } catch (e) {
      throw new InvalidInputError(`${file}: invalid JSON ${jsonErrorPlace(text, e as Error)}`);
    }
    if (!Array.isArray(list)) throw new InvalidInputError(`${file}: expected a JSON list of instances`);
    return list.map((value, n) => ({ value, where: `${name} row ${n + 1}` }));
  }
  // JSONL (also a single JSON object): one object per non-empty line.
  const rows: RawRow[] = [];
  const lines = text.split("\n");
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.trim();
    if (line === "") continue;
    try {
      rows.push({ value: JSON.parse(line), where: `${name} line ${n + 1}` });
    } catch (e) {
      const multiLine = n === 0 && line.startsWith("{") && !line.endsWith("}");
      throw new InvalidInputError(
        `${file} line ${n + 1}: invalid JSON (${(e as Error).message})` +
          (multiLine ? "; JSONL needs one object per line (a JSON dataset must be a list)" : ""),
      );
    }
  }
  return rows;
}

/** Turn V8's "at position N" (Node 20) into a line and column; Node 22 already says "(line L column C)". */
function jsonErrorPlace(text: string, e: Error): string {
  const lc = /line (\d+) column (\d+)/.exec(e.message);
  if (lc) return `at line ${lc[1]} column ${lc[2]} (${e.message})`;
  const pos = /at position (\d+)/.exec(e.message);
  if (!pos) return `(${e.message})`;
  const before = text.slice(0, Number(pos[1]));
  const line = before.split("\n").length;
  const col = Number(pos[1]) - before.lastIndexOf("\n");
  return `at line ${line} column ${col} (${e.message})`;
}

/** Decompressors for codecs hyparquet does not ship (it has SNAPPY); HF parquet is usually SNAPPY or ZSTD. */
function compressors(): Compressors {
  const c: Compressors = {
    GZIP: (input) => new Uint8Array(zlib.gunzipSync(input)),
    BROTLI: (input) => new Uint8Array(zlib.brotliDecompressSync(input)),
  };
  // zstd arrived in node:zlib in Node 22.15; use it when present.
  const zstd = (zlib as unknown as Record<string, unknown>).zstdDecompressSync;
  if (typeof zstd === "function") c.ZSTD = (input) => new Uint8Array((zstd as (b: Uint8Array) => Buffer)(input));
  return c;
}

async function readParquetRows(file: string): Promise<RawRow[]> {
  const name = basename(file);
  let objects: Record<string, unknown>[];
  try {
    // The parquet reader is loaded for parquet files only (most datasets are JSON; most commands read none).
    const { asyncBufferFromFile, parquetReadObjects } = await import("hyparquet");
    const buffer = await asyncBufferFromFile(file);
    objects = await parquetReadObjects({ file: buffer, compressors: compressors() });
  } catch (e) {
    const msg = (e as Error).message;
    const hint = /compression codec/.test(msg)
      ? " (this Node has no decompressor for it; re-save as SNAPPY or JSONL)"
      : "";
    throw new InvalidInputError(`${file}: cannot read parquet: ${msg}${hint}`);
  }
  return objects.map((o, n) => ({ value: plain(o), where: `${name} row ${n + 1}` }));
}

/** Parquet values -> JSON-like values (bigint, Date, typed arrays), so rows serialize like the JSON exports. */
function plain(v: unknown): unknown {
  if (typeof v === "bigint") return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (v instanceof Date) return v.toISOString();
  if (v instanceof Uint8Array) return Buffer.from(v).toString("utf8");
  if (Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView)))
    return Array.from(v as ArrayLike<unknown>, plain);
  if (typeof v === "object" && v !== null) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}
