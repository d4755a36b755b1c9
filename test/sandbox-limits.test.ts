import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { cgroupSupport, cpuUsageNs, type SandboxCgroups } from "../src/sandbox/limits.js";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tempHome } from "./helpers.js";

const home = tempHome();
const cg = cgroupSupport();

test("a fork bomb hits the process limit; the host and other sandboxes keep working", async () => {
  await using bomb = await Sandbox.create({ home, limits: { pids: 64 } });
  await using other = await Sandbox.create({ home });
  const r = await bomb.exec("f() { f | f & }; f; sleep 1; echo survived", { timeoutMs: 5000, outputLimitBytes: 4096 });
  if (cg.pids) assert.equal(r.limit, "pids", r.stderr.slice(0, 500));
  assert.match(r.stderr, /Resource temporarily unavailable|retry: /);
  assert.equal((await other.exec(["echo", "fine"])).stdout, "fine\n");
  // The bomb's processes die with its command: the sandbox is usable again.
  const after = await bomb.exec(["echo", "usable"]);
  assert.equal(after.stdout, "usable\n");
});

test("a memory hog is stopped by the memory limit with a clear status", async () => {
  await using sb = await Sandbox.create({ home, limits: { memoryBytes: 128 * 1024 ** 2 } });
  const r = await sb.exec(["python3", "-c", "x = bytearray(600 * 1024 * 1024); print('allocated')"], {
    timeoutMs: 30_000,
  });
  assert.notEqual(r.exitCode, 0);
  assert.ok(!r.stdout.includes("allocated"));
  if (cg.memory) {
    assert.equal(r.exitCode, 137);
    assert.equal(r.limit, "memory");
  } else {
    assert.match(r.stderr, /MemoryError/);
  }
  assert.equal((await sb.exec(["echo", "ok"])).stdout, "ok\n");
});

test("a disk filler hits the writable-layer size", async () => {
  await using sb = await Sandbox.create({ home, limits: { diskBytes: 32 * 1024 ** 2 } });
  const r = await sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1; echo rc=$?");
  assert.match(r.stdout, /No space left on device/);
  const r2 = await sb.exec("rm /tmp/fill && echo freed > /tmp/x && cat /tmp/x");
  assert.equal(r2.stdout, "freed\n");
});

test("CPU time limit stops a spinning process", async () => {
  await using sb = await Sandbox.create({ home, limits: { cpuSeconds: 1 } });
  const r = await sb.exec(["python3", "-c", "while True: pass"], { timeoutMs: 20_000 });
  assert.equal(r.limit, "cpu");
  assert.equal(r.signal, "SIGXCPU");
});

test("a cpus quota holds the whole sandbox to it: two spinners at cpus 0.5 get half a CPU between them", {
  skip: cg.cpu && cg.cpuacct ? false : "no cgroup cpu controller for this user",
}, async () => {
  await using sb = await Sandbox.create({ home, limits: { cpus: 0.5 } });
  const { cgroups } = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { cgroups: SandboxCgroups };
  assert.equal(readFileSync(join(cgroups.cpu!, "cpu.cfs_quota_us"), "utf8").trim(), "50000");
  // Each spins until it has used 0.4 s of CPU: unthrottled on two cores, about 0.4 s of wall time for both.
  const spin = `python3 -c "while __import__('time').process_time() < 0.4: pass"`;
  const used0 = cpuUsageNs(cgroups)!;
  const t0 = performance.now();
  const r = await sb.exec(`${spin} & ${spin} & wait`, { timeoutMs: 60_000 });
  const wall = (performance.now() - t0) / 1000;
  const used = (cpuUsageNs(cgroups)! - used0) / 1e9;
  assert.equal(r.exitCode, 0, r.stderr);
  const said = `${used.toFixed(2)} CPU s in ${wall.toFixed(2)} s`;
  assert.ok(used >= 0.8, `they spun: ${said}`);
  // An upper bound a loaded host cannot break (load only adds wall time): half a CPU, plus one period's quota the
  // group may have had in hand at the start, plus the kernel's per-CPU slices.
  assert.ok(used <= 0.5 * wall + 0.1, `more than half a CPU: ${said}`);
});

test("a command that never ends is killed at its timeout with 124, its whole tree included", async () => {
  await using sb = await Sandbox.create({ home });
  const started = Date.now();
  const r = await sb.exec("sleep 1000 & (sleep 1000 &) ; sleep 1000", { timeoutMs: 500 });
  assert.equal(r.exitCode, 124);
  assert.equal(r.timedOut, true);
  assert.ok(Date.now() - started < 5000);
  const ps = await sb.exec(["ps", "-eo", "args", "--no-headers"]);
  assert.equal(ps.stdout.split("\n").filter((l) => l === "sleep 1000").length, 0, ps.stdout);
});

test("1 GB of output is capped: head and tail kept, marker in between, memory bounded", async () => {
  await using sb = await Sandbox.create({ home });
  const rssBefore = process.memoryUsage().rss;
  const r = await sb.exec("echo FIRST; head -c 1000000000 /dev/zero | tr '\\0' 'x'; echo; echo LAST", {
    outputLimitBytes: 1024 * 1024,
    timeoutMs: 120_000,
  });
  assert.equal(r.exitCode, 0);
  assert.equal(r.truncated, true);
  assert.ok(r.stdout.startsWith("FIRST\n"));
  assert.ok(r.stdout.endsWith("LAST\n"));
  assert.match(r.stdout, /bytes of output omitted/);
  assert.ok(r.stdout.length < 1.1 * 1024 * 1024);
  assert.ok(process.memoryUsage().rss - rssBefore < 200 * 1024 * 1024);
});

test("a command that leaves a background child holding stdout returns when the command exits", async () => {
  await using sb = await Sandbox.create({ home });
  const started = Date.now();
  const r = await sb.exec("echo before; sleep 100 & echo after");
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "before\nafter\n");
  assert.ok(Date.now() - started < 3000, "must not wait for the background child");
  assert.match(
    (await sb.exec(["pgrep", "-c", "-f", "-x", "sleep 100"])).stdout,
    /^1\n$/,
    "the background child lives on",
  );
});

test("binary output survives byte for byte", async () => {
  await using sb = await Sandbox.create({ home });
  const r = await sb.exec("printf '\\000\\001\\377\\376abc'");
  assert.deepEqual([...r.stdoutBytes], [0, 1, 255, 254, 97, 98, 99]);
});

test("merged output keeps the order of writes across stdout and stderr", async () => {
  await using sb = await Sandbox.create({ home });
  const r = await sb.exec("for i in $(seq 1 3000); do echo out$i; echo err$i >&2; done", { mergeOutput: true });
  const expected = Array.from({ length: 3000 }, (_, i) => `out${i + 1}\nerr${i + 1}\n`).join("");
  assert.equal(r.stdout, expected);
  assert.equal(r.stderr, "");
});

test("pid 1 and every command are in the sandbox's cgroups, the root of its cgroup namespace", async () => {
  if (!cg.memory && !cg.pids) return assert.fail("cgroups are required on this machine's CI (root, cgroup v1)");
  await using sb = await Sandbox.create({ home });
  const limited = (text: string): string[] => text.split("\n").filter((l) => /:(memory|pids):/.test(l));
  const pid1Groups = limited(readFileSync(`/proc/${sb.pid1}/cgroup`, "utf8"));
  assert.ok(pid1Groups.length > 0 && pid1Groups.every((l) => l.endsWith(`/${sb.id}`)), pid1Groups.join("\n"));
  // Inside, a command sees pid 1's groups as "/" (its own command group below them, if any): nothing above is named.
  const inside = limited((await sb.exec("cat /proc/self/cgroup")).stdout);
  assert.ok(inside.length > 0 && inside.every((l) => /:\/(c[0-9a-f]+)?$/.test(l)), inside.join("\n"));
  assert.equal(limited(readFileSync("/proc/self/cgroup", "utf8")).filter((l) => l.includes(sb.id)).length, 0);
});
