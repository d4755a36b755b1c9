import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readlinkSync } from "node:fs";
import { createServer } from "node:net";
import { InvalidInputError } from "../src/errors.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { helperPath } from "../src/sandbox/host.js";
import { tempHome } from "./helpers.js";

const home = tempHome();

test("own pid namespace: only the sandbox's processes are visible; pid 1 is ours, its entry hidden", async () => {
  await using sb = await Sandbox.create({ home });
  const r = await sb.exec(["ps", "-eo", "pid,comm", "--no-headers"]);
  const procs = r.stdout
    .trim()
    .split("\n")
    .map((l) => l.trim().split(/\s+/));
  assert.deepEqual(procs, [["2", "ps"]], r.stdout);
  assert.ok(!r.stdout.includes("node"), "host processes must be invisible");
  // pid 1 is there (the sandbox's init), but its entry shows nothing: its counters would outlive a restore.
  const one = await sb.exec("kill -0 1 && echo alive; ls -A /proc/1 | wc -l");
  assert.equal(one.stdout, "alive\n0\n", one.stderr);
});

test("orphaned zombies are reaped by the sandbox's init", async () => {
  await using sb = await Sandbox.create({ home });
  // The child exits immediately; its parent (sh) exits before waiting: the orphan goes to pid 1.
  await sb.exec("(sh -c 'sleep 0.1 & exec true') ; sleep 0.5");
  const r = await sb.exec(["ps", "-eo", "stat,comm", "--no-headers"]);
  assert.ok(!/^Z/m.test(r.stdout), `zombie left:\n${r.stdout}`);
});

test("kill -9 -1 from inside cannot end the sandbox", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.exec("kill -9 -1");
  const r = await sb.exec(["echo", "still here"]);
  assert.equal(r.stdout, "still here\n");
});

test("own uts, ipc, mount and net namespaces; hostname settable", async () => {
  await using sb = await Sandbox.create({ home, hostname: "task-1" });
  const r = await sb.exec("hostname; readlink /proc/self/ns/ipc /proc/self/ns/uts /proc/self/ns/mnt /proc/self/ns/net");
  const [hostname, ...ns] = r.stdout.trim().split("\n");
  assert.equal(hostname, "task-1");
  for (const [i, kind] of ["ipc", "uts", "mnt", "net"].entries()) {
    assert.notEqual(ns[i], readlinkSync(`/proc/self/ns/${kind}`), `${kind} namespace must differ from the host's`);
  }
});

test("no network by default: loopback only, host services unreachable", async () => {
  const server = createServer((s) => s.end("hello")).listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const port = (server.address() as { port: number }).port;
  try {
    await using sb = await Sandbox.create({ home });
    const links = await sb.exec(["cat", "/proc/net/dev"]);
    const ifaces = links.stdout
      .split("\n")
      .slice(2)
      .filter(Boolean)
      .map((l) => l.trim().split(":")[0]);
    assert.deepEqual(ifaces, ["lo"]);
    const r = await sb.exec(`exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`, { timeoutMs: 5000 });
    assert.notEqual(r.exitCode, 0);
    assert.ok(!r.stdout.includes("hello"));
    // Loopback inside works (a server inside can be reached from inside).
    const lo = await sb.exec(
      "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); " +
        "c=socket.create_connection(s.getsockname()); print('lo ok')\"",
    );
    assert.equal(lo.stdout, "lo ok\n", lo.stderr);

    await using net = await Sandbox.create({ home, network: true });
    const ok = await net.exec(`exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`, { timeoutMs: 5000 });
    assert.equal(ok.stdout, "hello");
  } finally {
    server.close();
  }
});

test("root inside has a reduced capability set", async () => {
  await using sb = await Sandbox.create({ home });
  const r = await sb.exec("mount -t tmpfs x /mnt 2>&1; echo rc=$?; grep CapEff /proc/self/status");
  assert.match(r.stdout, /rc=(1|32)/);
  const eff = BigInt(`0x${/CapEff:\s+([0-9a-f]+)/.exec(r.stdout)![1]!}`);
  const CAP_SYS_ADMIN = 21n;
  assert.equal((eff >> CAP_SYS_ADMIN) & 1n, 0n, "CAP_SYS_ADMIN must be dropped");
  // Exactly Docker's default set, in the bounding set too (so no exec can regain more).
  assert.equal(eff, 0xa80425fbn);
  assert.match((await sb.exec(["grep", "CapBnd", "/proc/self/status"])).stdout, /CapBnd:\s+00000000a80425fb/);
  // pid 1 held CAP_SYS_ADMIN only to make the cgroup namespace: gone once ready, from its bounding set too.
  const status = readFileSync(`/proc/${sb.pid1}/status`, "utf8");
  for (const field of ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"]) {
    const set = BigInt(`0x${new RegExp(`${field}:\\s+([0-9a-f]+)`).exec(status)![1]!}`);
    assert.equal((set >> CAP_SYS_ADMIN) & 1n, 0n, `pid 1's ${field} still has CAP_SYS_ADMIN`);
  }
});

test("uid inside is configurable", async () => {
  await using sb = await Sandbox.create({ home, uid: 1000, gid: 1000 });
  const r = await sb.exec("id -u; id -g; echo x > $HOME/f && cat $HOME/f; touch /tmp/x && echo tmp-ok");
  assert.equal(r.stdout, "1000\n1000\nx\ntmp-ok\n", r.stderr);
});

test("with the native helper: pid 1 is its init carrying the sandbox id; start errors read like env's", async () => {
  assert.ok(helperPath(), "npm run build compiles native/msb-helper.c (needs gcc and libc6-dev)");
  await using sb = await Sandbox.create({ home });
  // pid 1's options (as the host sees them) are the masks it made (visible in /proc/self/mountinfo), then the id.
  const args = readFileSync(`/proc/${sb.pid1}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
  assert.match(args, new RegExp(`^/run/sandbox-init init (--[a-z-]+ (/\\S+ )?)*${sb.id}$`));
  assert.match(args, /--read-only \/proc\/sys /);
  const missing = await sb.exec(["no-such-program"]);
  assert.equal(missing.exitCode, 127);
  assert.equal(missing.stderr, "minisandbox: 'no-such-program': No such file or directory\n");
  const noDir = await sb.exec(["true"], { cwd: "/no/dir" });
  assert.equal(noDir.exitCode, 125);
  assert.equal(noDir.stderr, "minisandbox: cannot change directory to '/no/dir': No such file or directory\n");
  const notExec = await sb.exec(["/etc/passwd"]);
  assert.equal(notExec.exitCode, 126);
});

test("a NUL byte in a command, its environment or its directory is refused, never read as another option", async () => {
  await using sb = await Sandbox.create({ home });
  for (const attempt of [
    () => sb.exec(["echo", "a\0--no-seccomp"]),
    () => sb.exec("true", { env: { X: "1\0--uid\x000" } }),
    () => sb.exec("true", { cwd: "/tmp\0--no-seccomp" }),
  ])
    await assert.rejects(attempt, (e: Error) => e instanceof InvalidInputError && /NUL/.test(e.message));
  const r = await sb.exec("grep Seccomp: /proc/self/status; id -u");
  assert.equal(r.stdout, "Seccomp:\t2\n0\n");
});
