/**
 * Venvs with a spec's dependencies installed, before the repository's own install step: what SWE-bench keeps as its
 * "env" image. Instances of one repository version share them, so a dataset's N builds install the dependencies once
 * and then only `pip install -e .` each. A snapshot is a plain copy of the venv directory (it is restored into a
 * build's private venv, which the build then changes); the newest few are kept.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, renameSync, statSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { runOk } from "../util/run.js";
import { homeLayout } from "../util/home.js";
import { removeTree } from "./store/index.js";
import type { EnvSpec } from "./types.js";

/** Snapshots kept per home (least recently used go first). */
export const DEPS_SNAPSHOTS_KEPT = 8;

export interface DepsInputs {
  spec: EnvSpec;
  /** The interpreter the venv is made from (path and full version). */
  python: string;
  pythonVersion: string;
  /** Content of the requirements file the build installs, if any. */
  requirements?: string;
  /** pip's settings as passed to the build (index URLs decide what gets installed). */
  pipEnv: Record<string, string>;
}

/**
 * The key of what the dependency steps produce, or undefined when they cannot be shared: `pre_install` commands may
 * change the checkout or depend on it, so such specs always build from scratch.
 */
export function depsKey(i: DepsInputs): string | undefined {
  if (i.spec.pre_install.length > 0) return undefined;
  const packages = (i.spec.packages ?? "").trim();
  if (packages === "environment.yml") return undefined;
  const what = {
    python: i.python,
    version: i.pythonVersion,
    packages,
    requirements: packages === "requirements.txt" ? (i.requirements ?? "") : "",
    pip_packages: i.spec.pip_packages,
    env: Object.entries(i.spec.env).sort(),
    pip: Object.entries(i.pipEnv).sort(),
    // A venv made on a base image is that image's (its libraries, its compilers): never the host's, nor another's.
    ...(i.spec.base === undefined ? {} : { base: i.spec.base }),
  };
  return createHash("sha256").update(JSON.stringify(what)).digest("hex");
}

export class DepsCache {
  readonly dir: string;

  constructor(home: string) {
    this.dir = join(homeLayout(home).envs, "deps");
  }

  private path(key: string): string {
    return join(this.dir, key);
  }

  /** Copy the snapshot into `venv` (an empty directory); false when there is none. */
  async restore(key: string, venv: string): Promise<boolean> {
    const src = this.path(key);
    if (!existsSync(src)) return false;
    try {
      await runOk("cp", ["-a", "--reflink=auto", `${src}/.`, venv]);
    } catch {
      // Pruned by another process meanwhile: build from scratch into a clean directory.
      await removeTree(venv);
      mkdirSync(venv, { recursive: true });
      return false;
    }
    const now = new Date();
    try {
      utimesSync(src, now, now); // recency, for pruning
    } catch {
      /* pruned meanwhile: the copy is complete all the same */
    }
    return true;
  }

  /** Keep a copy of `venv` under `key` (first writer wins), then prune to the newest DEPS_SNAPSHOTS_KEPT. */
  async save(key: string, venv: string): Promise<void> {
    if (existsSync(this.path(key))) return;
    mkdirSync(this.dir, { recursive: true });
    const tmp = join(this.dir, `.tmp-${key.slice(0, 12)}-${randomBytes(4).toString("hex")}`);
    try {
      await runOk("cp", ["-a", "--reflink=auto", venv, tmp]);
      renameSync(tmp, this.path(key));
    } catch {
      // Another build saved the same key meanwhile (rename onto a non-empty dir fails), or the disk is full: a
      // snapshot is only an optimization.
    } finally {
      await removeTree(tmp);
    }
    await this.prune();
  }

  private async prune(): Promise<void> {
    const snapshots = readdirSync(this.dir)
      .filter((n) => /^[0-9a-f]{64}$/.test(n))
      .map((n) => ({ n, t: statSync(join(this.dir, n)).mtimeMs }))
      .sort((a, b) => b.t - a.t);
    for (const s of snapshots.slice(DEPS_SNAPSHOTS_KEPT)) await removeTree(join(this.dir, s.n));
  }
}
