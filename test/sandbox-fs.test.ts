import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { tempDir, tempHome } from "./helpers.js";

const home = tempHome();

function workspace(): string {
  const dir = tempDir("msb-ws-");
  writeFileSync(join(dir, "a.txt"), "original\n");
  mkdirSync(join(dir, "sub"));
  writeFileSync(join(dir, "sub", "b.txt"), "bee\n");
  return dir;
}

test("host paths outside the mount plan are invisible", async () => {
  await using sb = await Sandbox.create({ home, dir: workspace() });
  // /root inside is a private empty home, not the host's (which has .pyenv, .npm...).
  const r = await sb.exec(`ls -A /root; ls /home 2>&1; ls /work 2>&1; ls ${JSON.stringify(home)} 2>&1; echo done`);
  assert.match(r.stdout, /No such file or directory[\s\S]*No such file or directory[\s\S]*No such file or directory/);
  assert.ok(!r.stdout.includes(".pyenv"), r.stdout);
  assert.match(r.stdout, /done\n$/);
  // The top level holds only what the plan names.
  const top = (await sb.exec(["ls", "/"])).stdout.split("\n").filter(Boolean).sort();
  for (const name of top)
    assert.ok(
      [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "root",
        "run",
        "sbin",
        "testbed",
        "tmp",
        "usr",
      ].includes(name),
      `unexpected /${name}`,
    );
});

test("another sandbox's scratch, and the store and cache, cannot be reached", async () => {
  await using a = await Sandbox.create({ home, dir: workspace() });
  await using b = await Sandbox.create({ home, dir: workspace() });
  await a.exec("echo secret > /tmp/secret-a; echo s > /testbed/written-by-a");
  const r = await b.exec(
    "cat /tmp/secret-a; ls /testbed; find / -xdev -name 'secret-a' 2>/dev/null; ls /run/minisandbox",
  );
  assert.ok(!r.stdout.includes("secret"), r.stdout);
  assert.ok(!r.stdout.includes("written-by-a"), r.stdout);
  // The store and node cache live in the home, which no sandbox sees.
  mkdirSync(join(home, "store"), { recursive: true });
  const s = await b.exec(`ls ${home}/store ${home}/cache ${home}/sandboxes/${a.id}`);
  assert.notEqual(s.exitCode, 0);
});

test("system directories are read-only, /tmp and home are private and writable", async () => {
  await using sb = await Sandbox.create({ home, dir: workspace() });
  for (const path of ["/usr/x", "/etc/x", "/bin/x", "/lib/x"]) {
    const r = await sb.exec(`echo x > ${path}`);
    assert.notEqual(r.exitCode, 0, `${path} must not be writable`);
    assert.match(r.stderr, /Read-only file system|Permission denied/);
  }
  assert.ok(!existsSync("/usr/x") && !existsSync("/etc/x"));
  const w = await sb.exec(
    "echo ok > /tmp/t && cat /tmp/t && mkdir -p /root/tools && " +
      "echo '{}' > /root/state.json && cat /root/state.json && echo $HOME",
  );
  assert.equal(w.exitCode, 0, w.stderr);
  assert.equal(w.stdout, "ok\n{}\n/root\n");
  assert.ok(!existsSync("/tmp/t") || readFileSync("/tmp/t", "utf8") !== "ok\n");
});

test("the workspace is copy-on-write: the host directory never changes", async () => {
  const dir = workspace();
  await using sb = await Sandbox.create({ home, dir });
  const r = await sb.exec(
    "cat a.txt && echo changed > a.txt && echo more >> sub/b.txt && rm sub/b.txt && " +
      "echo new > new.txt && chmod 000 a.txt && mkdir d && ls",
  );
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, "original\na.txt\nd\nnew.txt\nsub\n");
  assert.equal((await sb.exec("cat a.txt")).stdout, "changed\n");
  assert.equal(readFileSync(join(dir, "a.txt"), "utf8"), "original\n");
  assert.equal(readFileSync(join(dir, "sub", "b.txt"), "utf8"), "bee\n");
  assert.deepEqual(readdirSync(dir).sort(), ["a.txt", "sub"]);
});

test("the copy fallback gives the same workspace semantics", async () => {
  const dir = workspace();
  await using sb = await Sandbox.create({ home, dir, forceCopy: true });
  assert.ok(
    sb.notices.some((n) => /copying/.test(n)),
    sb.notices.join("\n"),
  );
  const r = await sb.exec("cat a.txt && echo changed > a.txt && cat a.txt");
  assert.equal(r.stdout, "original\nchanged\n");
  assert.equal(readFileSync(join(dir, "a.txt"), "utf8"), "original\n");
});

test("layered lower directories stack, topmost first", async () => {
  const lower = workspace();
  const upper = tempDir("msb-upper-");
  writeFileSync(join(upper, "a.txt"), "from upper\n");
  await using sb = await Sandbox.create({ home, overlays: [{ lower: [upper, lower], target: "/testbed" }] });
  const r = await sb.exec("cat /testbed/a.txt /testbed/sub/b.txt");
  assert.equal(r.stdout, "from upper\nbee\n");
});

test("a fresh home has its dotfiles, owned by the sandbox's user; a fork keeps its parent's home", async () => {
  await using user = await Sandbox.create({ home, uid: 1000 });
  const r = await user.exec('stat -c "%n %u %a" ~/.bashrc ~/.profile && . ~/.bashrc && echo "[$PAGER]"');
  assert.equal(r.stdout, "/home/u1000/.bashrc 1000 644\n/home/u1000/.profile 1000 644\n[cat]\n", r.stderr);
  await using parent = await Sandbox.create({ home });
  await parent.exec("echo 'export EDITED=1' > ~/.bashrc && rm ~/.profile");
  const [child] = await parent.fork();
  const c = await child!.exec("cat ~/.bashrc; test -e ~/.profile && echo profile || echo 'no profile'");
  assert.equal(c.stdout, "export EDITED=1\nno profile\n");
  await child!.close();
});
