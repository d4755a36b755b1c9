/**
 * The spawner starts the helper's processes for this node process: each gets exactly the descriptors asked for
 * (nothing of the spawner's or of another child's pipes), the environment given, its exit as node reports one.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { startHelper, type HelperProcess } from "../src/sandbox/spawner.js";
import { processesMatching, scratchDirs, tempHome } from "./helpers.js";

function output(child: HelperProcess): Promise<{ out: string; code: number | null; signal: string | null }> {
  let out = "";
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (s: string) => {
    out += s;
  });
  return new Promise((resolve) => child.on("close", (code, signal) => resolve({ out, code, signal })));
}

test("a child holds only the descriptors it was given, while other children's pipes are open", async () => {
  // Other children alive meanwhile, their pipes held: none of those may reach the next one.
  const others = await Promise.all(
    Array.from({ length: 4 }, () => startHelper(["/bin/sleep", "30"], {}, ["in", "out", "out", "in", "out"])),
  );
  const child = await startHelper(["/bin/ls", "/proc/self/fd"], {}, ["null", "out", "null"]);
  // 3 is ls's own directory.
  assert.deepEqual(await output(child), { out: "0\n1\n2\n3\n", code: 0, signal: null });
  for (const o of others) o.kill("SIGKILL");
  const ends = await Promise.all(others.map((o) => new Promise((r) => o.on("exit", (_c, s) => r(s)))));
  assert.deepEqual(ends, ["SIGKILL", "SIGKILL", "SIGKILL", "SIGKILL"]);
});

test("environment, stdin, exit status and signals are the child's own", async () => {
  const env = await startHelper(["/usr/bin/env"], { ONLY: "this" }, ["null", "out", "out"]);
  assert.deepEqual(await output(env), { out: "ONLY=this\n", code: 0, signal: null });
  const cat = await startHelper(["/bin/sh", "-c", "cat; exit 7"], {}, ["in", "out", "out"]);
  const done = output(cat);
  cat.stdin!.end("piped\n");
  assert.deepEqual(await done, { out: "piped\n", code: 7, signal: null });
  // Signals come back at their default disposition (the spawner ignores SIGPIPE; its children must not).
  const pipe = await startHelper(["/bin/sh", "-c", "grep SigIgn /proc/self/status"], {}, ["null", "out", "out"]);
  assert.match((await output(pipe)).out, /^SigIgn:\s+0+\n$/);
  const missing = await startHelper(["/nonexistent"], {}, ["null", "out", "out"]);
  assert.equal((await output(missing)).code, 127);
});

test("many children started at once each get their own pipes", async () => {
  // Each is read from its start (as a caller does): a child that ended before it was read would end unseen.
  const outs = await Promise.all(
    Array.from({ length: 32 }, (_, i) =>
      startHelper(["/bin/echo", `child ${i}`], {}, ["null", "out", "out"]).then(output),
    ),
  );
  assert.deepEqual(
    outs.map((o) => o.out),
    outs.map((_, i) => `child ${i}\n`),
  );
});

test("a spawner killed by someone ends its sandboxes, leaves nothing, and the next start gets a new one", async () => {
  const home = tempHome();
  const sb = await Sandbox.create({ home });
  const spawner = (): string[] => processesMatching(`spawner ${process.pid} `);
  assert.equal(spawner().length, 1);
  process.kill(Number(spawner()[0]!.split(":")[0]), "SIGKILL");
  // Its bwrap dies with it, and with bwrap pid 1 and everything inside (the kernel may take a moment under load).
  for (let i = 0; i < 200 && !sb.isClosed; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(sb.isClosed, true);
  await sb.close();
  for (let i = 0; i < 50 && processesMatching(home).length; i++) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(processesMatching(home), []);
  assert.deepEqual(scratchDirs(home), []);
  await using next = await Sandbox.create({ home });
  assert.equal((await next.exec("echo again")).stdout, "again\n");
  assert.equal(spawner().length, 1);
});
