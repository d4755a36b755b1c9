import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { reapLeftovers, type ReapReport } from "../src/sandbox/reaper.js";
import { cgroupsLeft, processesMatching, scratchDirs, tempHome } from "./helpers.js";

const FIXTURES = join(import.meta.dirname, "fixtures");
const CONTROLLERS = ["memory", "pids", "freezer", "cpu", "cpuacct"];

/** A node process running a fixture; its stdout's JSON lines, as they come. */
function run(fixture: string, args: string[]): { child: ChildProcess; lines: object[]; done: Promise<void> } {
  const child = spawn(process.execPath, [join(FIXTURES, fixture), ...args], { stdio: ["ignore", "pipe", "inherit"] });
  const lines: object[] = [];
  let buf = "";
  child.stdout!.on("data", (b: Buffer) => {
    buf += b.toString();
    for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
      lines.push(JSON.parse(buf.slice(0, i)) as object);
      buf = buf.slice(i + 1);
    }
  });
  const done = new Promise<void>((resolve, reject) =>
    child.on("exit", (code, sig) => (code === 0 ? resolve() : reject(new Error(`${fixture}: ${code ?? sig}`)))),
  );
  return { child, lines, done };
}

/** A new process starting up in `home` and reaping, as every process's first sandbox (or a server's start) does. */
async function reapFromNewProcess(home: string): Promise<ReapReport> {
  const p = run("reap-once.js", [home]);
  await p.done;
  return p.lines[0] as ReapReport;
}

/** Sandbox ids of a cgroup path, a sandbox directory or a scratch mount point. */
const idOf = (path: string): string => path.slice(path.lastIndexOf("/") + 1);

test("no reaper of another process or home touches a live sandbox; each still reaps what is dead", async () => {
  const [homeA, homeB, fresh] = [tempHome(), tempHome(), tempHome()];
  // Two processes in one home and one in another, each keeping sandboxes busy (and looking older than any grace).
  const owners = [run("churn-sandboxes.js", [homeA, "2", "12000"]), run("churn-sandboxes.js", [homeA, "1", "12000"])];
  owners.push(run("churn-sandboxes.js", [homeB, "2", "12000"]));
  const finished = Promise.all(owners.map((o) => o.done));
  let over = false;
  void finished.finally(() => (over = true)).catch(() => undefined);
  const reaped: string[] = [];
  let reaps = 0;
  for (let i = 0; !over; i++) {
    const report = await reapFromNewProcess([fresh, homeA, homeB][i % 3]!);
    reaps++;
    reaped.push(...report.sandboxes, ...report.cgroups.map(idOf));
  }
  await finished;
  const started = owners.flatMap((o) => o.lines.flatMap((l) => ("live" in l ? [l.live as string] : [])));
  const results = owners.map((o) => o.lines.at(-1) as { failures: string[]; commands: number });
  assert.ok(reaps >= 5, `only ${reaps} reaps ran meanwhile`);
  assert.ok(started.length >= 9, `only ${started.length} sandboxes were started`);
  assert.deepEqual(
    results.flatMap((r) => r.failures),
    [],
  );
  assert.ok(results.every((r) => r.commands >= 8));
  // A group or directory of theirs a reaper removed was one its owner was removing too (closing), never a live one's
  // (other leftovers of the host may be reaped meanwhile).
  const closing = new Set(owners.flatMap((o) => o.lines.flatMap((l) => ("closing" in l ? [l.closing as string] : []))));
  assert.deepEqual(
    reaped.filter((id) => started.includes(id) && !closing.has(id)),
    [],
  );
  assert.deepEqual(cgroupsLeft(started), []);
  assert.deepEqual([...scratchDirs(homeA), ...scratchDirs(homeB)], []);
});

test("a killed owner's sandboxes are reaped: cgroups by any home's start, the rest by their own home's", async () => {
  const [home, other] = [tempHome(), tempHome()];
  const holder = run("hold-sandboxes.js", [home, "3"]);
  while (holder.lines.length === 0) await new Promise((r) => setTimeout(r, 50));
  const ids = holder.lines[0] as string[];
  holder.child.kill("SIGKILL");
  await holder.done.catch(() => undefined);
  for (let i = 0; i < 50 && processesMatching(home).length; i++) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(processesMatching(home), []);
  // Young groups may be a sandbox still starting: they are left. Past the grace, another home's start removes them.
  const mine = (r: ReapReport): string[] => r.cgroups.map(idOf).filter((id) => ids.includes(id));
  assert.deepEqual(mine(await reapFromNewProcess(other)), []);
  assert.equal(cgroupsLeft(ids).length, ids.length * CONTROLLERS.length);
  const old = new Date(Date.now() - 10 * 60_000);
  const groups = ids.flatMap((id) => CONTROLLERS.map((c) => `/sys/fs/cgroup/${c}/minisandbox/${id}`));
  for (const dir of groups) utimesSync(dir, old, old);
  const report = await reapFromNewProcess(other);
  // Removed by this start, or by another test's start meanwhile: either way not by their own home, not started yet.
  assert.ok(mine(report).length > 0 || cgroupsLeft(ids).length === 0, "past the grace, another home's start reaps");
  assert.deepEqual(report.sandboxes, []);
  assert.deepEqual(cgroupsLeft(ids), []);
  // Their state and scratch are their home's: its next start removes them.
  assert.equal(scratchDirs(home).length, ids.length);
  assert.deepEqual((await reapLeftovers(join(home, "sandboxes"))).sandboxes.sort(), [...ids].sort());
  assert.deepEqual(scratchDirs(home), []);
  assert.ok(ids.every((id) => !existsSync(join(home, "sandboxes", id))));
});
