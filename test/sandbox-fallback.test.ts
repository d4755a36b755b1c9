// The util-linux fallback (unshare + sh + nsenter + setpriv + env), used where the native helper could not be built,
// must keep every guarantee the helper gives. Each test file runs in its own process, so this setting stays here.
process.env.MINISANDBOX_HELPER = "off";

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { helperPath } from "../src/sandbox/host.js";
import { cgroupsLeft, mountsUnder, processesMatching, scratchDirs, tempDir, tempHome } from "./helpers.js";

const home = tempHome();

test("the fallback is in force when the helper is switched off", () => {
  assert.equal(helperPath(), undefined);
});

test("fallback: copy-on-write workspace, clean environment, cwd, exit codes, errors as env reports them", async () => {
  const dir = tempDir("msb-fb-");
  writeFileSync(join(dir, "f"), "host\n");
  await using sb = await Sandbox.create({ home, dir, env: { A: "1" } });
  const r = await sb.exec("pwd; cat f; echo changed > f; echo $A; env | sort | cut -d= -f1 | tr '\\n' ' '; exit 3");
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout.split("\n").slice(0, 3).join("\n"), "/testbed\nhost\n1");
  assert.ok(!/\bPWD=|OLDPWD|MSB_/.test(r.stdout), r.stdout);
  assert.equal(readFileSync(join(dir, "f"), "utf8"), "host\n");
  assert.equal((await sb.exec(["cat", "f"])).stdout, "changed\n");
  assert.match(
    (await sb.exec(["no-such-program"])).stderr,
    /^(\/usr\/bin\/)?env: .no-such-program.: No such file or directory\n$/,
  );
  assert.equal((await sb.exec(["true"], { cwd: "/no/dir" })).exitCode, 125);
  const merged = await sb.exec("for i in 1 2 3 4 5 6 7 8; do echo o$i; echo e$i >&2; done", { mergeOutput: true });
  assert.equal(merged.stdout, "o1\ne1\no2\ne2\no3\ne3\no4\ne4\no5\ne5\no6\ne6\no7\ne7\no8\ne8\n");
});

test("fallback: pid 1 is the keeper, capabilities reduced, uid switch, timeout kills the tree", async () => {
  await using sb = await Sandbox.create({ home, uid: 1000 });
  const ps = await sb.exec(["ps", "-eo", "pid,args", "--no-headers"]);
  assert.match(ps.stdout, /^\s*1 \/bin\/sh -c /);
  assert.equal((await sb.exec(["id", "-u"])).stdout, "1000\n");
  const root = await sb.exec(["sh", "-c", "grep CapBnd /proc/self/status"], { uid: 0, gid: 0 });
  assert.match(root.stdout, /CapBnd:\s+00000000a80425fb/);
  const t = await sb.exec("sleep 1000 & sleep 1000", { timeoutMs: 300 });
  assert.equal(t.exitCode, 124);
  assert.equal((await sb.exec(["pgrep", "-c", "-f", "-x", "sleep 1000"])).stdout, "0\n");
});

test("fallback: sessions work and close leaves nothing behind", async () => {
  const h = tempHome();
  const sb = await Sandbox.create({ home: h, limits: { pids: 64 } });
  try {
    const { session } = await sb.sessions.create();
    assert.equal((await session.run("cd /tmp && export X=5")).exitCode, 0);
    assert.equal((await session.run("echo $PWD $X")).output, "/tmp 5\n");
    await sb.exec("sleep 100 &");
  } finally {
    await sb.close();
  }
  assert.deepEqual(processesMatching(h), []);
  assert.deepEqual(mountsUnder(h), []);
  assert.deepEqual(scratchDirs(h), []);
  assert.deepEqual(cgroupsLeft([sb.id]), []);
});
