/**
 * The environments every workload runs on: the fixture dataset (default; with a generated git history sized like a
 * real SWE-bench repository's, see `historyMiB`) or a user's dataset, built once into the bench's own minisandbox home
 * and reused by later runs (so `--quick` does not rebuild anything).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { makeFixtureDataset, MAX_FIXTURE_INSTANCES } from "../../src/fixtures/generate.js";
import { envFor, nodeCacheFor } from "../../src/env/environments.js";
import { builtInstances, prepareInstances } from "../../src/env/prepare.js";
import { findToolchain, type Toolchain } from "../../src/env/toolchains.js";
import type { EnvSpec, LayerKey } from "../../src/env/types.js";
import { loadDataset } from "../../src/tasks/index.js";
import type { Instance } from "../../src/tasks/types.js";
import { diskUsage } from "./du.js";

export interface BenchEnvironment {
  home: string;
  kind: "fixture" | "dataset";
  datasetPath: string;
  reposDir?: string;
  specsFile?: string;
  repo: string;
  /** Built instances of `repo`, dataset order (at most `maxInstances`). */
  instances: Instance[];
  keys: Map<string, LayerKey>;
  specs: Map<string, EnvSpec>;
  /** The instance single-environment workloads use. */
  primary: Instance;
  primaryKey: LayerKey;
  primarySpec: EnvSpec;
  toolchain: Toolchain;
  importModule: string;
  /** Fixture only: size of its generated git history in MiB (0 = the small calc repository alone). */
  historyMiB: number | null;
  testbedBytes: number;
  /** The testbed's git packs (.git/objects/pack/*.pack): what dominates a real SWE-bench testbed. */
  gitPackBytes: number;
  venvBytes: number;
  buildMs: number;
  built: number;
  notes: string[];
}

/** The minisandbox checkout this code runs from (a directory with our package.json and .git), if any. */
export function repoRoot(): string | undefined {
  let dir = import.meta.dirname;
  for (let i = 0; i < 6; i++) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg) && existsSync(join(dir, ".git"))) {
      try {
        if ((JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "minisandbox") return dir;
      } catch {
        /* not ours */
      }
    }
    dir = dirname(dir);
  }
  return undefined;
}

/** Where results go: the checkout's bench/results, else ./bench/results. */
export function defaultResultsDir(): string {
  const root = repoRoot();
  return root ? join(root, "bench", "results") : resolve("bench", "results");
}

/** Where the bench keeps what it reuses between runs: the checkout's bench/results/tmp (gitignored), else $TMPDIR. */
export function defaultWorkDir(): string {
  const root = repoRoot();
  return root
    ? join(root, "bench", "results", "tmp")
    : join(tmpdir(), `minisandbox-bench-${process.getuid?.() ?? "user"}`);
}

export interface SetupOptions {
  work: string;
  /** Instances of one repository to build (storage needs the largest N). */
  maxInstances: number;
  /** Fixture only: approximate size of the fixture repository's git pack, in MiB (0 = no generated history). */
  historyMiB: number;
  dataset?: string;
  reposDir?: string;
  specsFile?: string;
  importModule?: string;
  workers: number;
  log: (msg: string) => void;
}

export async function setupEnvironment(opts: SetupOptions): Promise<BenchEnvironment> {
  const home = join(opts.work, "home");
  mkdirSync(home, { recursive: true });
  const notes: string[] = [];
  const source = opts.dataset ? await datasetSource(opts, opts.dataset, notes) : await fixtureSource(opts);
  const { datasetPath, reposDir } = source;
  const built = await buildAll(home, source.candidates, { ...opts, reposDir }, notes);
  const { instances } = built;
  const keys = new Map<string, LayerKey>();
  const specs = new Map<string, EnvSpec>();
  for (const i of instances) {
    const e = envFor(i, { specsFile: opts.specsFile });
    keys.set(i.instance_id, e.key);
    specs.set(i.instance_id, e.spec);
  }
  const primary = instances[0]!;
  const primaryKey = keys.get(primary.instance_id)!;
  const primarySpec = specs.get(primary.instance_id)!;
  const toolchain = await findToolchain(primarySpec.python, { home });
  const sizes = await measureWorkspace(home, primary, primaryKey, opts.importModule);
  writeFileSync(
    join(opts.work, "last-setup.json"),
    JSON.stringify({ datasetPath, repo: primary.repo, instances: instances.length, primaryKey }, null, 2),
  );
  return {
    home,
    kind: source.kind,
    datasetPath,
    reposDir,
    specsFile: opts.specsFile,
    repo: primary.repo,
    instances,
    keys,
    specs,
    primary,
    primaryKey,
    primarySpec,
    toolchain,
    ...sizes,
    historyMiB: source.kind === "fixture" ? opts.historyMiB : null,
    buildMs: built.buildMs,
    built: built.count,
    notes,
  };
}

/** Where the instances come from, and the ones to build. */
interface Source {
  kind: "fixture" | "dataset";
  datasetPath: string;
  reposDir?: string;
  candidates: Instance[];
}

/** A user's dataset: "N instances of one repository", so the repository with the most instances. */
async function datasetSource(opts: SetupOptions, dataset: string, notes: string[]): Promise<Source> {
  const datasetPath = resolve(dataset);
  const all = await loadDataset(datasetPath);
  if (all.length === 0) throw new Error(`${datasetPath}: no instances`);
  const byRepo = new Map<string, Instance[]>();
  for (const i of all) byRepo.set(i.repo, [...(byRepo.get(i.repo) ?? []), i]);
  const [repo, rows] = [...byRepo].sort((a, b) => b[1].length - a[1].length)[0]!;
  const candidates = rows.slice(0, opts.maxInstances);
  if (byRepo.size > 1)
    notes.push(
      `dataset has ${byRepo.size} repositories; ` +
        `benchmarked ${repo} (${rows.length} instances, ${candidates.length} used)`,
    );
  return { kind: "dataset", datasetPath, reposDir: opts.reposDir, candidates };
}

/** The fixture dataset, generated once per size (the generator is deterministic: a kept copy is the same). */
async function fixtureSource(opts: SetupOptions): Promise<Source> {
  const n = Math.min(MAX_FIXTURE_INSTANCES, Math.max(1, opts.maxInstances));
  const mib = opts.historyMiB;
  // The name carries both sizes: copies made with another history size are other repositories, never reused.
  const dir = join(opts.work, `fixture-${n}-history-${mib}MiB`);
  let datasetPath = join(dir, "dataset.json");
  let reposDir = join(dir, "repos");
  if (!existsSync(datasetPath) || !existsSync(join(reposDir, "fixture", "calc"))) {
    const history = mib ? `, after a ${mib} MiB git history` : "";
    opts.log(`generating the fixture dataset (${n} instances of fixture/calc${history})`);
    const t = performance.now();
    const fx = await makeFixtureDataset(dir, { instances: n, historyBytes: mib * MiB });
    datasetPath = fx.datasetPath;
    reposDir = fx.reposDir;
    const h = fx.history;
    if (h) {
      const took = ((performance.now() - t) / 1000).toFixed(1);
      const pack = (h.packBytes / MiB).toFixed(1);
      const files = `${h.files} extra files in the checkout`;
      opts.log(`fixture generated in ${took} s: ${h.commits} history commits, pack ${pack} MiB, ${files}`);
    }
  }
  return { kind: "fixture", datasetPath, reposDir, candidates: (await loadDataset(datasetPath)).slice(0, n) };
}

/** Build every candidate's environment; those that fail are left out (with a note). */
async function buildAll(
  home: string,
  candidates: Instance[],
  opts: Pick<SetupOptions, "reposDir" | "specsFile" | "workers" | "log">,
  notes: string[],
): Promise<{ instances: Instance[]; count: number; buildMs: number }> {
  const t0 = performance.now();
  const builtKeys = new Set<string>();
  const results = await prepareInstances(candidates, {
    home,
    reposDir: opts.reposDir,
    specsFile: opts.specsFile,
    workers: opts.workers,
    onResult: (r) => {
      // Instances sharing an environment all report "built" for the one build.
      if (r.status === "built" && !builtKeys.has(r.key)) {
        builtKeys.add(r.key);
        opts.log(`built environment for ${r.instanceId} in ${(r.durationMs / 1000).toFixed(1)} s`);
      }
      if (r.status === "failed") opts.log(`environment for ${r.instanceId} failed: ${r.error?.split("\n")[0]}`);
    },
  });
  const count = builtKeys.size;
  const buildMs = count > 0 ? performance.now() - t0 : 0;
  const failed = results.filter((r) => r.status === "failed");
  if (failed.length) {
    const ids = failed.map((f) => f.instanceId).join(", ");
    notes.push(`${failed.length} environment(s) failed to build and were left out: ${ids}`);
  }
  const instances = builtInstances(candidates, results);
  if (instances.length === 0)
    throw new Error(`no environment could be built; first failure: ${failed[0]?.error ?? "unknown"}`);
  return { instances, count, buildMs };
}

/** The measured workspace's sizes, and the module its real first command imports. */
async function measureWorkspace(
  home: string,
  primary: Instance,
  key: LayerKey,
  importModule: string | undefined,
): Promise<Pick<BenchEnvironment, "testbedBytes" | "gitPackBytes" | "venvBytes" | "importModule">> {
  const lease = await nodeCacheFor(home).acquire(key, { form: "tree" });
  try {
    const testbed = lease.trees["testbed"]!;
    return {
      testbedBytes: (await diskUsage([testbed])).apparent,
      gitPackBytes: packBytes(testbed),
      venvBytes: (await diskUsage([lease.trees["venv"]!])).apparent,
      importModule: importModule || guessImportModule(primary.repo, testbed),
    };
  } finally {
    await lease.release();
  }
}

const MiB = 1024 * 1024;

/** Bytes of a checkout's git packs (0 when it has none, e.g. a worktree or a repository without packs). */
function packBytes(testbed: string): number {
  const dir = join(testbed, ".git", "objects", "pack");
  if (!existsSync(dir)) return 0;
  return readdirSync(dir)
    .filter((f) => f.endsWith(".pack"))
    .reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}

const KNOWN_MODULES: Record<string, string> = {
  "scikit-learn": "sklearn",
  "pytest-dev/pytest": "pytest",
  "pylint-dev/pylint": "pylint",
  Pillow: "PIL",
};

/** The package a real first command imports: the repository's top-level package. */
export function guessImportModule(repo: string, testbed: string): string {
  const name = repo.split("/")[1] ?? repo;
  const known = KNOWN_MODULES[repo] ?? KNOWN_MODULES[name];
  if (known) return known;
  const isPkg = (d: string): boolean => existsSync(join(d, "__init__.py"));
  for (const cand of [name, name.replace(/-/g, "_"), name.toLowerCase()]) {
    if (isPkg(join(testbed, cand)) || isPkg(join(testbed, "src", cand)) || existsSync(join(testbed, `${cand}.py`)))
      return cand;
  }
  for (const base of [testbed, join(testbed, "src")]) {
    let names: string[] = [];
    try {
      names = readdirSync(base).sort();
    } catch {
      continue;
    }
    const pkg = names.find(
      (n) =>
        /^[A-Za-z_]\w*$/.test(n) &&
        !/^(tests?|docs?|examples?|benchmarks?|scripts?|build)$/i.test(n) &&
        isPkg(join(base, n)),
    );
    if (pkg) return pkg;
  }
  return "sys";
}
