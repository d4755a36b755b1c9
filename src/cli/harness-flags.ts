/**
 * The SWE-bench harness's muscle memory: its flag names (`--dataset_name`, `--predictions_path`, `--max_workers`,
 * `--run_id`, `--instance_ids`, `--split`, `--report_dir`) accepted as hidden aliases of ours, and a dataset given by
 * Hub name read from the local Hugging Face cache (never downloaded).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Command, Option } from "commander";
import { InvalidInputError } from "../errors.js";
import { collect } from "./common.js";

/** Harness flag → our option's attribute name (as commander stores it). */
const ALIASES = {
  dataset_name: "dataset",
  predictions_path: "predictions",
  max_workers: "workers",
  run_id: "runId",
  instance_ids: "instanceIds",
  report_dir: "reportDir",
} as const;

type Alias = keyof typeof ALIASES;

/** Add the harness's names for the options `cmd` has (hidden from --help), and `--split`. */
export function addHarnessFlags(cmd: Command, which: Alias[]): Command {
  for (const alias of which) {
    const flag = `--${alias} <${alias === "instance_ids" ? "ID..." : "VALUE"}>`;
    const o = new Option(flag).hideHelp();
    cmd.addOption(alias === "instance_ids" ? o.argParser(collect).default([]) : o);
  }
  return cmd.option("--split <SPLIT>", "split of a dataset given by Hub name (default: test)");
}

/** Fold the harness's names into ours; giving both spellings with different values is refused. */
export function applyHarnessFlags<T extends object>(o: T): T {
  const rec = o as Record<string, unknown>;
  for (const [alias, ours] of Object.entries(ALIASES)) {
    const v = rec[alias];
    if (v === undefined || (Array.isArray(v) && v.length === 0)) continue;
    if (Array.isArray(v)) rec[ours] = [...((rec[ours] as string[] | undefined) ?? []), ...v];
    else if (rec[ours] !== undefined && rec[ours] !== v && !isDefault(ours, rec[ours]))
      throw new InvalidInputError(`--${alias} and its alias disagree (${String(v)} vs ${String(rec[ours])})`);
    else rec[ours] = v;
  }
  return o;
}

/** Our defaults (e.g. --workers 2) yield to an explicit harness flag. */
const isDefault = (key: string, value: unknown): boolean => key === "workers" && value === "2";

/**
 * A dataset argument: a file, or a Hub name (`org/name`) found in the local Hugging Face cache. Several cached
 * shards are joined into one JSONL under `<home>/datasets/`.
 */
export async function resolveDatasetArg(arg: string | undefined, split: string | undefined, home: string) {
  if (!arg) throw new InvalidInputError("--dataset is required (a JSON, JSONL or parquet file, or a Hub name)");
  const { cachedDatasetFiles, looksLikeDatasetName } = await import("../tasks/hf-cache.js");
  if (!looksLikeDatasetName(arg)) return arg;
  const files = cachedDatasetFiles(arg, split ?? "test");
  if (files.length === 1) return files[0]!;
  const { loadDataset } = await import("../tasks/index.js");
  const rows = (await Promise.all(files.map((f) => loadDataset(f)))).flat();
  const dir = join(home, "datasets");
  mkdirSync(dir, { recursive: true });
  const out = join(dir, `${arg.replace("/", "__")}.${split ?? "test"}.jsonl`);
  writeFileSync(out, `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
  return out;
}
