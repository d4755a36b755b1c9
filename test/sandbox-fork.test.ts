import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { startServer } from "../src/server/server.js";
import { cgroupsLeft, processesMatching, scratchDirs, smallWorkspace, tempDir, tempHome } from "./helpers.js";

const home = tempHome("msb-fork-");

const snapshots = (): string[] => (existsSync(join(home, "snapshots")) ? readdirSync(join(home, "snapshots")) : []);

test("children start from the parent's writable state: workspace changes, /, /tmp, home, /dev/shm", async () => {
  const dir = smallWorkspace();
  await using parent = await Sandbox.create({ home, dir });
  const setup = await parent.exec(
    "echo parent > /testbed/new.txt && rm /testbed/doomed.txt && echo 'X = 2' > /testbed/pkg/mod.py && " +
      "echo t > /tmp/t && echo h > ~/h && mkdir -p /data && echo r > /data/r && echo s > /dev/shm/s",
  );
  assert.equal(setup.exitCode, 0, setup.stderr);
  const [child] = await parent.fork();
  const r = await child!.exec(
    "cat /testbed/new.txt /testbed/kept.txt /testbed/pkg/mod.py /tmp/t ~/h /data/r /dev/shm/s; ls /testbed",
  );
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, "parent\nfrom host\nX = 2\nt\nh\nr\ns\nkept.txt\nnew.txt\npkg\n");
  assert.equal(child!.labels.forkedFrom, parent.id);
  await child!.close();
  assert.equal(readFileSync(join(dir, "doomed.txt"), "utf8"), "to be deleted\n", "the host directory never changes");
});

test("K children diverge independently; the parent keeps running and sees none of their writes", async () => {
  await using parent = await Sandbox.create({ home, dir: smallWorkspace() });
  const { session } = await parent.sessions.create();
  await session.run("export KEEP=1; echo base > /testbed/state");
  const children = await parent.fork(4);
  assert.equal(new Set(children.map((c) => c.id)).size, 4);
  await Promise.all(children.map((c, i) => c.exec(`echo child${i} >> /testbed/state; touch /tmp/only-${i}`)));
  for (const [i, c] of children.entries()) {
    const r = await c.exec("cat /testbed/state; ls /tmp");
    assert.equal(r.stdout, `base\nchild${i}\nonly-${i}\n`);
  }
  assert.equal((await parent.exec("cat /testbed/state; ls /tmp")).stdout, "base\n");
  // The parent's session survived the freeze and goes on where it was.
  assert.equal((await session.run("echo $KEEP")).output, "1\n");
  await Promise.all(children.map((c) => c.close()));
});

test("an idle parent is not frozen for a fork; a command it starts meanwhile waits for the copy", async () => {
  const dir = smallWorkspace();
  await using parent = await Sandbox.create({ home, dir });
  await using spare = await Sandbox.create({ home, dir });
  const fill = await parent.exec("for i in $(seq 2000); do echo 0 > /tmp/f$i; done");
  assert.equal(fill.exitCode, 0, fill.stderr);
  await new Promise((res) => setTimeout(res, 200)); // idle: nothing left running in it
  const forking = parent.fork(1, { into: [spare] });
  await new Promise((res) => setImmediate(res)); // the parent is held now
  // Started while the copy is under way: it writes only once the parent is let go, so the copy is all or nothing.
  const during = parent.exec("for i in $(seq 2000); do echo 1 > /tmp/f$i; done; echo wrote");
  const [child] = await forking;
  assert.equal((await child!.exec("cat /tmp/f* | sort -u")).stdout, "0\n", "the child's copy is of one moment");
  assert.equal((await during).stdout, "wrote\n");
  assert.equal((await parent.exec("cat /tmp/f* | sort -u")).stdout, "1\n");
});

test("a grandchild outlives its parent and grandparent: a fork's copy is its own, nothing kept on disk", async () => {
  const parent = await Sandbox.create({ home, dir: smallWorkspace() });
  await parent.exec("echo 1 > /testbed/gen");
  const [child] = await parent.fork();
  await child!.exec("echo 2 >> /testbed/gen");
  const [grandchild] = await child!.fork();
  await parent.close();
  await child!.close();
  assert.equal((await grandchild!.exec("cat /testbed/gen")).stdout, "1\n2\n");
  assert.deepEqual(snapshots(), [], "forks write nothing to the host's disk");
  await grandchild!.close();
});

test("fork into sandboxes started ahead: they take the parent's state; another workspace's is refused", async () => {
  const dir = smallWorkspace();
  await using parent = await Sandbox.create({ home, dir });
  await using ready = await Sandbox.create({ home, dir });
  await using other = await Sandbox.create({ home, dir: smallWorkspace() });
  await parent.exec("echo forked > /testbed/new.txt && echo t > /tmp/t");
  await assert.rejects(parent.fork(1, { into: [other] }), /was not started the way/);
  const [child] = await parent.fork(1, { into: [ready] });
  assert.equal(child, ready);
  assert.equal((await ready.exec("cat /testbed/new.txt /tmp/t")).stdout, "forked\nt\n");
  assert.equal(ready.labels.forkedFrom, parent.id);
});

test("bad input and closed sandboxes are clear errors; nothing leaks", async () => {
  const parent = await Sandbox.create({ home });
  await assert.rejects(parent.fork(0), /fork count must be an integer from 1 to 256/);
  await assert.rejects(parent.fork(1.5), /fork count/);
  const kids = await parent.fork(2);
  const ids = [parent.id, ...kids.map((k) => k.id)];
  await parent.close();
  await assert.rejects(parent.fork(), /closed/);
  await Promise.all(kids.map((k) => k.close()));
  assert.deepEqual(cgroupsLeft(ids), []);
  assert.deepEqual(
    ids.flatMap((id) => processesMatching(id)),
    [],
  );
  assert.deepEqual(
    scratchDirs(home).filter((d) => ids.includes(d)),
    [],
  );
});

test("sandboxes of a process killed with SIGKILL, forks included, are removed by the next start's reaper", async () => {
  const h = tempHome("msb-fork-kill-");
  const script = join(import.meta.dirname, "fixtures", "hold-fork.js");
  const child = spawn(process.execPath, [script, h], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (b: Buffer) => b.toString().includes("forked") && resolve());
    child.on("exit", (c) => reject(new Error(`holder exited early (${c})`)));
  });
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  // A server starting on the home reaps them before it listens (their scratch mount points included).
  const server = await startServer({ home: h, authToken: "reaper-test-token-0123456789" });
  try {
    assert.ok(server.reaped.sandboxes.length >= 3, JSON.stringify(server.reaped));
    assert.deepEqual(scratchDirs(h), []);
    assert.ok(!existsSync(join(h, "snapshots")), "nothing of the forks was on disk");
  } finally {
    await server.close();
  }
});

test("a fork's copy never touches the host's disk: a home on a 32 MiB filesystem forks 40 MiB of writes", {
  skip: process.getuid?.() === 0 ? false : "mounting a small filesystem for the home needs root",
}, async () => {
  const small = tempDir("msb-fork-small-");
  assert.equal(spawnSync("mount", ["-t", "tmpfs", "-o", "size=32m", "msb-fork-small", small]).status, 0);
  try {
    await using sb = await Sandbox.create({ home: small, limits: { diskBytes: 64 * 1024 ** 2 } });
    await sb.exec("head -c 41943040 /dev/urandom > /tmp/big");
    const used = (): number =>
      Number(spawnSync("df", ["-B1", "--output=used", small], { encoding: "utf8" }).stdout.split("\n")[1]);
    const before = used();
    const [child] = await sb.fork(1);
    assert.equal((await child!.exec("stat -c %s /tmp/big")).stdout.trim(), String(40 * 1024 ** 2));
    assert.ok(used() - before < 1024 ** 2, `the home's filesystem grew by ${used() - before} bytes`);
    await child!.close();
  } finally {
    spawnSync("umount", ["-l", small]);
  }
});
