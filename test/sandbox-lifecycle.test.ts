import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, utimesSync } from "node:fs";
import { basename, join } from "node:path";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { reapLeftovers } from "../src/sandbox/reaper.js";
import { RUNTIME_HOMES_DIR } from "../src/sandbox/state.js";
import { cgroupsLeft, mountsUnder, processesMatching, runtimeOf, scratchDirs, tempHome } from "./helpers.js";

test("200 create/close cycles leave no process, mount, cgroup or scratch directory", async () => {
  const home = tempHome();
  const ids: string[] = [];
  for (let i = 0; i < 200; i++) {
    const sb = await Sandbox.create({ home, limits: { pids: 50 } });
    ids.push(sb.id);
    if (i % 20 === 0) {
      const { session } = await sb.sessions.create();
      await session.run("sleep 100 &", { check: "ignore" });
    }
    await sb.exec("sleep 100 &");
    await sb.close();
  }
  assert.deepEqual(processesMatching(home), []);
  // pid 1 of each sandbox carries its id (the native helper's init; the fallback's keeper is checked through home).
  assert.deepEqual(
    processesMatching("sandbox-init").filter((p) => ids.some((id) => p.includes(id))),
    [],
  );
  assert.deepEqual(mountsUnder(home), []);
  assert.deepEqual(scratchDirs(home), []);
  // Root mode: the home's runtime directory (its scratch mount points' parent, in /run) goes with its last sandbox.
  assert.equal(existsSync(runtimeOf(home)), false);
  assert.deepEqual(cgroupsLeft(ids), []);
});

test("a sandbox timeout closes it on its own", async () => {
  const home = tempHome();
  const sb = await Sandbox.create({ home, timeoutMs: 3000 });
  const { session } = await sb.sessions.create();
  await session.run("sleep 1000 &", { check: "ignore" });
  const pid1 = sb.pid1;
  assert.equal(sb.isClosed, false);
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal(sb.isClosed, true);
  await sb.close();
  assert.throws(() => process.kill(pid1, 0));
  assert.deepEqual(scratchDirs(home), []);
  await assert.rejects(sb.exec(["true"]), /closed/);
});

test("SIGKILL of a process holding 16 live sandboxes leaves nothing after the next start", async () => {
  const home = tempHome();
  const script = join(import.meta.dirname, "fixtures", "hold-sandboxes.js");
  const child = spawn(process.execPath, [script, home, "16"], { stdio: ["ignore", "pipe", "inherit"] });
  const ids = await new Promise<string[]>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("\n")) resolve(JSON.parse(out) as string[]);
    });
    child.on("exit", (c) => reject(new Error(`holder exited early (${c})`)));
  });
  assert.equal(ids.length, 16);
  assert.ok(processesMatching(home).length >= 16);
  // The process's spawner (which started every helper of its sandboxes) dies with it.
  const spawner = `spawner ${child.pid} `;
  assert.equal(processesMatching(spawner).length, 1);
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  // The kernel ends every sandbox with its owner (die-with-parent + pid namespaces)...
  for (let i = 0; i < 50 && processesMatching(home).length; i++) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(processesMatching(home), []);
  assert.deepEqual(processesMatching(spawner), []);
  assert.deepEqual(mountsUnder(home), []);
  // ...and the next start removes the scratch directories and cgroups they left.
  assert.equal(scratchDirs(home).length, 16);
  const report = await reapLeftovers(join(home, "sandboxes"));
  assert.equal(report.sandboxes.length, 16);
  assert.deepEqual(scratchDirs(home), []);
  assert.deepEqual(cgroupsLeft(ids), []);
});

test("the reaper leaves live sandboxes of this process alone", async () => {
  const home = tempHome();
  await using sb = await Sandbox.create({ home });
  const report = await reapLeftovers(join(home, "sandboxes"));
  assert.deepEqual(report.sandboxes, []);
  assert.equal((await sb.exec(["echo", "alive"])).stdout, "alive\n");
});

/** A holder of `n` live sandboxes in `home`, killed with SIGKILL once they run; resolves when they are all gone. */
async function killedHolder(home: string, n: number): Promise<void> {
  const script = join(import.meta.dirname, "fixtures", "hold-sandboxes.js");
  const child = spawn(process.execPath, [script, home, String(n)], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (b: Buffer) => b.toString().includes("\n") && resolve());
    child.on("exit", (c) => reject(new Error(`holder exited early (${c})`)));
  });
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  for (let i = 0; i < 50 && processesMatching(home).length; i++) await new Promise((r) => setTimeout(r, 100));
}

/** Make `path` and what it holds look older than the reaper's grace. */
function backdate(...paths: string[]): void {
  const past = new Date(Date.now() - 120_000);
  for (const p of paths) utimesSync(p, past, past);
}

test("root mode: a home removed after its owner was killed leaves no runtime directory; a live home's stays", {
  skip: process.getuid?.() !== 0 && "root mode only (unprivileged scratch lives in the home)",
}, async () => {
  const removed = tempHome();
  const kept = tempHome();
  await killedHolder(removed, 2);
  await killedHolder(kept, 1);
  const gone = runtimeOf(removed);
  const record = join(RUNTIME_HOMES_DIR, basename(gone));
  assert.equal(readdirSync(gone).length, 2);
  assert.equal(readFileSync(record, "utf8"), join(removed, "sandboxes"));
  rmSync(removed, { recursive: true, force: true });
  for (const dir of [gone, runtimeOf(kept)]) backdate(dir, ...readdirSync(dir).map((id) => join(dir, id)));
  backdate(record, join(RUNTIME_HOMES_DIR, basename(runtimeOf(kept))));

  const report = await reapLeftovers(join(tempHome(), "sandboxes"));
  assert.equal(existsSync(gone), false);
  assert.equal(existsSync(record), false);
  assert.equal(report.sandboxes.length, 2);
  // A home that still exists is its own reaper's: another home's start leaves its leftovers alone.
  assert.equal(readdirSync(runtimeOf(kept)).length, 1);
  assert.equal((await reapLeftovers(join(kept, "sandboxes"))).sandboxes.length, 1);
  assert.equal(existsSync(runtimeOf(kept)), false);
});
