/** Public API of the bench (see README.md): run it, write the results files, print the summary. */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { renderMarkdown, renderSvg } from "./report.js";
import { runBench, type BenchOptions } from "./run.js";
import { defaultResultsDir } from "./setup.js";
import type { BenchResults } from "./types.js";

export { runBench, sizesFor, ALL_WORKLOADS, DATASET_WORKLOADS, type BenchOptions, type Workload } from "./run.js";
export { renderMarkdown, renderSvg, computeRatios, computeTargets } from "./report.js";
export type * from "./types.js";

export interface WrittenFiles {
  json: string;
  markdown: string;
  svg: string;
}

function localDate(d = new Date()): string {
  const p = (n: number): string => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

/**
 * Write results: with `outDir`, DIR/results.{json,md,svg}; else bench/results/<date>.{json,md,svg} (quick runs:
 * <date>-quick.*; dataset runs: <date>-dataset.*), and for full fixture runs latest.{json,md,svg} for the README.
 */
export function writeResults(results: BenchResults, opts: { outDir?: string; resultsDir?: string } = {}): WrittenFiles {
  const md = renderMarkdown(results);
  const svg = renderSvg(results);
  const json = `${JSON.stringify(results, null, 2)}\n`;
  const write = (dir: string, base: string): WrittenFiles => {
    mkdirSync(dir, { recursive: true });
    const files = { json: join(dir, `${base}.json`), markdown: join(dir, `${base}.md`), svg: join(dir, `${base}.svg`) };
    writeFileSync(files.json, json);
    writeFileSync(files.markdown, md);
    writeFileSync(files.svg, svg);
    return files;
  };
  if (opts.outDir) return write(opts.outDir, "results");
  const dir = opts.resultsDir ?? defaultResultsDir();
  const suffix = results.source.kind === "dataset" ? "-dataset" : results.quick ? "-quick" : "";
  const files = write(dir, `${localDate(new Date(results.date))}${suffix}`);
  if (!suffix) write(dir, "latest");
  return files;
}

/** What `npm run bench` does. */
export async function benchMain(opts: BenchOptions & { outDir?: string; json?: boolean }): Promise<BenchResults> {
  process.env.PIP_RETRIES ??= "0";
  const results = await runBench(opts);
  const files = writeResults(results, { outDir: opts.outDir });
  if (opts.json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  else {
    process.stdout.write(renderMarkdown(results));
    process.stdout.write(`\nwrote ${files.json}\n      ${files.markdown}\n      ${files.svg}\n`);
  }
  return results;
}
