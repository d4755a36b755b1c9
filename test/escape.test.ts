/**
 * The escape suite (test/escape/attacks.ts), as root and as an unprivileged user.
 *
 * The unprivileged run needs a system user: `msb-escape` is created with useradd when missing and kept (creating it
 * is idempotent; removing it could pull it from under a concurrent run). Everything else this file creates is
 * removed: the user's home, a copy of the build when the user cannot reach this one, and the cgroups it delegates.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { idPool } from "../src/sandbox/host.js";
import { cgroupSupport, killCgroup } from "../src/sandbox/limits.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { registerEscapeSuite } from "./escape/attacks.js";
import { tempHome } from "./helpers.js";

const cg = cgroupSupport();
const pool = idPool();
registerEscapeSuite({
  mode: "root",
  home: tempHome("msb-escape-"),
  idPool: pool,
  idCount: pool.size,
  limitsEnforced: cg.memory && cg.pids,
});

const USER = "msb-escape";

/** Gives argv[1] CAP_NET_RAW as a file capability (a v2 security.capability: the kernel records it for the ns). */
const SET_FILE_CAP =
  "import os, struct, sys; " +
  'os.setxattr(sys.argv[1], "security.capability", struct.pack("<5I", 0x02000001, 1 << 13, 0, 0, 0))';

/** Files under argv[1] that carry a file capability (security.capability), as a JSON list. */
const LIST_FILE_CAPS = `
import json, os, sys
found = []
for d, dirs, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(d, f)
        if os.path.islink(p):
            continue
        try:
            if "security.capability" in os.listxattr(p, follow_symlinks=False):
                found.append(p)
        except OSError:
            pass
print(json.dumps(found))
`;
const REPO = join(import.meta.dirname, "..", "..");
/**
 * Test files whose attacks must fail as an unprivileged user too, on environments that user builds: a policy's
 * reward (never an infrastructure failure, the fix out of reach), principals' caps and maxima, operator secrets.
 */
const USER_FILES = ["reward-attacks", "pip-secrets", "server-attacks"];
/** What the unprivileged run needs from the build, relative to the repository. */
const NEEDED = [
  "dist/test/escape/unprivileged.js",
  "dist/test/fixtures/escape-owner.js",
  "dist/native/msb-helper",
  "test/fixtures/secret_probe.py",
];

function run(cmd: string, args: string[]): { status: number | null; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return { status: r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? String(r.error) : ""}`.trim() };
}

function asUser(args: string[]): { status: number | null; out: string } {
  return run("runuser", ["-u", USER, "--", ...args]);
}

/** The user's ids, creating the user when missing; a reason string when that is impossible here. */
function ensureUser(): { uid: number; gid: number } | string {
  if (process.getuid?.() !== 0) return "not running as root";
  if (run("id", ["-u", USER]).status !== 0) {
    const add = run("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", USER]);
    if (add.status !== 0 && run("id", ["-u", USER]).status !== 0) return `cannot create user ${USER}: ${add.out}`;
  }
  const uid = Number(run("id", ["-u", USER]).out);
  const gid = Number(run("id", ["-g", USER]).out);
  if (!(uid > 0) || !(gid > 0)) return `user ${USER} has no usable ids`;
  return { uid, gid };
}

/** True when the user can run the build where it is (the repository may sit under a directory it cannot walk). */
function reachable(root: string): boolean {
  const checks = NEEDED.map((p) => `test -r '${join(root, p)}'`).join(" && ");
  return (
    asUser([
      "/bin/sh",
      "-c",
      `${checks} && test -x '${join(root, "dist/native/msb-helper")}' && test -x '${process.execPath}'`,
    ]).status === 0
  );
}

interface Setup {
  uid: number;
  gid: number;
  root: string;
  home: string;
  copy?: string;
}

function cgroupDirs(uid: number): string[] {
  return ["memory", "pids"].map((c) => `/sys/fs/cgroup/${c}/minisandbox-${uid}`);
}

/** Runs `args` with node as the user, in a session of its own; resolves to its status and output. */
function runAsUser(
  s: Setup,
  args: string[],
  env: string[],
  timeoutMs: number,
): Promise<{ status: number | null; out: string }> {
  const base = [`HOME=${s.home}`, "PATH=/usr/local/bin:/usr/bin:/bin", `MINISANDBOX_HOME=${s.home}`];
  const child = spawn("runuser", ["-u", USER, "--", "env", "-i", ...base, ...env, process.execPath, ...args], {
    cwd: s.home,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  const timer = setTimeout(() => {
    out += `\n(killed after ${timeoutMs / 1000} s)`;
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      /* gone */
    }
  }, timeoutMs);
  return new Promise((resolve) => {
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, out });
    });
  });
}

/** Runs a phase of escape/unprivileged.js as the user. */
function runPhase(s: Setup, phase: string, delegated: boolean): Promise<{ status: number | null; out: string }> {
  const script = join(s.root, "dist/test/escape/unprivileged.js");
  return runAsUser(s, [script, phase], [`MSB_ESCAPE_DELEGATED=${delegated ? 1 : 0}`], 180_000);
}

/**
 * The user's package index: what this process's pip is configured with (its user-level files and PIP_* variables),
 * so that environments the user builds install from the same index as root's.
 */
function givePipConfig(s: Setup): string[] {
  for (const rel of [".config/pip/pip.conf", ".pip/pip.conf"]) {
    const from = join(homedir(), rel);
    if (!existsSync(from)) continue;
    const to = join(s.home, rel);
    mkdirSync(dirname(to), { recursive: true });
    cpSync(from, to);
  }
  assert.equal(run("chown", ["-R", `${s.uid}:${s.gid}`, s.home]).status, 0);
  return Object.entries(process.env)
    .filter(([k]) => k.startsWith("PIP_"))
    .map(([k, v]) => `${k}=${v}`);
}

/** The failing part of a TAP report (every `not ok` with its details), or all of it when none is marked. */
function failures(out: string): string {
  const lines = out.split("\n");
  const keep: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*not ok /.test(lines[i]!)) continue;
    const indent = lines[i]!.search(/\S/);
    keep.push(lines[i]!);
    for (i++; i < lines.length && (lines[i]!.search(/\S/) > indent || !lines[i]!.trim()); i++) keep.push(lines[i]!);
    i--;
  }
  return keep.length ? keep.join("\n") : out;
}

describe("escape attempts as an unprivileged user (user-namespace mode)", () => {
  let setup: Setup | string;
  const created: string[] = [];

  before(() => {
    const user = ensureUser();
    if (typeof user === "string") {
      setup = user;
      return;
    }
    if (asUser(["unshare", "-Ur", "true"]).status !== 0) {
      setup = `this kernel does not let ${USER} create user namespaces`;
      return;
    }
    const home = mkdtempSync(join(tmpdir(), "msb-escape-user-"));
    chownSync(home, user.uid, user.gid);
    let root = REPO;
    let copy: string | undefined;
    if (!reachable(REPO)) {
      // Copy what the run needs somewhere the user can read (the build and its runtime dependencies).
      copy = mkdtempSync(join(tmpdir(), "msb-escape-build-"));
      chmodSync(copy, 0o755);
      for (const part of ["package.json", "dist", "node_modules", "test/fixtures"])
        cpSync(join(REPO, part), join(copy, part), { recursive: true });
      root = copy;
      console.error(`# ${USER} cannot reach ${REPO}: running a copy of the build in ${copy}`);
    }
    setup = { ...user, root, home, copy };
    if (!reachable(root)) setup = `${USER} cannot read or run the build even in ${root}`;
  });

  after(async () => {
    if (typeof setup === "string" || !setup) return;
    for (const dir of created) await killCgroup(dir);
    rmSync(setup.home, { recursive: true, force: true });
    if (setup.copy) rmSync(setup.copy, { recursive: true, force: true });
  });

  const ready = (t: { skip: (why: string) => void }): Setup | undefined => {
    if (typeof setup !== "string") return setup;
    console.error(`# SKIPPED the unprivileged escape suite: ${setup}`);
    t.skip(setup);
    return undefined;
  };

  test("every attack fails as an unprivileged user too", async (t) => {
    const s = ready(t);
    if (!s) return;
    const delegated = cgroupDirs(s.uid).every((d) => existsSync(d));
    const r = await runPhase(s, "suite", delegated);
    assert.equal(r.status, 0, `the unprivileged suite failed:\n${failures(r.out)}`);
  });

  test("a local user reaches nothing of a fork's copy (nothing on disk); its files lose capabilities", async (t) => {
    const s = ready(t);
    if (!s) return;
    // The worst case: a home other users may walk.
    const home = mkdtempSync(join(tmpdir(), "msb-escape-snap-"));
    chmodSync(home, 0o755);
    try {
      await using parent = await Sandbox.create({ home });
      const plant = await parent.exec(
        "cp /bin/sh /tmp/rootsh && chmod 4755 /tmp/rootsh && " +
          `cp /bin/true /tmp/capped && python3 -c '${SET_FILE_CAP}' /tmp/capped && ls -l /tmp/rootsh && ` +
          `python3 -c 'import os; print("cap", len(os.getxattr("/tmp/capped", "security.capability")))'`,
      );
      assert.equal(plant.exitCode, 0, plant.stderr);
      assert.match(plant.stdout, /-rwsr-xr-x/, "the setuid copy is made inside");
      assert.match(plant.stdout, /^cap \d+$/m, "the file capability is set inside");
      const [child] = await parent.fork(1);
      try {
        // The attack: find the copied setuid shell anywhere a copy could be, and run it.
        const look = `find ${home} /run/minisandbox -name rootsh 2>/dev/null; echo found=$?`;
        const walk = asUser(["sh", "-c", look]);
        assert.doesNotMatch(walk.out, /rootsh/, walk.out);
        assert.ok(!existsSync(join(home, "snapshots")), "a fork writes nothing of the sandbox's to the host's disk");
        assert.deepEqual(JSON.parse(run("python3", ["-c", LIST_FILE_CAPS, home]).out), []);
        // The fork has its files; the capability was not copied (a setuid bit means nothing on its nosuid tmpfs).
        const r = await child!.exec(
          "ls -l /tmp/rootsh && /tmp/rootsh -c 'echo ran' && " +
            `python3 -c 'import os; print("caps", os.listxattr("/tmp/capped"))'`,
        );
        assert.equal(r.exitCode, 0, r.stderr);
        assert.match(r.stdout, /ran\ncaps \[\]\n/);
      } finally {
        await child!.close();
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  /** The user's per-uid cgroup groups, made for this test (handed to the user when `delegate`); undefined: skipped. */
  const makeUserGroups = (t: { skip: (why: string) => void }, s: Setup, delegate: boolean): string[] | undefined => {
    if (!cg.memory || !cg.pids) return void t.skip("cgroup v1 memory and pids controllers are not mounted");
    const dirs = cgroupDirs(s.uid);
    if (dirs.some((d) => existsSync(d))) return void t.skip(`${dirs.join(", ")} already exist: not ours to change`);
    for (const d of dirs) {
      mkdirSync(d);
      created.push(d);
      if (delegate) assert.equal(run("chown", ["-R", `${s.uid}:${s.gid}`, d]).status, 0);
    }
    return dirs;
  };

  test("a cgroup group not handed to the user: sandboxes start, limits reported not enforced", async (t) => {
    const s = ready(t);
    const dirs = s && makeUserGroups(t, s, false);
    if (!s || !dirs) return;
    try {
      const r = await runPhase(s, "reported", false);
      assert.equal(r.status, 0, `with a group root kept for itself:\n${failures(r.out)}`);
    } finally {
      for (const d of dirs) await killCgroup(d);
    }
  });

  test("with cgroups delegated to the user, a fork bomb and a memory hog are stopped", async (t) => {
    const s = ready(t);
    const dirs = s && makeUserGroups(t, s, true);
    if (!s || !dirs) return;
    try {
      const r = await runPhase(s, "limits", true);
      assert.equal(r.status, 0, `with delegated cgroups:\n${failures(r.out)}`);
      const left = dirs.flatMap((d) =>
        readdirSync(d, { withFileTypes: true })
          .filter((e) => e.isDirectory())
          .map((e) => join(d, e.name)),
      );
      assert.deepEqual(left, [], "sandbox cgroups left behind");
    } finally {
      for (const d of dirs) await killCgroup(d);
    }
  });

  test("reward, principal and secret attacks fail as an unprivileged user too (cgroups delegated)", async (t) => {
    const s = ready(t);
    const dirs = s && makeUserGroups(t, s, true);
    if (!s || !dirs) return;
    try {
      const files = USER_FILES.map((f) => join(s.root, `dist/test/${f}.test.js`));
      const r = await runAsUser(s, ["--test", "--test-concurrency=1", ...files], givePipConfig(s), 900_000);
      assert.equal(r.status, 0, `as ${USER}:\n${failures(r.out)}`);
      assert.match(r.out, /^# fail 0$/m, r.out.slice(-2000));
      assert.match(r.out, /^# pass [1-9]\d*$/m, r.out.slice(-2000));
      t.diagnostic(r.out.match(/^# (tests|pass|skipped) \d+$/gm)?.join(", ") ?? "");
    } finally {
      for (const d of dirs) await killCgroup(d);
    }
  });
});
