import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { reapLeftovers } from "../src/sandbox/reaper.js";
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
