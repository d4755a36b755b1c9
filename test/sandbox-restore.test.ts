import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { InvalidInputError, SandboxError } from "../src/errors.js";
import type { SandboxCgroups } from "../src/sandbox/limits.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { cgroupPids } from "../src/sandbox/limits.js";
import { cgroupsLeft, processesMatching, scratchDirs, smallWorkspace, tempHome } from "./helpers.js";

const home = tempHome("msb-restore-");

function cgroupsOf(sb: Sandbox): SandboxCgroups {
  return (JSON.parse(readFileSync(sb.paths.state, "utf8")) as { cgroups: SandboxCgroups }).cgroups;
}

/** Whether the sandbox's next generation was filled ahead (waits up to 2 s for the last restore's helper). */
async function refilled(sb: Sandbox): Promise<boolean> {
  const { holderPid } = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { holderPid: number };
  const scratch = `/proc/${holderPid}/root${sb.paths.scratch}`;
  for (let i = 0; i < 100; i++) {
    const last = Math.max(...readdirSync(scratch).flatMap((g) => (/^g\d+$/.test(g) ? [Number(g.slice(1))] : [])));
    if (existsSync(join(scratch, `g${last}`, "filled"))) return true;
    await new Promise((res) => setTimeout(res, 20));
  }
  return false;
}

const MQ = "import ctypes, os; rt = ctypes.CDLL('librt.so.1', use_errno=True); rt.mq_open.restype = ctypes.c_int";

/** What a policy leaves behind to carry over: files everywhere, processes of every kind, IPC objects, sockets. */
const LEFTOVERS = [
  "set -e",
  "echo changed > /testbed/kept.txt && rm /testbed/doomed.txt && echo new > /testbed/new.txt",
  "echo t > /tmp/t && echo h > ~/h && mkdir -p /data && echo r > /data/r && echo s > /dev/shm/s",
  "for i in $(seq 2000); do : > /tmp/f$i; done",
  "sleep 1000 &",
  "setsid sh -c 'sleep 1000 & sleep 1000' &",
  "(trap '' TERM INT HUP; exec sleep 1000) &",
  "ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null",
  `python3 -c "${MQ}; assert rt.mq_open(b'/carry', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0"`,
  // A listener, and a connection closed on this side: TIME_WAIT, which bind() would see for a minute.
  "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 4242)); s.listen(); " +
    "c = socket.create_connection(('127.0.0.1', 4242)); a, _ = s.accept(); c.close(); a.close()\"",
  'python3 -c \'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 4343)); s.listen(); ' +
    "time.sleep(1000)' &",
].join("\n");

/** What a fresh sandbox of the workspace shows: files, processes, IPC objects, sockets, the next pid, the mounts. */
const LOOK =
  "cat /testbed/kept.txt /testbed/doomed.txt; ls /testbed /tmp /dev/shm ~; ls -d /data 2>&1 | tail -c 26; " +
  // Processes but this probe's own (its shell and pipelines, whose names depend on how far each has started).
  "ps -e -o comm= | grep -vxE 'bash|ps|grep|sort|tr' | sort | tr '\\n' ' '; echo; ipcs -m -s -q | grep -c '^0x'; " +
  `python3 -c "${MQ}; print('mq', rt.mq_open(b'/carry', os.O_RDWR, 0, None) >= 0)"; ` +
  "tail -n +2 /proc/net/tcp | wc -l; echo pid $$; touch /tmp/n; stat -c %i /tmp/n; rm /tmp/n; " +
  "awk '{print $5}' /proc/self/mountinfo | sort | tr '\\n' ' '";

test("a restore discards every write, process, IPC object, socket: the sandbox is its pristine sibling", async () => {
  const dir = smallWorkspace();
  await using pristine = await Sandbox.create({ home, dir });
  await using sb = await Sandbox.create({ home, dir });
  const left = await sb.exec(LEFTOVERS, { timeoutMs: 60_000 });
  assert.equal(left.exitCode, 0, left.stderr);
  const { session } = await sb.sessions.create();
  void session.run("sleep 1000").catch(() => undefined);
  const before = await sb.exec(LOOK);
  // The leftovers are there: so the checks below can fail.
  assert.match(before.stdout, /^changed\n[\s\S]*mq True\n[1-9]\d*\n/m, before.stdout);
  assert.match(before.stdout, /python3 script (sh )?sleep sleep sleep/);
  await sb.restore(pristine);
  const after = await sb.exec(LOOK);
  const fresh = await pristine.exec(LOOK);
  assert.equal(after.exitCode, 0, after.stderr);
  const lines = after.stdout.split("\n");
  assert.equal(lines[0], "from host", "the workspace's change is gone");
  assert.equal(lines[1], "to be deleted", "the deleted file is back");
  assert.match(after.stdout, /No such file or directory/, "/data is gone");
  assert.ok(Number(lines.at(-2)) < 1000, `a new file's inode (${lines.at(-2)}) tells nothing of the 2000 made before`);
  // Everything but the inode number (a fresh tmpfs numbers files as it is filled) is the pristine sibling's.
  const strip = (s: string): string => s.replace(/^\d+$/m, "");
  assert.equal(
    strip(after.stdout.split("\n").slice(0, -2).join("\n")),
    strip(fresh.stdout.split("\n").slice(0, -2).join("\n")),
  );
  assert.equal(lines.at(-1), fresh.stdout.split("\n").at(-1), "the same mount points");
  assert.match(after.stdout, /mq False/);
  assert.deepEqual(sb.sessions.names(), [], "sessions end with the restore");
  // On the host: pid 1, the launch and our helpers waiting for the next command and the next restore are all that is
  // left in its groups (nothing of the sandbox's: a waiting helper has entered nothing).
  const { holderPid } = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { holderPid: number };
  const pids = cgroupPids(cgroupsOf(sb).freezer!).filter((p) => p !== sb.pid1 && p !== holderPid);
  const waiting = (p: number): boolean => {
    try {
      return / enter --args-fd /.test(readFileSync(`/proc/${p}/cmdline`, "utf8").replaceAll("\0", " "));
    } catch {
      return true; // gone meanwhile
    }
  };
  assert.ok(pids.length <= 2 && pids.every(waiting), `processes left in the sandbox's groups: ${pids.join(" ")}`);
});

test("a restore outruns a fork bomb and leaves the previous generation's memory behind", async () => {
  await using pristine = await Sandbox.create({ home, limits: { pids: 256 } });
  await using sb = await Sandbox.create({ home, limits: { pids: 256 } });
  const memory = join(cgroupsOf(sb).memory!, "memory.usage_in_bytes");
  await sb.exec("head -c 67108864 /dev/urandom > /tmp/fill");
  const before = Number(readFileSync(memory, "utf8"));
  await sb.exec("(b() { b & b & }; b) >/dev/null 2>&1 &");
  await sb.restore(pristine);
  // The probe and its pipeline are a handful of processes; the bomb made hundreds.
  const r = await sb.exec("ls /tmp; ls /proc | grep -c '^[0-9]'");
  assert.equal(r.exitCode, 0, r.stderr);
  assert.ok(Number(r.stdout.trim()) < 10, r.stdout);
  for (let i = 0; i < 100 && Number(readFileSync(memory, "utf8")) > before - 48 * 1024 ** 2; i++)
    await new Promise((res) => setTimeout(res, 50));
  const now = Number(readFileSync(memory, "utf8"));
  assert.ok(now < before - 48 * 1024 ** 2, `charged ${before >> 20} MiB before, ${now >> 20} MiB after`);
});

test("a fork of a hostile parent: mount points it moved or replaced are made again in the child", async () => {
  await using parent = await Sandbox.create({ home, dir: smallWorkspace() });
  const move = await parent.exec("mv /run /run2 && ln -s /tmp /run && rm /bin && mkdir /bin && echo x > /bin/x");
  assert.equal(move.exitCode, 0, move.stderr);
  const [child] = await parent.fork(1);
  const r = await child!.exec("ls /run/minisandbox >/dev/null && test -x /run/sandbox-init && readlink /bin; ls /run2");
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, "usr/bin\nminisandbox\nsandbox-init\n");
  await child!.close();
});

test("bad input: another workspace's sandbox, itself, a command meanwhile; twice, forked; no leak", async () => {
  const dir = smallWorkspace();
  const pristine = await Sandbox.create({ home, dir });
  const sb = await Sandbox.create({ home, dir });
  const other = await Sandbox.create({ home, dir: smallWorkspace() });
  await assert.rejects(
    sb.restore(other),
    (e) => e instanceof InvalidInputError && /not started the way/.test(e.message),
  );
  await assert.rejects(sb.restore(sb), InvalidInputError);
  await sb.exec("echo 1 > /testbed/one");
  const restoring = sb.restore(pristine);
  await assert.rejects(sb.exec("true"), (e) => e instanceof SandboxError && /being restored/.test(e.message));
  await restoring;
  // A second restore takes the namespaces the first one made ahead: as fresh (no IPC object, socket, or lo down).
  const carry = await sb.exec("echo 2 > /testbed/two && ipcmk -M 4096 >/dev/null && (sleep 1000 &)");
  assert.equal(carry.exitCode, 0, carry.stderr);
  await sb.restore(pristine);
  const fresh = await sb.exec(
    "ipcs -m | grep -c '^0x'; pgrep -c sleep; python3 -c \"import socket; s = socket.socket(); " +
      "s.bind(('127.0.0.1', 0)); s.listen(); socket.create_connection(s.getsockname()); print('lo up')\"",
  );
  assert.equal(fresh.stdout, "0\n0\nlo up\n", fresh.stderr);
  await sb.exec("echo 3 > /testbed/three");
  const [child] = await sb.fork(1);
  assert.equal((await child!.exec("ls /testbed")).stdout, "doomed.txt\nkept.txt\npkg\nthree\n");
  const ids = [pristine.id, sb.id, other.id, child!.id];
  await Promise.all([pristine, sb, other, child!].map((s) => s.close()));
  await assert.rejects(sb.restore(pristine), /closed/);
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

test("from a sealed seed the next restore is a swap, as fresh as a copy; from another seed, a copy", async () => {
  const dir = smallWorkspace();
  await using reference = await Sandbox.create({ home, dir });
  await using a = await Sandbox.create({ home, dir });
  await using b = await Sandbox.create({ home, dir });
  await using sb = await Sandbox.create({ home, dir });
  const fresh = await reference.exec(LOOK);
  assert.equal(fresh.exitCode, 0, fresh.stderr);
  await b.exec("echo b > /testbed/kept.txt && echo b > /tmp/b");
  await a.seal();
  await b.seal();
  // Sealed: nothing runs there any more, nothing is restored into it.
  await assert.rejects(a.exec("true"), (e) => e instanceof SandboxError && /sealed/.test(e.message));
  await assert.rejects(a.sessions.create(), /sealed/);
  await assert.rejects(a.files.read("/testbed/kept.txt"), /sealed/);
  await assert.rejects(a.restore(b), (e) => e instanceof InvalidInputError && /sealed/.test(e.message));
  // All but a new file's inode number (a fresh tmpfs numbers files as it is filled).
  const strip = (s: string): string =>
    s
      .split("\n")
      .filter((_, i, all) => i !== all.length - 2)
      .join("\n");
  const seen: string[] = [];
  // The first restore copies and refills the next generation; the second and third take it as it is (a swap);
  // one from b finds a generation filled from a: it is made anew, then b's copy; back to a, a copy again.
  for (const [seed, want] of [
    [a, "from host"],
    [a, "from host"],
    [a, "from host"],
    [b, "b"],
    [a, "from host"],
  ] as const) {
    const left = await sb.exec(LEFTOVERS, { timeoutMs: 60_000 });
    assert.equal(left.exitCode, 0, left.stderr);
    await sb.restore(seed);
    assert.ok(await refilled(sb), "the next generation is filled ahead");
    const after = await sb.exec(LOOK);
    assert.equal(after.exitCode, 0, after.stderr);
    const lines = after.stdout.split("\n");
    assert.equal(lines[0], want, after.stdout);
    assert.ok(
      Number(lines.at(-2)) < 1000,
      `a new file's inode (${lines.at(-2)}) tells nothing of the 2000 made before`,
    );
    assert.match(after.stdout, /mq False/);
    if (seed === a) seen.push(strip(after.stdout));
    else assert.match(after.stdout, /^b\n/m);
  }
  // Every restore from a shows what a fresh sandbox shows (files, processes, IPC, sockets, next pid, mounts).
  for (const s of seen) assert.equal(s, strip(fresh.stdout));
});

test("a seed too large to refill is copied at each restore", async () => {
  const limits = { memoryBytes: 256 * 1024 ** 2 };
  await using seed = await Sandbox.create({ home, limits });
  await using sb = await Sandbox.create({ home, limits });
  // An eighth of the memory limit (32 MiB) is the most a restore refills ahead.
  await seed.exec("head -c 41943040 /dev/urandom > /tmp/big && sha256sum /tmp/big > /tmp/big.sum");
  await seed.seal();
  const memory = join(cgroupsOf(sb).memory!, "memory.usage_in_bytes");
  for (let i = 0; i < 3; i++) {
    await sb.exec("rm /tmp/big; echo x > /tmp/x");
    await sb.restore(seed);
    const r = await sb.exec("sha256sum -c /tmp/big.sum && ls /tmp");
    assert.equal(r.stdout, "/tmp/big: OK\nbig\nbig.sum\n", r.stderr);
  }
  // Not refilled: one copy of the 40 MiB is charged here, not two.
  assert.equal(await refilled(sb), false);
  const charged = Number(readFileSync(memory, "utf8"));
  assert.ok(charged < 70 * 1024 ** 2, `charged ${charged >> 20} MiB`);
});
