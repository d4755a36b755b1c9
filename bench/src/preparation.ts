/**
 * Workload 13, preparation and storage on the real sympy repository: base commits across its versions (a few
 * first-parent commits between each release and the one before, as SWE-bench's tasks of that version have), each
 * environment built from the repository by `prepare` one at a time into a home of its own; where each build's seconds
 * went (its steps), the worker time per task, and what the store holds per task — by kind, beside one task's tar.gz
 * pair and beside what compressing cold objects would give.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import { prepareInstances, type PrepareResult } from "../../src/env/prepare.js";
import { nodeCacheFor } from "../../src/env/environments.js";
import { manifestPath, objectPath, openStore } from "../../src/env/store/layout.js";
import { readManifest } from "../../src/env/store/manifest.js";
import type { Instance } from "../../src/tasks/types.js";
import { homeLayout } from "../../src/util/home.js";
import { DiskUsage } from "./du.js";
import { ensureTarballs } from "./extract.js";
import { percentile } from "../../src/util/stats.js";
import type { PreparationResult, Unavailable } from "./types.js";

export interface PreparationOptions {
  /** A git repository (bare or not) of sympy/sympy with its release tags. */
  repo: string;
  /** Base commits per version. */
  perVersion: number;
  /** Only these versions (default: all of `VERSIONS`). */
  versions?: string[];
  specsFile?: string;
  work: string;
  log: (m: string) => void;
}

/** SWE-bench's sympy versions and the release each one's base commits come before. */
const VERSIONS: [string, string, string][] = [
  ["1.1", "sympy-1.0", "sympy-1.1"],
  ["1.2", "sympy-1.1", "sympy-1.2"],
  ["1.4", "sympy-1.2", "sympy-1.4"],
  ["1.5", "sympy-1.4", "sympy-1.5"],
  ["1.6", "sympy-1.5", "sympy-1.6"],
  ["1.7", "sympy-1.6", "sympy-1.7"],
  ["1.8", "sympy-1.7", "sympy-1.8"],
  ["1.9", "sympy-1.8", "sympy-1.9"],
  ["1.10", "sympy-1.9", "sympy-1.10"],
  ["1.11", "sympy-1.10", "sympy-1.11"],
  ["1.12", "sympy-1.11", "sympy-1.12"],
  ["1.13", "sympy-1.12", "sympy-1.13.0"],
];

export async function benchPreparation(o: PreparationOptions): Promise<PreparationResult | Unavailable> {
  if (!existsSync(o.repo)) return { available: false, reason: `no sympy repository at ${o.repo} (--sympy DIR)` };
  const unknown = (o.versions ?? []).filter((v) => !VERSIONS.some(([known]) => known === v));
  if (unknown.length)
    return { available: false, reason: `unknown sympy version(s) ${unknown.join(", ")} (--sympy-versions)` };
  const instances = sympyInstances(o.repo, o.perVersion, o.versions);
  const only = o.versions ? `-${o.versions.join("_")}` : "";
  const dir = join(o.work, `sympy-${o.perVersion}-per-version${only}`);
  const reposDir = join(dir, "repos");
  mkdirSync(join(reposDir, "sympy"), { recursive: true });
  if (!existsSync(join(reposDir, "sympy", "sympy")))
    execFileSync("ln", ["-s", o.repo, join(reposDir, "sympy", "sympy")]);
  const home = join(dir, "home");
  // Built one at a time, in version order: the worker time of a task is its build's own, not a share of two.
  const results: PrepareResult[] = [];
  for (const [i, instance] of instances.entries()) {
    results.push(...(await prepareInstances([instance], { home, reposDir, specsFile: o.specsFile, workers: 1 })));
    const r = results.at(-1)!;
    o.log(
      `preparation: ${i + 1}/${instances.length} ${r.instanceId} ${r.status} ${(r.durationMs / 1000).toFixed(1)} s`,
    );
  }
  const built = results.filter((r) => r.status === "built");
  const failed = results.filter((r) => r.status === "failed");
  if (built.length === 0 && failed.length > 0)
    return { available: false, reason: `every build failed, e.g. ${failed[0]!.error?.split("\n")[0]}` };
  writeFileSync(join(dir, "results.json"), JSON.stringify(results, null, 2));
  const keys = [...new Set(results.filter((r) => r.status !== "failed").map((r) => r.key))];
  return {
    available: true,
    repo: "sympy/sympy",
    tasks: keys.length,
    versions: new Set(instances.map((i) => i.version)).size,
    failed: failed.length,
    ...timings(results, instances),
    storage: await storagePerTask(home, keys, o.work),
  };
}

/** `perVersion` first-parent commits evenly spread between each release and the one before (the ends left out). */
export function sympyInstances(repo: string, perVersion: number, versions?: string[]): Instance[] {
  const git = (...args: string[]): string =>
    execFileSync("git", ["--git-dir", gitDir(repo), ...args])
      .toString()
      .trim();
  const rows: Instance[] = [];
  for (const [version, from, to] of VERSIONS) {
    if (versions && !versions.includes(version)) continue;
    let chain: string[];
    try {
      const a = git("merge-base", "master", from);
      const b = git("merge-base", "master", to);
      chain = git("rev-list", "--first-parent", `${a}..${b}`).split("\n").filter(Boolean);
    } catch {
      continue; // a repository without that release
    }
    const inner = chain.slice(Math.floor(chain.length / 10), chain.length - Math.floor(chain.length / 10));
    for (let j = 0; j < perVersion && inner.length > 0; j++) {
      const commit = inner[Math.round((j * (inner.length - 1)) / Math.max(1, perVersion - 1))]!;
      rows.push(row(`sympy__sympy-${version.replace(".", "")}${String(j).padStart(2, "0")}`, commit, version));
    }
  }
  return rows;
}

function row(id: string, commit: string, version: string): Instance {
  return {
    instance_id: id,
    repo: "sympy/sympy",
    base_commit: commit,
    environment_setup_commit: commit,
    version,
    patch: "",
    test_patch: "",
    problem_statement: "",
    FAIL_TO_PASS: [],
    PASS_TO_PASS: [],
  };
}

/** `$MINISANDBOX_MIRRORS/sympy+sympy/repo`, else the `.mirror` directory beside the checkout (as the tests use). */
export function defaultSympyRepo(): string {
  const mirrors = process.env.MINISANDBOX_MIRRORS ?? join(import.meta.dirname, "..", "..", "..", "..", ".mirror");
  return join(mirrors, "sympy+sympy", "repo");
}

function gitDir(repo: string): string {
  return existsSync(join(repo, ".git")) ? join(repo, ".git") : repo;
}

/**
 * Worker time per task (all builds; warm ones: dependencies restored from a snapshot), each step's median; and the
 * same for the builds that follow another commit of their own version (what reuse within a version gives).
 */
function timings(
  results: PrepareResult[],
  instances: Instance[],
): Pick<PreparationResult, "perTaskMs" | "warm" | "steps" | "later"> {
  const built = results.filter((r) => r.status === "built" && r.steps);
  const warm = built.filter((r) => !r.steps!.some((s) => s.name === "venv"));
  const versionOf = new Map(instances.map((i) => [i.instance_id, i.version]));
  // In build order: a build is a later one when any build of its version (cold or warm) came before it.
  const seen = new Set<string | undefined>();
  const after = new Set(
    built.filter((r) => {
      const v = versionOf.get(r.instanceId);
      return seen.has(v) || !seen.add(v);
    }),
  );
  const later = warm.filter((r) => after.has(r));
  const round = (n: number | null): number | null => (n === null ? null : Math.round(n));
  const median = (xs: number[]): number | null =>
    xs.length
      ? percentile(
          [...xs].sort((a, b) => a - b),
          50,
        )
      : null;
  const group = (rs: PrepareResult[]) => {
    const names = [...new Set(rs.flatMap((r) => r.steps!.map((s) => s.name)))];
    const step = (r: PrepareResult, n: string): number => r.steps!.find((s) => s.name === n)?.durationMs ?? 0;
    return {
      builds: rs.length,
      p50Ms: round(median(rs.map((r) => r.durationMs))),
      steps: names.map((name) => ({ name, p50Ms: round(median(rs.map((r) => step(r, name)))) ?? 0 })),
    };
  };
  const w = group(warm);
  return {
    perTaskMs: round(built.length ? built.reduce((n, r) => n + r.durationMs, 0) / built.length : null),
    warm: { builds: w.builds, p50Ms: w.p50Ms },
    steps: w.steps,
    later: group(later),
  };
}

/** Allocated bytes of the layers' objects (each once) and manifests, per task; what they are; compressed. */
async function storagePerTask(home: string, keys: string[], work: string): Promise<PreparationResult["storage"]> {
  const store = openStore(homeLayout(home).store);
  const du = new DiskUsage();
  const seen = new Set<string>();
  const byKind: Record<string, number> = {};
  let compressed = 0;
  for (const key of keys) {
    const m = await readManifest(store, key);
    await du.add(manifestPath(store, key));
    for (const [tree, t] of Object.entries(m.trees)) {
      for (const e of t.entries) {
        if (e.type !== "file" || seen.has(e.object)) continue;
        seen.add(e.object);
        await du.add(objectPath(store, e.object));
        const kind = kindOf(tree, String(e.path));
        byKind[kind] = (byKind[kind] ?? 0) + e.size;
        // Packs are compressed already; anything else as one object alone would be when cold.
        compressed += kind === "git packs" ? e.size : deflateSync(readFileSync(objectPath(store, e.object))).length;
      }
    }
  }
  const lease = await nodeCacheFor(home).acquire(keys[0]!, { form: "tree" });
  let targz: number;
  try {
    targz = (await ensureTarballs(work, keys[0]!, { testbed: lease.trees["testbed"]!, venv: lease.trees["venv"]! }))
      .bytes;
  } finally {
    await lease.release();
  }
  return {
    storeBytes: du.allocated,
    perTaskBytes: Math.round(du.allocated / keys.length),
    logicalByKind: byKind,
    compressedPerTaskBytes: Math.round(compressed / keys.length),
    targzOneTaskBytes: targz,
  };
}

function kindOf(tree: string, path: string): string {
  if (tree !== "testbed") return `${tree} ${path.endsWith(".pyc") ? ".pyc" : "files"}`;
  if (path.startsWith(".git/objects/pack/")) return "git packs";
  if (path.startsWith(".git/")) return "git other";
  if (path.endsWith(".pyc")) return "testbed .pyc";
  return path.endsWith(".py") ? "testbed .py" : "testbed other";
}
