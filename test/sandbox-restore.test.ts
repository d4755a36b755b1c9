import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
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
  // On the host: pid 1, the launch and the next command's helper are all that is left in its groups.
  const pids = cgroupPids(cgroupsOf(sb).freezer!).filter((p) => p !== sb.pid1);
  assert.ok(pids.length <= 2, `processes left in the sandbox's groups: ${pids.join(" ")}`);
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
