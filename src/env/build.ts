import { appendFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { sandboxRootOnHost } from "../sandbox/host.js";
import { Sandbox } from "../sandbox/sandbox.js";
import { homeLayout } from "../util/home.js";
import { runOk } from "../util/run.js";
import { MinisandboxError } from "../util/errors.js";
import { TESTBED_PATH, VENV_PATH, type EnvSpec, type LayerKey } from "./types.js";
import { findToolchain, type Toolchain } from "./toolchains.js";
import { pipSettings } from "./pip-config.js";
import { checkoutTestbed, repoSource } from "./repos.js";
import { DepsCache, depsKey } from "./deps-cache.js";
import { openStore, ingestLayer, normalizeMtimes } from "./store/index.js";

export interface BuildOptions {
  home: string;
  spec: EnvSpec;
  key: LayerKey;
  reposDir?: string;
  /** Per step; a step over it fails the build. */
  stepTimeoutMs?: number;
  onStep?: (step: string) => void;
}

export interface BuildResult {
  key: LayerKey;
  durationMs: number;
  steps: { name: string; durationMs: number }[];
  logFile: string;
}

export class BuildError extends MinisandboxError {
  constructor(
    readonly step: string,
    readonly logFile: string,
    readonly tail: string,
  ) {
    super("build_failed", `build failed at step "${step}" (log: ${logFile}):\n${tail}`);
  }
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
  if (spec.pip_packages.length) deps.push(`${pip} ${spec.pip_packages.map(quoteArg).join(" ")}`);
  return { deps, install: spec.install ? [spec.install] : [] };
}

function quoteArg(s: string): string {
  return /^[\w.,:=<>!~*+\-[\]/@]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Build one environment: check out the testbed on the host (git runs no repository code), then create the venv
 * and install everything inside a sandbox with network (pip needs its index), normalize mtimes, compile bytecode
 * against the normalized sources, and ingest both trees into the store as one layer.
 */
export async function buildEnvironment(opts: BuildOptions): Promise<BuildResult> {
  const { home, spec, key } = opts;
  const layout = homeLayout(home);
  const logFile = buildLogPath(home, key);
  mkdirSync(join(layout.logs, "build"), { recursive: true });
  writeFileSync(logFile, `# build ${key} ${new Date().toISOString()}\n# spec ${JSON.stringify(spec)}\n`);
  const log = (text: string): void => appendFileSync(logFile, text.endsWith("\n") ? text : `${text}\n`);
  const work = join(layout.envs, `build-${key.slice(0, 16)}-${randomBytes(4).toString("hex")}`);
  const trees = { testbed: join(work, "testbed"), venv: join(work, "venv") };
  const started = performance.now();
  const steps: BuildResult["steps"] = [];
  let current = "prepare";
  const step = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    current = name;
    opts.onStep?.(name);
    log(`\n## ${name}`);
    const t = performance.now();
    const out = await fn();
    steps.push({ name, durationMs: performance.now() - t });
    return out;
  };
  let sandbox: Sandbox | undefined;
  try {
    mkdirSync(trees.venv, { recursive: true });
    const toolchain: Toolchain = await step("toolchain", () => findToolchain(spec.python, { home }));
    log(`python ${toolchain.version} at ${toolchain.python}`);
    const source = await step("fetch", () => repoSource(spec.repo, { reposDir: opts.reposDir, home }));
    await step("checkout", () => checkoutTestbed(source, spec.commit, trees.testbed));
    const requirements = await step("requirements", () => requirementsFile(spec, source, work));
    const pip = await pipSettings(toolchain.python);
    // The trees are written by the sandbox's root, an unprivileged host uid in root mode: hand them over for the
    // build, take them back before anything on the host reads them (chown also clears setuid and setgid bits).
    const sandboxRoot = sandboxRootOnHost();
    await chownTree([trees.testbed, trees.venv], sandboxRoot);
    sandbox = await Sandbox.create({
      home,
      network: true,
      binds: [
        { source: trees.testbed, target: TESTBED_PATH, readOnly: false },
        { source: trees.venv, target: VENV_PATH, readOnly: false },
        ...pip.mounts.map((p) => ({ source: p, target: p, readOnly: true })),
        ...(requirements ? [{ source: requirements.host, target: requirements.inside, readOnly: true }] : []),
      ],
      toolchains: toolchain.mounts,
      cwd: TESTBED_PATH,
      env: { ...pip.env, PIP_NO_INPUT: "1", PIP_PROGRESS_BAR: "off", ...spec.env },
      labels: { purpose: "build", key },
    });
    const sh = async (name: string, command: string): Promise<void> => {
      await step(name, async () => {
        log(`$ ${command}`);
        const r = await sandbox!.exec(command, {
          timeoutMs: opts.stepTimeoutMs ?? 30 * 60_000,
          mergeOutput: true,
          outputLimitBytes: 4 * 1024 * 1024,
        });
        log(r.stdout);
        if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}${r.timedOut ? " (timed out)" : ""}`);
      });
    };
    const activate = `. ${VENV_PATH}/bin/activate && cd ${TESTBED_PATH}`;
    const script = installScript(spec, requirements?.inside);
    const run = async (commands: string[], first: number): Promise<void> => {
      for (const [i, c] of commands.entries())
        await sh(`install ${first + i}: ${c.slice(0, 60)}`, `${activate} && ${c}`);
    };
    // Instances of one repository version share their dependencies: install them once, restore them after.
    const deps = new DepsCache(home);
    const depsId = depsKey({
      spec,
      python: toolchain.python,
      pythonVersion: toolchain.version,
      requirements: requirements?.text,
      pipEnv: pip.env,
    });
    const restored =
      depsId !== undefined && (await step("dependencies (snapshot)", () => deps.restore(depsId, trees.venv)));
    if (restored) log(`restored the venv with dependencies from snapshot ${depsId}`);
    else {
      await sh("venv", `${toolchain.python} -m venv ${VENV_PATH}`);
      await run(script.deps, 1);
      if (depsId !== undefined) await step("dependencies (save snapshot)", () => deps.save(depsId, trees.venv));
    }
    await run(script.install, script.deps.length + 1);
    await step("normalize", async () => {
      // .pyc files record their source's mtime: normalize first, then compile, so caches stay valid everywhere.
      await normalizeMtimes(trees.testbed);
      await normalizeMtimes(trees.venv);
    });
    await sh(
      "compile",
      `${activate} && find ${VENV_PATH} -name '*.pyc' -delete && python -m compileall -q -j 0 ${VENV_PATH} >/dev/null 2>&1; python -m compileall -q -j 0 -x '/\\.git/' ${TESTBED_PATH} >/dev/null 2>&1; true`,
    );
    await sandbox.close();
    sandbox = undefined;
    await chownTree([trees.testbed, trees.venv], { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 });
    await step("finalize", async () => {
      await normalizeMtimes(trees.testbed);
      await normalizeMtimes(trees.venv);
      // The index's stat data must match the normalized files, or every `git status` rewrites the index.
      await runOk("git", ["-C", trees.testbed, "update-index", "--refresh", "-q"]).catch(() => "");
    });
    const store = openStore(homeLayout(home).store);
    await step("store", () =>
      ingestLayer(store, key, trees, {
        meta: {
          spec: spec as unknown as { [k: string]: string },
          python: toolchain.version,
          builtAt: new Date().toISOString(),
        },
      }),
    );
    log(`\n# done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return { key, durationMs: performance.now() - started, steps, logFile };
  } catch (e) {
    log(`\n# FAILED at ${current}: ${(e as Error).message}`);
    const tail = readFileSync(logFile, "utf8").split("\n").slice(-25).join("\n");
    throw new BuildError(current, logFile, tail);
  } finally {
    await sandbox?.close();
    rmSync(work, { recursive: true, force: true });
  }
}

/** chown -R without following symlinks (the trees' contents came from a sandbox). */
async function chownTree(dirs: string[], ids: { uid: number; gid: number }): Promise<void> {
  await runOk("chown", ["-R", "-h", `${ids.uid}:${ids.gid}`, "--", ...dirs]);
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
