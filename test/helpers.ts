import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
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

/** Host processes whose command line mentions `needle` (e.g. a sandbox id or a home path). */
export function processesMatching(needle: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ");
      if (cmd.includes(needle)) out.push(`${name}: ${cmd}`);
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Mount points on the host under `dir`. */
export function mountsUnder(dir: string): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(dir));
}

/** Sandbox scratch directories left in a home. */
export function scratchDirs(home: string): string[] {
  try {
    return readdirSync(join(home, "sandboxes"));
  } catch {
    return [];
  }
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
