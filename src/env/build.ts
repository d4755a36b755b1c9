import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Sandbox } from "../sandbox/sandbox.js";
import { homeLayout } from "../util/home.js";
import { runOk } from "../util/run.js";
import { shellQuote } from "../util/shell.js";
import { BuildError } from "../errors.js";
import { TESTBED_PATH, VENV_PATH, type EnvSpec, type LayerKey } from "./types.js";
import { findToolchain, type Toolchain } from "./toolchains.js";
import type { NodeCache } from "./cache/index.js";
import { imageRoot, type ImageRoot } from "./image-root.js";
import { pipSettings } from "./pip-config.js";
import { firstTime, withReachableIndexes } from "./pip-reach.js";
import { checkoutTestbed, repoSource } from "./repos.js";
import { isSweSmithMirror } from "../tasks/swesmith.js";
import { DepsCache, depsKey } from "./deps-cache.js";
import { openStore, ingestLayer, normalizeMtimes, type Store } from "./store/index.js";
import { BuildReuse } from "./build-reuse.js";
import { discard, sweep } from "./scratch.js";

export interface BuildOptions {
  home: string;
  spec: EnvSpec;
  key: LayerKey;
  reposDir?: string;
  /** Where the spec's base image's root filesystem is leased from (a spec with a base needs it). */
  cache?: NodeCache;
  /** Per step; a step over it fails the build. */
  stepTimeoutMs?: number;
  onStep?: (step: string) => void;
}

/** One step of a build and its wall time. */
export interface BuildStep {
  name: string;
  durationMs: number;
}

export interface BuildResult {
  key: LayerKey;
  durationMs: number;
  /** In order; they add up to `durationMs` (the last, `other`, is what no step accounts for). */
  steps: BuildStep[];
  logFile: string;
}

/** The build log of an environment. */
export function buildLogPath(home: string, key: LayerKey): string {
  return join(homeLayout(home).logs, "build", `${key}.log`);
}

/**
 * Shell commands that install the spec into the venv, run inside the build sandbox at /testbed: the dependencies
 * (shareable between instances, see deps-cache.ts), then the repository's own install step.
 */
export function installScript(spec: EnvSpec, requirementsFile?: string): { deps: string[]; install: string[] } {
  const deps: string[] = [];
  const pip = "python -m pip install";
  for (const c of spec.pre_install) deps.push(c);
  const packages = (spec.packages ?? "").trim();
  if (packages === "requirements.txt" && requirementsFile) deps.push(`${pip} -r ${requirementsFile}`);
  else if (packages && packages !== "environment.yml" && packages !== "requirements.txt")
    deps.push(`${pip} ${packages}`);
  if (spec.pip_packages.length) deps.push(`${pip} ${spec.pip_packages.map(shellQuote).join(" ")}`);
  return { deps, install: spec.install ? [spec.install] : [] };
}

/**
 * Build one environment: check out the testbed on the host (git runs no repository code), then create the venv
 * and install everything inside a sandbox with network (pip needs its index), normalize mtimes, compile bytecode
 * against the normalized sources, and ingest both trees into the store as one layer.
 */
export async function buildEnvironment(opts: BuildOptions): Promise<BuildResult> {
  const first = new Build(opts, { linkFiles: true });
  try {
    return await first.run();
  } catch (e) {
    if (!first.linkedFiles()) throw e;
  }
  // A step that writes a tracked file in place cannot write a linked one (the store's, read-only), where a fresh
  // build's checkout could: the build is made again as one, every file written by git.
  return new Build(opts, { linkFiles: false }).run();
}

type Requirements = Awaited<ReturnType<typeof requirementsFile>>;

/** One build in progress: its log, its scratch trees, the step it is at, and its sandbox while it has one. */
class Build {
  private readonly logFile: string;
  private readonly work: string;
  /** Where scratch trees go to be deleted in the background (`scratch.ts`). */
  private readonly trash: string;
  private readonly trees: { testbed: string; venv: string };
  private readonly started = performance.now();
  private readonly steps: BuildResult["steps"] = [];
  private current = "prepare";
  private sandbox: Sandbox | undefined;
  /** Gives the base image's root filesystem back (when the spec has a base). */
  private releaseBase: (() => Promise<void>) | undefined;
  private pipEnv: Record<string, string> = {};
  /** Indexes left out because they do not answer (said again at a failure: it may be its cause). */
  private note: string | undefined;
  private readonly store: Store;
  /** Year packs and bytecode from earlier builds of the repository. */
  private readonly reuse: BuildReuse;

  constructor(
    private readonly opts: BuildOptions,
    how: { linkFiles: boolean },
  ) {
    const { home, spec, key } = opts;
    this.logFile = buildLogPath(home, key);
    mkdirSync(join(homeLayout(home).logs, "build"), { recursive: true });
    const header = `# build ${key} ${new Date().toISOString()}\n# spec ${JSON.stringify(spec)}\n`;
    // The second attempt (no files linked) keeps the first one's log above its own.
    if (how.linkFiles) writeFileSync(this.logFile, header);
    else appendFileSync(this.logFile, `\n# built again, every file of the tree checked out by git\n${header}`);
    this.trash = join(homeLayout(home).envs, "trash");
    sweep(this.trash);
    this.work = join(homeLayout(home).envs, `build-${key.slice(0, 16)}-${randomBytes(4).toString("hex")}`);
    this.trees = { testbed: join(this.work, "testbed"), venv: join(this.work, "venv") };
    this.store = openStore(homeLayout(home).store);
    this.reuse = new BuildReuse(home, this.store, spec.repo, how.linkFiles);
  }

  /** Every step, the failure (its step and log's tail) thrown, the scratch trees discarded either way. */
  async run(): Promise<BuildResult> {
    try {
      const { toolchain, requirements } = await this.checkout();
      await this.openSandbox(toolchain, requirements);
      await this.install(toolchain, requirements);
      await this.compile();
      await this.ingest(toolchain);
      return this.done();
    } catch (e) {
      throw this.failed(e);
    } finally {
      await this.cleanup();
    }
  }

  /** Were files of the tree linked from the store (a failure may then be theirs)? */
  linkedFiles(): boolean {
    return this.reuse.sources.linked.size > 0;
  }

  private log(text: string): void {
    appendFileSync(this.logFile, text.endsWith("\n") ? text : `${text}\n`);
  }

  private async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    this.current = name;
    this.opts.onStep?.(name);
    this.log(`\n## ${name}`);
    const t = performance.now();
    const out = await fn();
    this.steps.push({ name, durationMs: performance.now() - t });
    return out;
  }

  /** A shell step inside the build sandbox; a non-zero exit fails the build. */
  private async sh(name: string, command: string): Promise<void> {
    await this.step(name, async () => {
      this.log(`$ ${command}`);
      const r = await this.sandbox!.exec(command, {
        timeoutMs: this.opts.stepTimeoutMs ?? 30 * 60_000,
        mergeOutput: true,
        outputLimitBytes: 4 * 1024 * 1024,
      });
      this.log(r.stdout);
      if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}${r.timedOut ? " (timed out)" : ""}`);
    });
  }

  /** The interpreter, the repository at the spec's commit, and its requirements file if the spec names one. */
  async checkout(): Promise<{ toolchain: Toolchain; requirements: Requirements }> {
    const { home, spec, reposDir } = this.opts;
    mkdirSync(this.trees.venv, { recursive: true });
    const toolchain = await this.step("toolchain", () => findToolchain(spec.python, { home }));
    this.log(`python ${toolchain.version} at ${toolchain.python}`);
    const source = await this.step("fetch", () => repoSource(spec.repo, { reposDir, home }));
    const history = spec.history ?? "chronological";
    // SWE-smith's bug is committed over the base at sandbox start: the base's objects must be deletable then.
    const looseObjects = isSweSmithMirror(spec.repo);
    const step = <T>(name: string, fn: () => Promise<T>): Promise<T> => this.step(name, fn);
    const { history: packs, sources } = this.reuse;
    const ranges = await checkoutTestbed(source, spec.commit, this.trees.testbed, {
      history,
      looseObjects,
      step,
      packs,
      sources,
    });
    this.reuse.checkedOut(ranges);
    this.log(`${this.reuse.sources.linked.size} file(s) of the tree linked from earlier layers`);
    const requirements = await this.step("requirements", () => requirementsFile(spec, source, this.work));
    return { toolchain, requirements };
  }

  /**
   * The build sandbox: network on, the trees bound writable, the user's pip configuration read-only; on the spec's
   * base image, that image's root (and its Env) instead of the host's /usr and /etc.
   */
  async openSandbox(toolchain: Toolchain, requirements: Requirements): Promise<void> {
    await this.step("sandbox", () => this.startSandbox(toolchain, requirements));
  }

  private async startSandbox(toolchain: Toolchain, requirements: Requirements): Promise<void> {
    const { home, spec, key } = this.opts;
    const base = spec.base === undefined ? undefined : await this.step("base image", () => this.baseRoot(spec.base!));
    this.releaseBase = base?.release;
    const configured = await pipSettings(toolchain.python);
    this.pipEnv = configured.env; // the snapshot key follows the user's configuration, not today's network
    const { settings: pip, note } = await withReachableIndexes(configured);
    if (note) {
      this.note = note;
      this.log(`# ${note}`);
      if (firstTime(note)) this.opts.onStep?.(note);
    }
    const readOnly = (source: string, target = source) => ({ source, target, readOnly: true });
    this.sandbox = await Sandbox.create({
      home,
      ...(base ? { rootfs: base.options.rootfs } : {}),
      network: true,
      binds: [
        { source: this.trees.testbed, target: TESTBED_PATH, readOnly: false },
        { source: this.trees.venv, target: VENV_PATH, readOnly: false },
        ...pip.mounts.map((p) => readOnly(p)),
        ...(requirements ? [readOnly(requirements.host, requirements.inside)] : []),
      ],
      toolchains: toolchain.mounts,
      cwd: TESTBED_PATH,
      env: { ...base?.options.env, ...pip.env, PIP_NO_INPUT: "1", PIP_PROGRESS_BAR: "off", ...spec.env },
      labels: { purpose: "build", key },
    });
    // The trees are written by the sandbox's root, an unprivileged host uid of its own in root mode: hand them over
    // for the build (before anything runs inside), take them back before anything on the host reads them (chown
    // also clears setuid and setgid bits). The history's packs stay the store's owner's: some are its objects.
    this.reuse.writer(this.rootOnHost(), this.trees.testbed);
    await chownTree([this.trees.testbed, this.trees.venv], this.rootOnHost(), join(this.trees.testbed, PACK_DIR));
  }

  private baseRoot(ref: string): Promise<ImageRoot> {
    if (!this.opts.cache) throw new Error(`the spec's base image ${ref} needs a node cache to be leased from`);
    return imageRoot(this.opts.cache, ref);
  }

  /** Whom the build sandbox's root is on the host. */
  private rootOnHost(): { uid: number; gid: number } {
    const { uid, gid } = this.sandbox!.hostIds;
    return { uid, gid };
  }

  /** The venv with its dependencies (restored from a snapshot when one fits), then the repository's own step. */
  async install(toolchain: Toolchain, requirements: Requirements): Promise<void> {
    const { home, spec } = this.opts;
    const script = installScript(spec, requirements?.inside);
    // Instances of one repository version share their dependencies: install them once, restore them after.
    const deps = new DepsCache(home);
    const depsId = depsKey({
      spec,
      python: toolchain.python,
      pythonVersion: toolchain.version,
      requirements: requirements?.text,
      pipEnv: this.pipEnv,
    });
    const venv = this.trees.venv;
    const restored =
      depsId !== undefined &&
      (await this.step("dependencies (snapshot)", async () => {
        if (!(await deps.restore(depsId, venv))) return false;
        // A snapshot keeps the owner it was saved with: make the venv the sandbox's root's to write again.
        await chownTree([venv], this.rootOnHost());
        return true;
      }));
    if (restored) {
      this.log(`restored the venv with dependencies from snapshot ${depsId}`);
    } else {
      await this.sh("venv", `${toolchain.python} -m venv ${VENV_PATH}`);
      await this.runAll(script.deps, 1);
      // Compiled against normalized mtimes before it is kept, so no build restoring it compiles it again.
      await this.step("normalize (dependencies)", () => normalizeMtimes(venv));
      await this.sh("compile (dependencies)", `${ACTIVATE} && ${compileVenv}; true`);
      if (depsId !== undefined) await this.step("dependencies (save snapshot)", () => deps.save(depsId, venv));
    }
    await this.runAll(script.install, script.deps.length + 1);
    const scope = { repo: spec.repo, python: toolchain.python, version: toolchain.version };
    await this.step("bytecode (reuse)", async () => {
      const n = await this.reuse.placeBytecode(this.trees.testbed, scope, this.rootOnHost());
      this.log(`${n} .pyc file(s) of identical sources taken from earlier layers`);
    });
  }

  private async runAll(commands: string[], first: number): Promise<void> {
    for (const [i, c] of commands.entries())
      await this.sh(`install ${first + i}: ${c.slice(0, 60)}`, `${ACTIVATE} && ${c}`);
  }

  /** Normalized mtimes first, then bytecode compiled against them (so every .pyc stays valid everywhere). */
  async compile(): Promise<void> {
    await this.step("normalize", async () => {
      await normalizeMtimes(this.trees.testbed);
      await normalizeMtimes(this.trees.venv);
    });
    // compileall keeps each .pyc whose header matches its source: a restored venv and reused bytecode stay as they are.
    const both = `python -m compileall -q -j 0 -x '/\\.git/' ${VENV_PATH} ${TESTBED_PATH} >/dev/null 2>&1`;
    await this.sh("compile", `${ACTIVATE} && ${both}; true`);
    await this.step("finalize", async () => {
      await this.sandbox!.close();
      this.sandbox = undefined;
      const self = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
      await chownTree([this.trees.testbed, this.trees.venv], self);
      await normalizeMtimes(this.trees.testbed);
      await normalizeMtimes(this.trees.venv);
      // The index's stat data must match the normalized files, or every `git status` rewrites the index.
      await runOk("git", ["-C", this.trees.testbed, "update-index", "--refresh", "-q"]).catch(() => "");
    });
  }

  /** Both trees into the store as one layer. */
  async ingest(toolchain: Toolchain): Promise<void> {
    const { spec, key } = this.opts;
    const r = await this.step("store", () =>
      ingestLayer(this.store, key, this.trees, {
        meta: {
          spec: spec as unknown as { [k: string]: string },
          python: toolchain.version,
          builtAt: new Date().toISOString(),
        },
        linked: this.reuse.linked(),
      }),
    );
    await this.reuse.remember(key, r.manifest, this.trees.testbed);
    const cache = this.opts.cache;
    if (cache) await this.step("layer image", () => cache.prepareImage(key));
  }

  /** The result; `other` is what no step accounts for (the log, resolving the commit), so the steps add up. */
  done(): BuildResult {
    const durationMs = performance.now() - this.started;
    const other = durationMs - this.steps.reduce((n, s) => n + s.durationMs, 0);
    this.steps.push({ name: "other", durationMs: Math.max(0, other) });
    for (const s of this.steps) this.log(`# ${s.name}: ${(s.durationMs / 1000).toFixed(2)} s`);
    this.log(`\n# done in ${(durationMs / 1000).toFixed(1)} s`);
    return { key: this.opts.key, durationMs, steps: this.steps, logFile: this.logFile };
  }

  /** The error to throw: the step that failed and the tail of the log. */
  failed(e: unknown): BuildError {
    if (this.note) this.log(`\n# ${this.note}`);
    this.log(`\n# FAILED at ${this.current}: ${(e as Error).message}`);
    const tail = readFileSync(this.logFile, "utf8").split("\n").slice(-25).join("\n");
    return new BuildError(this.current, this.logFile, tail);
  }

  async cleanup(): Promise<void> {
    await this.sandbox?.close();
    await this.releaseBase?.();
    discard(this.work, this.trash);
  }
}

const ACTIVATE = `. ${VENV_PATH}/bin/activate && cd ${TESTBED_PATH}`;
const compileVenv = `python -m compileall -q -j 0 ${VENV_PATH} >/dev/null 2>&1`;
const PACK_DIR = join(".git", "objects", "pack");

/**
 * chown -R without following symlinks (the trees' contents came from a sandbox), `except` that directory and every
 * file with more than one link (before the sandbox runs, those are the store's objects: `build-reuse.ts`).
 */
async function chownTree(dirs: string[], ids: { uid: number; gid: number }, except?: string): Promise<void> {
  if (!except) {
    await runOk("chown", ["-R", "-h", `${ids.uid}:${ids.gid}`, "--", ...dirs]);
    return;
  }
  const links = ["(", "-type", "f", "-links", "+1", ")"];
  const prune = [
    "(",
    "-path",
    except,
    "-prune",
    ")",
    "-o",
    ...links,
    "-o",
    "-exec",
    "chown",
    "-h",
    `${ids.uid}:${ids.gid}`,
  ];
  await runOk("find", [...dirs, ...prune, "{}", "+"]);
}

/** SWE-bench reads requirements.txt at the environment setup commit; we take it from the repository's history. */
async function requirementsFile(
  spec: EnvSpec,
  source: string,
  work: string,
): Promise<{ host: string; inside: string; text: string } | undefined> {
  if ((spec.packages ?? "").trim() !== "requirements.txt") return undefined;
  const extra = spec.extra ?? {};
  const paths = (extra["reqs_paths"] as string[] | undefined) ?? ["requirements.txt"];
  const commit = (extra["environment_setup_commit"] as string | undefined) ?? spec.commit;
  const lines: string[] = [];
  for (const p of paths) {
    const text = await runOk("git", ["-C", source, "show", `${commit}:${p}`]).catch(() => "");
    // Nested "-r other.txt" lines refer to files we do not carry; editable installs are the install step's job.
    lines.push(...text.split("\n").filter((l) => !/^\s*(-r|--requirement|-e)\b/.test(l)));
  }
  const host = join(work, "requirements.txt");
  const text = `${lines.join("\n")}\n`;
  writeFileSync(host, text);
  return { host, inside: "/run/minisandbox-build/requirements.txt", text };
}
