/**
 * A command's result is what the command did: it ran and its output is all there, or the call failed. Never exit 0
 * with no output for a command that printed something, whatever the load on the host or on the event loop.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { helperPath } from "../src/sandbox/host.js";
import type { SandboxCgroups } from "../src/sandbox/limits.js";
import { killQuietly } from "../src/sandbox/procfs.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { processesMatching, tempHome } from "./helpers.js";

const home = tempHome("msb-integrity-");

/** Holds the event loop for `ms` at a time, as a loaded host or a busy server does, until stopped. */
function busyLoop(ms: number, every: number): () => void {
  const t = setInterval(() => {
    const until = performance.now() + ms;
    while (performance.now() < until) {
      /* the loop is held */
    }
  }, every);
  return () => clearInterval(t);
}

/** Holds the event loop for `ms` now. */
function hold(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    /* the loop is held */
  }
}

test("a command that exits while the event loop is held in another's output callback keeps its output", async () => {
  await using a = await Sandbox.create({ home });
  await using b = await Sandbox.create({ home });
  const bad: string[] = [];
  for (let round = 0; round < 3; round++) {
    // `first` prints and exits while the loop is held; its output's callback holds the loop again while `late`
    // exits: `late` is reaped in the same turn as `first`, before its pipe was ever polled.
    const late = b.exec(`sleep 0.5; seq 1 3000; echo END${round}`, { timeoutMs: 60_000 });
    const first = a.exec("echo first", { onStdout: () => hold(1500), timeoutMs: 60_000 });
    hold(400);
    const [r] = await Promise.all([late, first]);
    if (r.exitCode !== 0 || !r.stdout.endsWith(`END${round}\n`))
      bad.push(`exit ${r.exitCode}, ${r.stdout.length} bytes`);
  }
  assert.deepEqual(bad, []);
});

test("output written before a command exits is all read, however late the event loop polls", async () => {
  await using a = await Sandbox.create({ home });
  await using b = await Sandbox.create({ home });
  const stop = busyLoop(300, 320);
  const bad: string[] = [];
  try {
    for (let round = 0; round < 6; round++) {
      const runs = [a, b].flatMap((sb, s) =>
        Array.from({ length: 4 }, async (_, i) => {
          const end = `END-${round}-${s}-${i}`;
          const r = await sb.exec(`seq 1 ${2000 + 700 * i}; echo ${end}`, { timeoutMs: 60_000 });
          if (r.exitCode !== 0 || !r.stdout.endsWith(`${end}\n`))
            bad.push(`${end}: exit ${r.exitCode}, ${r.stdout.length} bytes of output`);
        }),
      );
      await Promise.all(runs);
    }
  } finally {
    stop();
  }
  assert.deepEqual(bad, []);
});

/** A helper waiting for its command (as a sandbox's next command's is), given `message` on its pipe, then EOF. */
function waitingHelperGiven(message: Buffer | null): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(helperPath(), ["enter", "--args-fd", "3"], { stdio: ["ignore", "ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const pipe = child.stdio[3] as NodeJS.WritableStream;
  if (message) pipe.end(message);
  else pipe.end();
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stderr })));
}

test("a waiting helper exits 0 only when told it is not needed; no word or a cut message is an error", async () => {
  assert.equal((await waitingHelperGiven(Buffer.from("drop\0"))).code, 0);
  const none = await waitingHelperGiven(null);
  assert.notEqual(none.code, 0);
  assert.match(none.stderr, /no command came/);
  const args = Buffer.from("--pid\x001\x00--caps\x00\x00--\x00/bin/true\x00");
  const cut = await waitingHelperGiven(Buffer.concat([Buffer.from(`${args.length}\0`), args.subarray(0, 9)]));
  assert.notEqual(cut.code, 0);
  assert.match(cut.stderr, /cut short/);
  const unframed = await waitingHelperGiven(args);
  assert.notEqual(unframed.code, 0);
});

test("a command's helper killed before it ran is never a success", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.exec("true");
  await new Promise((r) => setTimeout(r, 300));
  // The next command's helper is waiting: kill this sandbox's waiting helpers (their cgroups name it), as a host out
  // of pids or memory would, at the moment the command is handed over.
  const results = await Promise.all(
    Array.from({ length: 6 }, async (_, i) => {
      const running = sb.exec(`echo ran${i}`);
      for (const p of processesMatching(sb.id).filter((c) => c.includes("enter --args-fd")))
        killQuietly(Number(p.split(":")[0]));
      return { i, r: await running.catch((e: Error) => e) };
    }),
  );
  for (const { i, r } of results) {
    if (r instanceof Error) continue;
    assert.ok(r.exitCode !== 0 || r.stdout === `ran${i}\n`, `exit ${r.exitCode} without its output`);
  }
});

test("a ~/.bashrc written inside runs in no later command (bash sources it when stdin is a socket)", async () => {
  await using sb = await Sandbox.create({ home });
  const planted = await sb.exec("echo 'echo PLANTED; exit 0' > ~/.bashrc && echo planted");
  assert.equal(planted.stdout, "planted\n");
  const r = await sb.exec("echo ran; exit 3");
  assert.deepEqual([r.exitCode, r.stdout], [3, "ran\n"]);
});

test("a helper failing before the exec is an error, not an exit status; after it, all is the command's", async () => {
  await using sb = await Sandbox.create({ home, limits: { pids: 24 } });
  // The descriptor the helper tells by is gone at the exec: the command holds 0-2 (3 is ls's own directory).
  assert.equal((await sb.exec(["/bin/ls", "/proc/self/fd"])).stdout, "0\n1\n2\n3\n");
  assert.equal((await sb.exec(["/nonexistent"])).exitCode, 127);
  // Its own fork bomb, once running, is the command's result.
  const bomb = await sb.exec("for i in $(seq 40); do sleep 30 & done; wait", { timeoutMs: 60_000 });
  assert.equal(bomb.limit, "pids");
  // A neighbour inside takes every process slot left: the next command's helper cannot fork it.
  await sb.exec("(while :; do sleep 1000 & done) >/dev/null 2>&1 &");
  // Until every slot is taken, as the host sees the sandbox's pids group (a fixed wait was too short under load).
  const state = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { cgroups: SandboxCgroups };
  const current = (): number => Number(readFileSync(join(state.cgroups.pids!, "pids.current"), "utf8"));
  for (const t0 = Date.now(); current() < 24; await new Promise((r) => setTimeout(r, 100)))
    assert.ok(Date.now() - t0 < 30_000, `the neighbour took ${current()} of 24 process slots`);
  const notStarted = (e: Error): boolean => e.name === "SandboxError" && /did not start: .*fork/.test(e.message);
  await assert.rejects(sb.exec("echo never"), notStarted);
  // A streamed command and a session's shell alike: an error, never a process whose exit passes for theirs.
  await assert.rejects(sb.stream(["/bin/echo", "never"]), notStarted);
  await assert.rejects(sb.sessions.create("never"), notStarted);
});
