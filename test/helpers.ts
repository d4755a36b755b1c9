import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { runtimeDirFor } from "../src/sandbox/state.js";
import { runOk } from "../src/util/run.js";
import { envFor } from "../src/env/environments.js";
import { prepareInstances } from "../src/env/prepare.js";
import type { FixtureDataset } from "../src/fixtures/generate.js";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after } from "node:test";

/** A fresh minisandbox home for one test file, removed when the file's tests end. */
export function tempHome(prefix = "msb-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  after(() => removeReadOnlyTree(dir));
  return dir;
}

/**
 * rm -rf for a tree with read-only directories (a store's, a node cache's): root unlinks in them anyway, another
 * user must first make them writable, as `removeTree` in the store does.
 */
export function removeReadOnlyTree(dir: string): void {
  try {
    rmSync(dir, { recursive: true, force: true });
    return;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EACCES") throw e;
  }
  execFileSync("find", [dir, "-type", "d", "-exec", "chmod", "u+w", "{}", "+"], { stdio: "ignore" });
  rmSync(dir, { recursive: true, force: true });
}

export function tempDir(prefix = "msb-dir-"): string {
  return tempHome(prefix);
}

/** Git for the repositories tests make: no user or system configuration, a fixed identity. */
const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_AUTHOR_NAME: "t",
  GIT_AUTHOR_EMAIL: "t@t",
  GIT_COMMITTER_NAME: "t",
  GIT_COMMITTER_EMAIL: "t@t",
};

/** `git -C dir ...args` under the tests' own configuration; its output, trimmed. */
export function git(dir: string, ...args: string[]): string {
  return execFileSync("git", ["-C", dir, ...args], { env: GIT_ENV, encoding: "utf8" }).trim();
}

/** A commit in `dir` of `files` (path to text), authored and committed at `date`; its id. */
export function commitFilesAt(
  dir: string,
  files: Record<string, string>,
  date: string,
  message = `at ${date}`,
): string {
  for (const [f, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    writeFileSync(join(dir, f), text);
  }
  git(dir, "add", "-A");
  execFileSync("git", ["-C", dir, "commit", "-qm", message], {
    env: { ...GIT_ENV, GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date },
  });
  return git(dir, "rev-parse", "HEAD");
}

/** A small directory workspace for fork and restore tests: a file to keep, one to delete, a Python package. */
export function smallWorkspace(): string {
  const dir = tempDir();
  writeFileSync(join(dir, "kept.txt"), "from host\n");
  writeFileSync(join(dir, "doomed.txt"), "to be deleted\n");
  mkdirSync(join(dir, "pkg"));
  writeFileSync(join(dir, "pkg", "mod.py"), "X = 1\n");
  return dir;
}

/** Root-mode sandboxes of a home keep their scratch mount points in a runtime directory of their own. */
export function runtimeOf(home: string): string {
  return runtimeDirFor(join(home, "sandboxes"));
}

/** Host processes whose command line mentions `needle` (a sandbox id, or a home: its runtime directory counts). */
export function processesMatching(needle: string): string[] {
  const needles = [needle, runtimeOf(needle)];
  const out: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ");
      if (needles.some((n) => cmd.includes(n))) out.push(`${name}: ${cmd}`);
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Mount points on the host under `dir` (a home: its runtime directory too). */
export function mountsUnder(dir: string): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(dir) || m.startsWith(runtimeOf(dir)));
}

/** Sandbox directories left in a home (state and control files; scratch mount points in its runtime directory). */
export function scratchDirs(home: string): string[] {
  const list = (dir: string): string[] => {
    try {
      return readdirSync(dir);
    } catch {
      return [];
    }
  };
  return [...new Set([...list(join(home, "sandboxes")), ...list(runtimeOf(home))])];
}

/** cgroups created for sandboxes with these ids that still exist. */
export function cgroupsLeft(ids: string[]): string[] {
  const left: string[] = [];
  for (const ctl of ["memory", "pids", "freezer", "cpu", "cpuacct"]) {
    let names: string[] = [];
    try {
      names = readdirSync(`/sys/fs/cgroup/${ctl}/minisandbox`);
    } catch {
      continue;
    }
    for (const id of ids) if (names.includes(id)) left.push(`${ctl}/${id}`);
  }
  return left;
}

export const CLI = join(import.meta.dirname, "..", "src", "cli", "index.js");

/**
 * A directory built once per machine and shared by test files (keyed by `key`; a mkdir lock lets one builder at a
 * time work across concurrently running files). `build` fills the directory; a failed build leaves nothing.
 */
export async function cachedDir(
  name: string,
  key: unknown,
  build: (dir: string) => Promise<void>,
  timeoutMs = 300_000,
): Promise<string> {
  const hash = createHash("sha256").update(JSON.stringify(key)).digest("hex");
  const dir = join(tmpdir(), `msb-${name}-${hash.slice(0, 16)}`);
  const ready = join(dir, ".msb-ready");
  const lock = `${dir}.lock`;
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(ready)) {
    try {
      mkdirSync(lock);
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > timeoutMs) rmSync(lock, { recursive: true, force: true });
      } catch {
        /* lock vanished meanwhile */
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock}`);
      await sleep(250);
      continue;
    }
    try {
      if (!existsSync(ready)) {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true });
        try {
          await build(dir);
        } catch (e) {
          rmSync(dir, { recursive: true, force: true });
          throw e;
        }
        writeFileSync(ready, new Date().toISOString());
      }
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  return dir;
}

/**
 * A venv with `packages` (from the local package index), built once per machine and shared by test files (keyed by
 * python version, packages and `recipe`); `setup` runs after the install (more pip steps, checkouts...).
 */
export async function cachedVenv(
  name: string,
  packages: readonly string[],
  o: { recipe?: string; setup?: (venv: string) => Promise<void>; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<string> {
  const pyVersion = (await runOk("python3", ["-c", "import sys; print(sys.version)"])).trim();
  const timeoutMs = o.timeoutMs ?? 300_000;
  const key = { pyVersion, VENV_PACKAGES: packages, recipe: 1, more: o.recipe ?? null };
  return cachedDir(
    `${name}-venv`,
    key,
    async (dir) => {
      await runOk("python3", ["-m", "venv", dir]);
      // --retries 0: an unreachable default index fails at once and pip uses the local one.
      if (packages.length)
        await runOk(join(dir, "bin", "python"), ["-m", "pip", "install", "--quiet", "--retries", "0", ...packages], {
          timeoutMs: timeoutMs - 20_000,
          ...(o.env ? { env: { ...process.env, ...o.env } } : {}),
        });
      await o.setup?.(dir);
    },
    timeoutMs,
  );
}

/**
 * The fixture's environments, built once per machine into a home whose store later runs reuse (keyed by the
 * environments' keys, which hash everything a build depends on). Returns that store's directory.
 */
export async function cachedFixtureStore(f: FixtureDataset): Promise<string> {
  const keys = f.instances.map((i) => envFor(i, {}).key).sort();
  const dir = await cachedDir(
    "fixture-envs",
    keys,
    async (d) => {
      const built = await prepareInstances(f.instances, { home: join(d, "home"), reposDir: f.reposDir, workers: 2 });
      const failed = built.filter((r) => r.status === "failed");
      if (failed.length) throw new Error(`fixture environments did not build: ${JSON.stringify(failed)}`);
    },
    900_000,
  );
  return join(dir, "home", "store");
}
