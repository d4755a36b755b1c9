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
import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";

/** A fresh minisandbox home for one test file, removed when the file's tests end. */
export function tempHome(prefix = "msb-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function tempDir(prefix = "msb-dir-"): string {
  return tempHome(prefix);
}

/** Root-mode sandboxes of a home keep their scratch mount points in a runtime directory of their own. */
function runtimeOf(home: string): string {
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
  for (const ctl of ["memory", "pids"]) {
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
 * A venv with `packages`, built once per machine and shared by test files (keyed by python version and packages;
 * a mkdir lock lets one builder at a time work across concurrently running files).
 */
export async function cachedVenv(
  name: string,
  packages: readonly string[],
  opts: { env?: NodeJS.ProcessEnv } = {},
): Promise<string> {
  const pyVersion = (await runOk("python3", ["-c", "import sys; print(sys.version)"])).trim();
  const key = createHash("sha256")
    .update(JSON.stringify({ pyVersion, VENV_PACKAGES: packages, recipe: 1 }))
    .digest("hex");
  const dir = join(tmpdir(), `msb-${name}-venv-${key.slice(0, 16)}`);
  const ready = join(dir, ".msb-ready");
  const lock = `${dir}.lock`;
  const deadline = Date.now() + 300_000;
  while (!existsSync(ready)) {
    try {
      mkdirSync(lock);
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > 300_000) rmSync(lock, { recursive: true, force: true });
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
        await runOk("python3", ["-m", "venv", dir]);
        // --retries 0: an unreachable default index fails at once and pip uses the local one.
        await runOk(join(dir, "bin", "python"), ["-m", "pip", "install", "--quiet", "--retries", "0", ...packages], {
          timeoutMs: 280_000,
          ...(opts.env ? { env: { ...process.env, ...opts.env } } : {}),
        });
        writeFileSync(ready, new Date().toISOString());
      }
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  return dir;
}

/**
 * The fixture's environments, built once per machine into a store that later runs reuse (keyed by the
 * environments' keys, which hash everything a build depends on; a mkdir lock serializes builders).
 */
export async function cachedFixtureStore(f: FixtureDataset): Promise<string> {
  const keys = f.instances.map((i) => envFor(i, {}).key).sort();
  const id = createHash("sha256").update(JSON.stringify(keys)).digest("hex").slice(0, 16);
  const dir = join(tmpdir(), `msb-fleet-envs-${id}`);
  const ready = join(dir, ".msb-ready");
  const lock = `${dir}.lock`;
  const deadline = Date.now() + 900_000;
  while (!existsSync(ready)) {
    try {
      mkdirSync(lock);
    } catch {
      const held = statSync(lock, { throwIfNoEntry: false });
      if (held && Date.now() - held.mtimeMs > 900_000) rmSync(lock, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock}`);
      await sleep(500);
      continue;
    }
    try {
      rmSync(dir, { recursive: true, force: true });
      const built = await prepareInstances(f.instances, { home: join(dir, "home"), reposDir: f.reposDir, workers: 2 });
      const failed = built.filter((r) => r.status === "failed");
      assert.deepEqual(failed, [], "fixture environments build");
      writeFileSync(ready, new Date().toISOString());
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  return join(dir, "home", "store");
}
