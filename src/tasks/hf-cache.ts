/**
 * Datasets by name, as the SWE-bench harness takes them (`--dataset_name princeton-nlp/SWE-bench_Lite`), read from a
 * local Hugging Face hub cache when they are there. Nothing is ever downloaded: a name not in the cache is an error
 * that says how to get the file.
 *
 * Cache layout (huggingface_hub): `<hub>/datasets--<org>--<name>/snapshots/<revision>/**\/<split>-*.parquet`, where
 * `<hub>` is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
 * `~/.cache/huggingface/hub`.
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { NotFoundError } from "../errors.js";

/** The hub cache directory this environment's huggingface_hub would use. */
export function hubCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return join(env.HF_HOME, "hub");
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "huggingface", "hub");
}

/** `org/name` (what a Hub dataset id looks like), not a path that exists. */
export function looksLikeDatasetName(arg: string): boolean {
  return /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(arg) && !existsSync(arg);
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out;
}

/**
 * The cached files of dataset `name`'s `split` (parquet, JSON or JSONL shards, sorted), newest snapshot first.
 * NotFoundError when the cache does not have it, naming where it looked and how to get it.
 */
export function cachedDatasetFiles(name: string, split: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const hub = hubCacheDir(env);
  const snapshots = join(hub, `datasets--${name.replace("/", "--")}`, "snapshots");
  const how =
    `download it once with \`huggingface-cli download --repo-type dataset ${name}\` (or ` +
    `\`python -c "import datasets; datasets.load_dataset('${name}', split='${split}')"\`), ` +
    "or give the file itself (JSON, JSONL or parquet)";
  if (!existsSync(snapshots))
    throw new NotFoundError(`dataset ${name} is not in the local Hugging Face cache (${hub}); ${how}`);
  const revisions = readdirSync(snapshots)
    .map((r) => join(snapshots, r))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const shard = new RegExp(`(^|/)${split.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(-[^/]*)?\\.(parquet|jsonl?)$`);
  for (const rev of revisions) {
    const files = filesUnder(rev)
      .filter((f) => shard.test(f.slice(rev.length)))
      .sort();
    if (files.length) return files;
  }
  throw new NotFoundError(`dataset ${name} in the local Hugging Face cache (${hub}) has no split "${split}"; ${how}`);
}
