/**
 * The extract-per-task baseline (the container-free paper's method): every task keeps a `tar.gz` of its venv and of
 * its repository; a task starts by extracting both with gzip into a private directory, then `unshare --mount`, bind
 * mounts of the host system (read-only), the toolchain and the extracted trees, and `chroot` into that root.
 */
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { systemEntries } from "../../src/sandbox/host.js";
import { TESTBED_PATH, VENV_PATH } from "../../src/env/types.js";
import { shellQuote as q } from "../../src/util/shell.js";
import { mustRun, timedRun, type TimedRun } from "./proc.js";

export interface Tarballs {
  venv: string;
  testbed: string;
  bytes: number;
}

/** venv.tar.gz + testbed.tar.gz of a layer's trees, made once per layer key and kept in the bench work dir. */
export async function ensureTarballs(
  work: string,
  key: string,
  trees: { testbed: string; venv: string },
): Promise<Tarballs> {
  const dir = join(work, "targz", key);
  mkdirSync(dir, { recursive: true });
  const out: Record<"venv" | "testbed", string> = {
    venv: join(dir, "venv.tar.gz"),
    testbed: join(dir, "testbed.tar.gz"),
  };
  for (const tree of ["venv", "testbed"] as const) {
    if (existsSync(out[tree])) continue;
    const tmp = `${out[tree]}.tmp`;
    // GNU tar + gzip (default level 6), as a per-task archive is usually made; mtimes are kept (whole seconds).
    await mustRun("tar", ["-C", trees[tree], "-czf", tmp, "."]);
    renameSync(tmp, out[tree]);
  }
  return { ...out, bytes: statSync(out.venv).size + statSync(out.testbed).size };
}

/** The per-task script: extract (both archives at once), then a private mount namespace and chroot. */
export function extractScript(opts: {
  tarballs: Tarballs;
  runDir: string;
  toolchainMounts: string[];
  env: Record<string, string>;
  command: string;
}): string {
  const R = `${opts.runDir}/root`;
  const mounts: string[] = [];
  for (const e of systemEntries()) {
    if (e.symlinkTo) mounts.push(`ln -s ${q(e.symlinkTo)} ${q(R + e.path)}`);
    else
      mounts.push(
        `mkdir -p ${q(R + e.path)}`,
        `mount --bind ${q(e.path)} ${q(R + e.path)}`,
        `mount -o remount,bind,ro ${q(R + e.path)}`,
      );
  }
  for (const t of opts.toolchainMounts)
    mounts.push(`mkdir -p ${q(R + t)}`, `mount --bind ${q(t)} ${q(R + t)}`, `mount -o remount,bind,ro ${q(R + t)}`);
  mounts.push(
    `mkdir -p ${[TESTBED_PATH, VENV_PATH, "/proc", "/dev", "/tmp", "/root"].map((d) => q(R + d)).join(" ")}`,
    `mount --bind ${q(`${opts.runDir}/testbed`)} ${q(R + TESTBED_PATH)}`,
    `mount --bind ${q(`${opts.runDir}/venv`)} ${q(R + VENV_PATH)}`,
    `mount -t proc proc ${q(`${R}/proc`)}`,
    `mount --rbind /dev ${q(`${R}/dev`)}`,
    `mount -t tmpfs tmpfs ${q(`${R}/tmp`)}`,
  );
  const env = Object.entries(opts.env)
    .map(([k, v]) => q(`${k}=${v}`))
    .join(" ");
  const inner = [
    ...mounts,
    `exec chroot ${q(R)} /usr/bin/env -i ${env} /bin/sh -c ${q(`cd ${TESTBED_PATH} && ${opts.command}`)}`,
  ].join("\n");
  return [
    "set -e",
    `mkdir -p ${q(`${opts.runDir}/testbed`)} ${q(`${opts.runDir}/venv`)}`,
    `tar -xzf ${q(opts.tarballs.venv)} -C ${q(`${opts.runDir}/venv`)} & a=$!`,
    `tar -xzf ${q(opts.tarballs.testbed)} -C ${q(`${opts.runDir}/testbed`)} & b=$!`,
    "wait $a; wait $b",
    `exec unshare --mount --propagation private /bin/sh -c ${q(`set -e\n${inner}`)}`,
  ].join("\n");
}

let runCounter = 0;

/**
 * One task start: returns the timing and, before deleting the private directory (untimed), the number of .pyc files
 * the command wrote there.
 */
export async function extractRun(opts: {
  work: string;
  tarballs: Tarballs;
  toolchainMounts: string[];
  env: Record<string, string>;
  command: string;
  countPycNewerThan?: number;
}): Promise<{ run: TimedRun; pycWritten: number | null }> {
  const runDir = join(opts.work, "extract-runs", `task-${process.pid}-${++runCounter}`);
  rmSync(runDir, { recursive: true, force: true });
  mkdirSync(join(opts.work, "extract-runs"), { recursive: true });
  try {
    const run = await timedRun("/bin/sh", ["-c", extractScript({ ...opts, runDir })], { timeoutMs: 600_000 });
    let pycWritten: number | null = null;
    if (opts.countPycNewerThan !== undefined) {
      const r = await timedRun("/bin/sh", [
        "-c",
        `find ${q(`${runDir}/testbed`)} ${q(`${runDir}/venv`)} -name '*.pyc' ` +
          `-newermt @${Math.floor(opts.countPycNewerThan)} | wc -l`,
      ]);
      pycWritten = Number(r.stdout.trim()) || 0;
    }
    return { run, pycWritten };
  } finally {
    rmSync(runDir, { recursive: true, force: true });
  }
}
