/**
 * A process that starts sandboxes repeatedly has the next one's start prepared ahead (id, cgroups, its launch and its
 * first command's helper already in them): the sandbox that takes it gets its own limits, works as any other, and
 * a prepared start nobody takes leaves nothing behind: not when it dies, not at the process's exit, not after
 * SIGKILL (the reaper's).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { preparedStart } from "../src/sandbox/ahead.js";
import { reapLeftovers } from "../src/sandbox/reaper.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { cgroupsLeft, processesMatching, tempHome } from "./helpers.js";

const home = tempHome();
const GROUP = "/sys/fs/cgroup/pids/minisandbox";

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The prepared start, once made (it is made in the background after a start). */
async function waitPrepared(): Promise<{ id: string; launcherPid: number }> {
  for (let i = 0; i < 200; i++) {
    const p = preparedStart();
    if (p) return p;
    await sleep(10);
  }
  throw new Error("no start was prepared");
}

async function gone(check: () => boolean, ms = 3000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(20)) if (check()) return true;
  return check();
}

function pidsIn(dir: string): number[] {
  return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
}

test("from the second sandbox on, the next start is prepared; the one that takes it has its own limits", async () => {
  const first = await Sandbox.create({ home });
  await first.close();
  assert.equal(preparedStart(), undefined, "a process's first sandbox prepares nothing");
  const second = await Sandbox.create({ home });
  await second.close();
  const prepared = await waitPrepared();
  // Waiting in the groups of a sandbox to come: the launch, and the first command's helper below them.
  assert.ok(pidsIn(join(GROUP, prepared.id)).includes(prepared.launcherPid));
  const limits = { memoryBytes: 300 * 1024 ** 2, pids: 77 };
  const sb = await Sandbox.create({ home, limits });
  try {
    assert.equal(sb.id, prepared.id);
    assert.equal(readFileSync(join(GROUP, sb.id, "pids.max"), "utf8").trim(), "77");
    const memory = `/sys/fs/cgroup/memory/minisandbox/${sb.id}/memory.limit_in_bytes`;
    if (existsSync(memory)) assert.equal(readFileSync(memory, "utf8").trim(), String(limits.memoryBytes));
    // pid 1 lives in them, and the limit holds for what the sandbox runs.
    assert.ok(pidsIn(join(GROUP, sb.id)).includes(sb.pid1));
    // dash, which does not retry a refused fork as bash does.
    const forks = "for i in $(seq 100); do sleep 5 >/dev/null 2>&1 & done 2>/dev/null";
    assert.equal((await sb.exec(["/bin/sh", "-c", forks], { timeoutMs: 20_000 })).limit, "pids");
    assert.equal((await sb.exec("echo ok")).stdout, "ok\n");
  } finally {
    await sb.close();
  }
  assert.deepEqual(cgroupsLeft([prepared.id]), []);
  // The next one is prepared already, for the sandbox after.
  assert.notEqual((await waitPrepared()).id, prepared.id);
});

test("a prepared start whose launch died is not used: the sandbox starts the usual way, the leftovers go", async () => {
  const prepared = await waitPrepared();
  process.kill(prepared.launcherPid, "SIGKILL");
  assert.ok(await gone(() => !pidsIn(join(GROUP, prepared.id)).includes(prepared.launcherPid)));
  const sb = await Sandbox.create({ home });
  try {
    assert.notEqual(sb.id, prepared.id);
    assert.equal((await sb.exec("echo ok")).stdout, "ok\n");
  } finally {
    await sb.close();
  }
  assert.ok(await gone(() => cgroupsLeft([prepared.id]).length === 0), cgroupsLeft([prepared.id]).join(", "));
});

test("a prepared start dropped (a server shutting down) leaves no process and no cgroup", async () => {
  const prepared = await waitPrepared();
  await Sandbox.dropPrepared();
  assert.equal(preparedStart(), undefined);
  assert.deepEqual(cgroupsLeft([prepared.id]), []);
  assert.deepEqual(processesMatching(prepared.id), []);
});

/** A node process that starts two sandboxes, says its prepared start's id, then waits for stdin to end or exits. */
const SANDBOX_DIR = join(import.meta.dirname, "..", "src", "sandbox");
const OWNER = `
const { Sandbox } = await import(${JSON.stringify(join(SANDBOX_DIR, "sandbox.js"))});
const { preparedStart } = await import(${JSON.stringify(join(SANDBOX_DIR, "ahead.js"))});
for (let i = 0; i < 2; i++) await (await Sandbox.create({ home: process.argv[1] })).close();
let p;
while (!(p = preparedStart())) await new Promise((r) => setTimeout(r, 10));
console.log(p.id);
if (process.argv[2] === "wait") process.stdin.resume();
`;

function owner(mode: "exit" | "wait"): { id: Promise<string>; exited: Promise<unknown>; kill: () => void } {
  const child = spawn(process.execPath, ["--input-type=module", "-e", OWNER, home, mode], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.setEncoding("utf8");
  const id = new Promise<string>((resolve) =>
    child.stdout.on("data", (s: string) => {
      out += s;
      if (out.includes("\n")) resolve(out.trim());
    }),
  );
  return { id, exited: new Promise((r) => child.on("exit", r)), kill: () => child.kill("SIGKILL") };
}

test("a process that exits with a start prepared leaves nothing of it", async () => {
  const p = owner("exit");
  const id = await p.id;
  await p.exited;
  assert.deepEqual(cgroupsLeft([id]), []);
  assert.deepEqual(processesMatching(id), []);
});

test("after SIGKILL of its process, a prepared start's helpers leave and the reaper removes its cgroups", async () => {
  const p = owner("wait");
  const id = await p.id;
  p.kill();
  await p.exited;
  // Its helpers hear their caller went away and end; the groups stay until a reaper sees them, past its grace.
  assert.ok(await gone(() => processesMatching(id).length === 0), processesMatching(id).join("\n"));
  const left = cgroupsLeft([id]);
  assert.ok(left.length > 0, "the groups of a SIGKILLed owner's prepared start wait for the reaper");
  const old = new Date(Date.now() - 120_000);
  for (const g of left) utimesSync(`/sys/fs/cgroup/${g.replace("/", "/minisandbox/")}`, old, old);
  await reapLeftovers(join(home, "sandboxes"));
  assert.deepEqual(cgroupsLeft([id]), []);
});
