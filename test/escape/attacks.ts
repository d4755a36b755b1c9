/**
 * The escape suite: attacks on the sandbox from inside, each asserting that it fails and that the host is unchanged.
 * Shared by escape.test.ts (as root) and escape/unprivileged.ts (as an unprivileged user, user-namespace mode).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statfsSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { ExecResult } from "../../src/sandbox/exec.js";
import { ID_LOCKS_DIR, type IdPool } from "../../src/sandbox/host.js";
import { DEFAULT_DISK_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS, scratchBytes } from "../../src/sandbox/limits.js";
import { reapLeftovers } from "../../src/sandbox/reaper.js";
import { Sandbox } from "../../src/sandbox/sandbox.js";
import { InvalidInputError, LimitError, TimeoutError } from "../../src/errors.js";
import { cgroupsLeft, mountsUnder, processesMatching, scratchDirs } from "../helpers.js";
import { ABSTRACT_HOST } from "./neighbour-probes.js";
import { registerNeighbourTests } from "./neighbours.js";
import { PS, SYSCALL_PROBE, TAR_HIJACK, TERMINAL_OWNER } from "./probes.js";

export interface EscapeTarget {
  mode: "root" | "userns";
  /** MINISANDBOX_HOME of every sandbox the suite starts (owned by the user running it). */
  home: string;
  /** Unprivileged: the host uid that root inside must be (the caller). */
  hostUid?: number;
  /** Root mode: the pool every sandbox's own id range comes from. */
  idPool?: IdPool;
  /** The uid_map line root inside must see: `0 <host uid> <count>`. */
  idCount: number;
  /** Memory and process limits are enforced here (root, or a cgroup delegated to the user). */
  limitsEnforced: boolean;
}

const MiB = 1024 ** 2;
/** Docker's default capability set (moby's oci/caps/defaults.go), by capability number. */
const DOCKER_CAPS: Record<string, number> = {
  chown: 0,
  dac_override: 1,
  fowner: 3,
  fsetid: 4,
  kill: 5,
  setgid: 6,
  setuid: 7,
  setpcap: 8,
  net_bind_service: 10,
  net_raw: 13,
  sys_chroot: 18,
  mknod: 27,
  audit_write: 29,
  setfcap: 31,
};
const DOCKER_CAP_MASK = Object.values(DOCKER_CAPS).reduce((m, bit) => m | (1n << BigInt(bit)), 0n);
const SIGSYS = 31;
const HOST_PYTHON = "/usr/bin/python3";
const OWNER_FIXTURE = join(import.meta.dirname, "..", "fixtures", "escape-owner.js");

type Outcome = { ret: number | null; errno: string | null } | { signal: number } | { error: string };

/** The host uid root inside `sb` must be: the caller, or (root mode) the first id of a range of the pool. */
export function hostUidOf(sb: Sandbox, target: EscapeTarget): number {
  const uid = sb.hostIds.uid;
  if (target.mode === "userns") {
    assert.equal(uid, target.hostUid);
    return uid;
  }
  const pool = target.idPool!;
  const slot = (uid - pool.base) / pool.size;
  assert.ok(Number.isInteger(slot) && slot >= 0 && slot < pool.slots, `host uid ${uid} is not a range of the pool`);
  return uid;
}

function refused(probe: Record<string, Outcome>, name: string, errno: string): void {
  assert.deepEqual(probe[name], { ret: -1, errno }, `${name}: ${JSON.stringify(probe[name])}`);
}

function killedBySigsys(probe: Record<string, Outcome>, name: string): void {
  assert.deepEqual(probe[name], { signal: SIGSYS }, `${name}: ${JSON.stringify(probe[name])}`);
}

function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Major and minor of a dev_t as the kernel encodes it. */
function devNumbers(dev: number): [number, number] {
  const d = BigInt(dev);
  const major = Number(((d >> 8n) & 0xfffn) | ((d >> 32n) & ~0xfffn));
  const minor = Number((d & 0xffn) | ((d >> 12n) & ~0xffn));
  return [major, minor];
}

function readOr(path: string, fallback = "(unreadable)"): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return fallback;
  }
}

/** Container storage that other tools on a shared host mount and unmount at any time (podman's layers and shm). */
const OTHER_TOOLS = /\/overlay\/[^/ ]+\/merged$|\/overlay-containers\/[^/ ]+\/userdata\/shm$/;

function hostMounts(): Set<string> {
  return new Set(
    readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ").slice(3, 5).join(" "))
      .filter((m) => !OTHER_TOOLS.test(m)),
  );
}

/** Blocks a tree takes on the host's disk (directories and symlinks included), in bytes. */
function diskUsage(path: string): number {
  const st = lstatSync(path, { bigint: true });
  let total = Number(st.blocks) * 512;
  if (st.isDirectory()) for (const name of readdirSync(path)) total += diskUsage(join(path, name));
  return total;
}

/** Free bytes on the filesystem holding the host's temporary directory. */
function hostFree(): number {
  const s = statfsSync(tmpdir());
  return s.bavail * s.bsize;
}

/** Fill `file` inside until the disk budget stops it; returns the size it reached (at most `max`). */
async function fillStops(sb: Sandbox, file: string, max = 32 * MiB): Promise<number> {
  const r = await sb.exec(`dd if=/dev/zero of=${file} bs=1M count=1024 2>&1; stat -c size=%s ${file}; rm -f ${file}`, {
    timeoutMs: 60_000,
  });
  assert.match(r.stdout, /No space left on device/, `${file}: ${r.stdout}`);
  const size = Number(/size=(\d+)/.exec(r.stdout)?.[1]);
  assert.ok(size <= max, `${file} grew to ${size} bytes`);
  return size;
}

/** Host processes mentioning `home`, except this process's own ancestors (whose command lines may name it). */
export function leftoverProcesses(home: string): string[] {
  const ancestors = new Set<number>();
  for (let pid = process.pid; pid > 1; ) {
    ancestors.add(pid);
    const stat = readOr(`/proc/${pid}/stat`, "");
    pid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (!pid) break;
  }
  return processesMatching(home).filter((p) => !ancestors.has(Number(p.split(":")[0])));
}

/** Host processes whose command line is exactly `args` (joined by spaces). */
function hostProcesses(args: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ").trim() === args) out.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Processes of a cgroup v1 group and its subgroups. */
function cgroupTree(dir: string): number[] {
  const pids = readOr(join(dir, "cgroup.procs"), "").split("\n").filter(Boolean).map(Number);
  for (const e of readdirSync(dir, { withFileTypes: true }))
    if (e.isDirectory()) pids.push(...cgroupTree(join(dir, e.name)));
  return pids;
}

function statusField(pid: number, field: string): string {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${field}:`));
  return (line ?? "").slice(field.length + 1).trim();
}

/** Everything under the host's /etc that other users may not read: files without o+r, directories without o+rx. */
function hostEtcSecrets(): { path: string; dir: boolean }[] {
  const out: { path: string; dir: boolean }[] = [];
  const walk = (dir: string): void => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const path = join(dir, name);
      const st = lstatSync(path, { throwIfNoEntry: false });
      if (!st || st.isSymbolicLink()) continue;
      if (st.isDirectory()) {
        if ((st.mode & 0o005) !== 0o005) out.push({ path, dir: true });
        else walk(path);
      } else if (st.isFile() && (st.mode & 0o004) === 0) out.push({ path, dir: false });
    }
  };
  walk("/etc");
  return out;
}

/** Takes inotify instances until the kernel refuses (at most 1024), says how many, holds them until released. */
const INOTIFY_HOG = `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 1024:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print(len(held), flush=True)
open("/tmp/quota-held", "w").close()
deadline = time.time() + 15
while not os.path.exists("/tmp/quota-release") and time.time() < deadline:
    time.sleep(0.002)
`;

/** One inotify instance, on the host: "ok" or the errno name. */
const INOTIFY_ONE = `
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
print("ok" if libc.inotify_init1(0) >= 0 else errno.errorcode[ctypes.get_errno()])
`;

/** What a command inside sees at each path: EMPTY, MISSING, DENIED, or the sha256 of what it read. */
const SEE_PATHS = `
import errno, hashlib, json, os, sys
seen = {}
for p in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(p):
            names = os.listdir(p)
            seen[p] = "EMPTY" if not names else "LISTED " + ",".join(sorted(names)[:5])
        else:
            with open(p, "rb") as f:
                data = f.read()
            seen[p] = "EMPTY" if not data else hashlib.sha256(data).hexdigest()
    except FileNotFoundError:
        seen[p] = "MISSING"
    except OSError as e:
        seen[p] = "DENIED" if e.errno in (errno.EACCES, errno.EPERM) else errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(seen))
`;

function sha256(path: string): string | undefined {
  const r = spawnSync("sha256sum", [path], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.split(" ")[0] : undefined;
}

/** Processes inside that file operations start (readers, archivers), as the sandbox lists them. */
async function fileToolsInside(sb: Sandbox): Promise<string[]> {
  const r = await sb.exec(["/usr/bin/python3", "-c", PS]);
  assert.equal(r.exitCode, 0, r.stderr);
  const tools = new Set(["sh", "head", "cat", "tar", "stat"]);
  return (JSON.parse(r.stdout) as string[]).filter((p) => tools.has((p.split(" ")[0] ?? "").split("/").pop()!));
}

/** Poll until `check` holds (or give up after `tries`). */
async function until(check: () => boolean | Promise<boolean>, tries = 200, ms = 25): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return true;
    await sleep(ms);
  }
  return false;
}

interface OwnerRun {
  tty: string;
  status: number;
  result: {
    ownerHolds: string;
    pid1Fds: Record<string, string>;
    holderFds: Record<string, string>;
    attack: { exitCode: number; stdout: string; stderr: string };
    bKilledDuringAttack: { exitCode: number; signal?: string; stdout: string } | null;
    ownerSignals: string[];
    aliveAfter: Record<string, boolean>;
    bUsableAfter: string;
  };
  inside: {
    fds: number[];
    through_held_fd: string | string[];
    tty: { open?: boolean | string; write?: boolean | string; tiocsti?: string; read?: string | null };
  };
}

const HELD_FD = 9;

/** Runs test/fixtures/escape-owner on a pseudo-terminal, holding `/` open on HELD_FD (see TERMINAL_OWNER). */
async function runOwner(home: string): Promise<OwnerRun> {
  const dir = tempDir("msb-escape-owner-");
  try {
    const resultFile = join(dir, "result.json");
    const argv = ["-c", TERMINAL_OWNER, String(HELD_FD), process.execPath, OWNER_FIXTURE, home, String(HELD_FD)];
    const child = spawn(HOST_PYTHON, [...argv, resultFile], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (err += b.toString()));
    await new Promise((r) => child.on("close", r));
    const wrapper = JSON.parse(out) as { tty: string; status: number };
    if (wrapper.status !== 0) await reapLeftovers(join(home, "sandboxes"));
    assert.ok(existsSync(resultFile), `the owner process wrote no result: ${wrapper.tty}\n${err}`);
    const result = JSON.parse(readFileSync(resultFile, "utf8")) as OwnerRun["result"];
    const firstLine = result.attack.stdout.split("\n")[0] ?? "";
    let inside: OwnerRun["inside"];
    try {
      inside = JSON.parse(firstLine) as OwnerRun["inside"];
    } catch {
      assert.fail(`the attack printed no result: ${JSON.stringify(result.attack)}`);
    }
    return { ...wrapper, result, inside };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Starts TAR_HIJACK inside and waits until it watches for the download's tar. */
async function startHijack(
  sb: Sandbox,
  mode: "forge" | "hold",
  tree: string,
  entries: object[],
): Promise<{ run: Promise<ExecResult> }> {
  await sb.exec(["rm", "-f", "/tmp/hijack-ready"]);
  const run = sb.exec(["/usr/bin/python3", "-c", TAR_HIJACK, mode, tree, String(TREE_FILES), JSON.stringify(entries)], {
    timeoutMs: 30_000,
  });
  assert.ok(await until(() => sb.files.exists("/tmp/hijack-ready")), "the hijacker did not start");
  return { run };
}

/** Files in the tree a hijacked download archives. */
const TREE_FILES = 300;

/** A tree tar archives as one 10240-byte record per file after its "./" header (see TAR_HIJACK). */
async function makeRecordTree(sb: Sandbox, path: string, files: number): Promise<void> {
  const r = await sb.exec(
    `rm -rf ${path} && mkdir -p ${path} && ` +
      `for i in $(seq 1 ${files}); do head -c 9728 /dev/urandom > ${path}/f$i; done`,
  );
  assert.equal(r.exitCode, 0, r.stderr);
}

export function registerEscapeSuite(target: EscapeTarget): void {
  const { home, mode } = target;
  const canary = `msb-escape-canary-${randomBytes(4).toString("hex")}`;
  process.env.MSB_ESCAPE_CANARY = canary;
  const mountsBefore = hostMounts();
  const ids: string[] = [];
  let main: Sandbox;
  let probe: Record<string, Outcome>;
  const hostRootDev = devNumbers(statSync("/").dev);

  describe(`escape attempts (${mode} mode)`, () => {
    before(async () => {
      main = await Sandbox.create({ home });
      ids.push(main.id);
      const r = await main.exec(["/usr/bin/python3", "-c", SYSCALL_PROBE, ...hostRootDev.map(String)], {
        timeoutMs: 60_000,
      });
      assert.equal(r.exitCode, 0, r.stderr);
      probe = JSON.parse(r.stdout) as Record<string, Outcome>;
    });

    after(async () => {
      await main?.close();
      delete process.env.MSB_ESCAPE_CANARY;
      assert.deepEqual(leftoverProcesses(home), [], "host processes left behind");
      assert.deepEqual(mountsUnder(home), [], "host mounts left behind");
      assert.deepEqual(scratchDirs(home), [], "sandbox directories left behind");
      assert.deepEqual(cgroupsLeft(ids), [], "sandbox cgroups left behind");
      const added = [...hostMounts()].filter((m) => !mountsBefore.has(m));
      assert.deepEqual(added, [], "the host's mount table changed");
    });

    test("mount family refused (EPERM): mount (tmpfs, cgroup v1), umount2, pivot_root, the new mount API", () => {
      for (const name of [
        "mount",
        "mount_cgroup",
        "umount2",
        "pivot_root",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsmount",
        "fspick",
        "mount_setattr",
      ])
        refused(probe, name, "EPERM");
    });

    test("no new namespaces: unshare/clone/setns EPERM, clone3 ENOSYS, /proc/1/ns closed; unshare fails", async () => {
      for (const name of ["unshare_user", "unshare_mnt", "clone_newuser", "clone_newns", "clone_newpid_newnet"])
        refused(probe, name, "EPERM");
      refused(probe, "clone3", "ENOSYS");
      refused(probe, "setns", "EPERM");
      // pid 1's entry is hidden altogether (an empty directory): its namespaces are not even named there.
      refused(probe, "open_pid1_ns", "ENOENT");
      const chroot = probe.chroot_escape as { ret: number; errno: string };
      assert.equal(chroot.ret, 0, `a chroot breakout left the sandbox's root: / is now ${chroot.errno}`);
      const r = await main.exec(
        "unshare -U true; echo user=$?; unshare -m true; echo mnt=$?; unshare -Urm true; echo both=$?",
      );
      assert.match(r.stdout, /user=[1-9]/);
      assert.match(r.stdout, /mnt=[1-9]/);
      assert.match(r.stdout, /both=[1-9]/);
    });

    test("kernel attack surface (bpf, io_uring, kexec, modules...) refused (EPERM); no READ_IMPLIES_EXEC", () => {
      for (const name of [
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "iopl",
        "ioperm",
        "process_vm_readv",
        "process_vm_writev",
        "syslog",
        "reboot",
        "swapon",
        "acct",
        "settimeofday",
        "clock_settime",
        "adjtimex_set",
        "sethostname",
      ])
        refused(probe, name, "EPERM");
      assert.deepEqual(probe.personality_read_implies_exec, { ret: -1, errno: "ENOSYS (now 0x0)" });
    });

    test("shocker: open_by_handle_at and name_to_handle_at refused (EPERM)", () => {
      refused(probe, "open_by_handle_at", "EPERM");
      refused(probe, "name_to_handle_at", "EPERM");
    });

    test("device nodes: mknod of the host's root disk (major:minor) and /dev/mem (1:1) refused (EPERM)", async () => {
      refused(probe, "mknod_block_root_disk", "EPERM");
      refused(probe, "mknod_dev_mem", "EPERM");
      const r = await main.exec("ls /dev; ls -l /tmp/escape-blk /tmp/escape-mem 2>&1");
      assert.doesNotMatch(r.stdout, /^(mem|kmem|port|vd[a-z]|sd[a-z]|nvme\w*|loop\d+)$/m, r.stdout);
      assert.match(r.stdout, /escape-blk.*No such file/);
    });

    test("other ABIs kill the process (SIGSYS): an x32 syscall and int 0x80", () => {
      killedBySigsys(probe, "x32_getpid");
      killedBySigsys(probe, "int80_getpid");
    });

    test("keyring: add_key, keyctl, request_key refused (EPERM); /proc/keys and /proc/key-users empty", async () => {
      for (const name of ["add_key", "keyctl", "request_key"]) refused(probe, name, "EPERM");
      const r = await main.exec("wc -c < /proc/keys; wc -c < /proc/key-users 2>/dev/null || echo 0");
      assert.deepEqual(r.stdout.trim().split("\n"), ["0", "0"], r.stderr);
    });

    test("pid 1 out of reach: ptrace, pidfd_getfd (EPERM), /proc/1 refused; holds /dev/null, its lock", async () => {
      refused(probe, "ptrace_attach_1", "EPERM");
      refused(probe, "ptrace_seize_1", "EPERM");
      refused(probe, "pidfd_getfd_1", "EPERM");
      refused(probe, "ptrace_suspend_seccomp", "EPERM");
      const r = await main.exec(
        "for f in mem environ maps; do head -c1 /proc/1/$f >/dev/null 2>&1 && echo READ-$f; done; " +
          "for l in root cwd exe fd/0 fd/1 fd/2 fd/5; do readlink /proc/1/$l && echo LINK-$l; done; echo done",
      );
      assert.equal(r.stdout, "done\n", r.stdout);
      // pidfd_send_signal(SIGKILL) to pid 1 from inside had no effect.
      assert.ok(existsSync(`/proc/${main.pid1}`));
      assert.equal((await main.exec(["echo", "alive"])).stdout, "alive\n");
      const fds = readdirSync(`/proc/${main.pid1}/fd`).sort();
      // A sandbox with a range of its own: pid 1 also holds that range's lock, for as long as it lives.
      const ownRange = mode === "root" && target.idPool!.slots > 1;
      assert.deepEqual(fds, ownRange ? ["0", "1", "2", "5"] : ["0", "1", "2"]);
      if (ownRange) assert.equal(readlinkSync(`/proc/${main.pid1}/fd/5`), join(ID_LOCKS_DIR, String(main.hostIds.uid)));
      if (mode === "root")
        for (const fd of ["0", "1", "2"]) assert.equal(readlinkSync(`/proc/${main.pid1}/fd/${fd}`), "/dev/null");
    });

    test("flooding pid 1's descriptors (the launcher's pipes) is refused; the host process does not grow", async () => {
      const rss = process.memoryUsage().rss;
      const r = await main.exec(
        "head -c 200000000 /dev/zero > /proc/1/fd/1; echo one=$?; " +
          "head -c 200000000 /dev/zero > /proc/1/fd/2; echo two=$?",
        { timeoutMs: 60_000 },
      );
      assert.match(r.stdout, /one=1\ntwo=1/);
      // pid 1's entry is hidden: its descriptors are not there to write to.
      assert.match(r.stderr, /\/proc\/1\/fd\/1: No such file or directory/);
      assert.ok(process.memoryUsage().rss - rss < 64 * MiB, "host memory grew");
    });

    test("core_pattern, sysrq-trigger, /proc/sys/{kernel,vm,fs} refuse writes; host's values unchanged", async () => {
      const knobs = [
        "kernel/core_pattern",
        "kernel/modprobe",
        "kernel/panic_on_oops",
        "vm/overcommit_memory",
        "vm/drop_caches",
        "fs/file-max",
        "fs/protected_symlinks",
      ].filter((k) => existsSync(`/proc/sys/${k}`));
      const before = knobs.map((k) => readOr(`/proc/sys/${k}`));
      const script = [
        "echo '|/tmp/handler %p' > /proc/sys/kernel/core_pattern && echo WROTE-core_pattern",
        "echo /tmp/handler > /proc/sys/kernel/modprobe && echo WROTE-modprobe",
        "echo 1 > /proc/sys/kernel/panic_on_oops && echo WROTE-panic_on_oops",
        "echo 1 > /proc/sys/vm/overcommit_memory && echo WROTE-overcommit",
        "echo 3 > /proc/sys/vm/drop_caches && echo WROTE-drop_caches",
        "echo 1000 > /proc/sys/fs/file-max && echo WROTE-file-max",
        "echo 0 > /proc/sys/fs/protected_symlinks && echo WROTE-protected_symlinks",
        "echo c > /proc/sysrq-trigger && echo WROTE-sysrq",
        "echo done",
      ].join("; ");
      const r = await main.exec(script);
      assert.equal(r.stdout, "done\n");
      assert.deepEqual(
        knobs.map((k) => readOr(`/proc/sys/${k}`)),
        before,
      );
      const sysrq = await main.exec("test -e /proc/sysrq-trigger && grep ' /proc/sysrq-trigger ' /proc/self/mountinfo");
      if (existsSync("/proc/sysrq-trigger")) assert.match(sysrq.stdout, /\bro\b/);
    });

    test("/sys absent or read-only; cgroup v1 cannot be mounted; the host's release_agent is unchanged", async () => {
      const agents = ["memory", "pids", "rdma", "devices"]
        .map((c) => `/sys/fs/cgroup/${c}/release_agent`)
        .filter((p) => existsSync(p));
      const before = agents.map((p) => readOr(p));
      const r = await main.exec(
        "if [ -e /sys ]; then touch /sys/escape 2>/dev/null && echo SYS-WRITABLE; fi; " +
          "mkdir -p /tmp/cg && for c in memory pids rdma; do " +
          "mount -t cgroup -o $c cgroup /tmp/cg 2>/dev/null && echo MOUNTED-$c; done; " +
          "ls /tmp/cg; echo '#!/bin/sh' > /tmp/agent; echo /tmp/agent > /tmp/cg/release_agent 2>/dev/null; " +
          "grep -c ' - cgroup' /proc/self/mountinfo; echo done",
      );
      assert.equal(r.stdout, "0\ndone\n", r.stdout);
      assert.deepEqual(
        agents.map((p) => readOr(p)),
        before,
      );
    });

    test("/etc secrets read empty or refused, never the host's content; getent shadow finds no hash", async () => {
      const secrets = hostEtcSecrets();
      const named = ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"].filter((p) => existsSync(p));
      for (const p of named) if (!secrets.some((s) => s.path === p)) secrets.push({ path: p, dir: false });
      assert.ok(secrets.length > 0, "the host has no non-world-readable file under /etc to test with");
      const shadowBefore = statSync("/etc/shadow", { throwIfNoEntry: false });
      const r = await main.exec(["/usr/bin/python3", "-c", SEE_PATHS, JSON.stringify(secrets.map((s) => s.path))]);
      assert.equal(r.exitCode, 0, r.stderr);
      const seen = JSON.parse(r.stdout) as Record<string, string>;
      for (const s of secrets) {
        const inside = seen[s.path];
        assert.ok(["EMPTY", "MISSING", "DENIED"].includes(inside ?? ""), `${s.path} inside: ${inside}`);
        if (!s.dir && mode === "root") assert.notEqual(inside, sha256(s.path), `${s.path}: the host's content`);
      }
      const getent = await main.exec("getent shadow root; getent shadow");
      for (const line of getent.stdout.split("\n").filter(Boolean))
        assert.match(line.split(":")[1] ?? "", /^[!*x]*$/, `a password hash is visible: ${line}`);
      if (shadowBefore) {
        const after = statSync("/etc/shadow");
        assert.equal(after.mtimeMs, shadowBefore.mtimeMs);
        assert.equal(after.mode, shadowBefore.mode);
      }
    });

    test("identity: root inside maps to an unprivileged host uid; Docker's caps, NoNewPrivs 1, Seccomp 2", async () => {
      const r = await main.exec(
        "cat /proc/self/uid_map /proc/self/gid_map; grep -E '^(Cap[A-Za-z]+|NoNewPrivs|Seccomp):' /proc/self/status",
      );
      const lines = r.stdout.trim().split("\n");
      const uidMap = lines[0]!.trim().split(/\s+/).map(Number);
      const hostUid = hostUidOf(main, target);
      assert.deepEqual(uidMap, [0, hostUid, target.idCount]);
      if (mode === "root") assert.notEqual(uidMap[1], 0);
      const field = (name: string): string => lines.find((l) => l.startsWith(`${name}:`))!.split(/\s+/)[1]!;
      assert.equal(BigInt(`0x${field("CapEff")}`), DOCKER_CAP_MASK, "CapEff");
      assert.equal(BigInt(`0x${field("CapPrm")}`), DOCKER_CAP_MASK, "CapPrm");
      assert.equal(BigInt(`0x${field("CapBnd")}`), DOCKER_CAP_MASK, "CapBnd");
      assert.equal(BigInt(`0x${field("CapInh")}`), 0n, "CapInh");
      assert.equal(BigInt(`0x${field("CapAmb")}`), 0n, "CapAmb");
      assert.equal(field("NoNewPrivs"), "1");
      assert.equal(field("Seccomp"), "2");
      // The host's view: pid 1 and a command, found by a command line no other process has.
      assert.equal(statusField(main.pid1, "Uid"), Array(4).fill(hostUid).join("\t"));
      assert.equal(statusField(main.pid1, "NoNewPrivs"), "1");
      assert.equal(statusField(main.pid1, "Seccomp"), "2");
      const marker = `sleep 77.${randomBytes(3).readUIntBE(0, 3)}`;
      const running = main.exec(marker, { timeoutMs: 20_000 });
      try {
        assert.ok(await until(() => hostProcesses(marker).length > 0), "the command did not show on the host");
        for (const pid of hostProcesses(marker)) {
          assert.equal(statusField(pid, "Uid"), Array(4).fill(hostUid).join("\t"));
          assert.equal(statusField(pid, "NoNewPrivs"), "1");
          assert.equal(statusField(pid, "NSpid").split(/\s+/).length, 2, "a pid namespace of its own");
        }
        // Every process of the sandbox's pids cgroup that lives in its pid namespace runs as hostUid on the host.
        const state = JSON.parse(readFileSync(main.paths.state, "utf8")) as { cgroups: { pids?: string } };
        if (state.cgroups.pids) {
          const inside = cgroupTree(state.cgroups.pids).filter((pid) => statusField(pid, "NSpid").includes("\t"));
          assert.ok(inside.length >= 2, `pid 1 and the command in the pids cgroup: ${inside}`);
          for (const pid of inside) assert.equal(statusField(pid, "Uid"), Array(4).fill(hostUid).join("\t"));
        }
      } finally {
        await main.exec(["pkill", "-f", marker]);
        await running;
      }
    });

    test("nothing of the host process's environment is visible inside", async () => {
      const r = await main.exec("env; cat /proc/self/environ; cat /proc/1/environ 2>/dev/null; echo");
      assert.ok(!r.stdout.includes(canary), "the host's environment leaked in");
      const holder = (JSON.parse(readFileSync(main.paths.state, "utf8")) as { holderPid: number }).holderPid;
      for (const pid of [main.pid1, holder])
        assert.ok(
          !readOr(`/proc/${pid}/environ`, "").includes(canary),
          `host pid ${pid} carries the caller's environment`,
        );
    });

    test("TIOCSTI on the session's terminal is refused (EPERM); nothing is typed into the shell", async () => {
      await main.files.write(
        "/tmp/tiocsti.py",
        "import errno, fcntl, termios\nfor c in b'touch /tmp/typed-by-tiocsti\\n':\n" +
          "    try:\n        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\n" +
          "    except OSError as e:\n        print('refused', errno.errorcode[e.errno]); break\n" +
          "else:\n    print('typed')\n",
      );
      const { session } = await main.sessions.create("tiocsti");
      try {
        const r = await session.run("python3 /tmp/tiocsti.py", { check: "ignore", timeoutMs: 10_000 });
        assert.equal(r.output.trim(), "refused EPERM");
        await session.run("sleep 0.2", { check: "ignore", timeoutMs: 10_000 });
      } finally {
        await main.sessions.close("tiocsti");
      }
      assert.equal(await main.files.exists("/tmp/typed-by-tiocsti"), false);
    });

    describe("the host process that owns sandboxes", () => {
      let run: OwnerRun;
      before(async () => {
        run = await runOwner(home);
        assert.ok(run.result.ownerHolds === "/", `the owner did not inherit / on fd ${HELD_FD}`);
      });

      test("inherited fds: a command sees only 0-2, none reaching the host; pid 1 and the launcher hold none", () => {
        assert.deepEqual(run.inside.fds, [0, 1, 2]);
        assert.ok(typeof run.inside.through_held_fd === "string", `listed: ${run.inside.through_held_fd}`);
        // pid 1's only other descriptor is its id range's lock (root mode, a range of its own).
        const pid1Fds = Object.entries(run.result.pid1Fds).filter(([, to]) => !to.startsWith(`${ID_LOCKS_DIR}/`));
        assert.deepEqual(pid1Fds.map(([fd]) => fd).sort(), ["0", "1", "2"]);
        for (const [fd, to] of Object.entries(run.result.holderFds))
          assert.notEqual(to, "/", `the launcher holds the host's / on fd ${fd}`);
      });

      test("the host's controlling terminal is out of reach: no write, no keystrokes read from it, no TIOCSTI", () => {
        const { open, read, tiocsti } = run.inside.tty;
        const hit = [
          ...(open === true ? ["/dev/tty opened the host's controlling terminal"] : []),
          ...(run.tty.includes("SANDBOX-WROTE-TO-HOST-TTY") ? ["a command inside wrote on the host's terminal"] : []),
          ...(read?.includes("typed-secret")
            ? [`a command inside read what was typed on it (${JSON.stringify(read)})`]
            : []),
          ...(tiocsti === "accepted" ? ["TIOCSTI typed into it"] : []),
        ];
        assert.deepEqual(hit, [], hit.join("; "));
      });

      test("a signal to the command's process group reaches no host process, no launcher, no other sandbox", () => {
        const { ownerSignals, bKilledDuringAttack, aliveAfter, bUsableAfter } = run.result;
        const hit = [
          ...ownerSignals.map((s) => `the host process got ${s}`),
          ...(bKilledDuringAttack ? [`the other sandbox's command died (${JSON.stringify(bKilledDuringAttack)})`] : []),
          ...Object.entries(aliveAfter)
            .filter(([, alive]) => !alive)
            .map(([who]) => `${who} died`),
          ...(bUsableAfter === "b-usable" ? [] : [`the other sandbox no longer runs commands (${bUsableAfter})`]),
        ];
        assert.deepEqual(hit, [], `kill(0, SIGTERM) from inside: ${hit.join("; ")}`);
      });
    });

    describe("copy-out", () => {
      let hijack: Sandbox;
      before(async () => {
        hijack = await Sandbox.create({ home });
        ids.push(hijack.id);
      });
      after(() => hijack.close());

      test("download: no setuid/sticky bits, FIFO skipped, symlink kept, hard link copied, caller-owned", async () => {
        const r = await main.exec(
          "rm -rf /tmp/d && mkdir -p /tmp/d/sticky && cp /bin/sh /tmp/d/sh && chmod 6755 /tmp/d/sh && " +
            "chmod 3777 /tmp/d/sticky && mkfifo /tmp/d/fifo && ln -s /etc/shadow /tmp/d/shadow && " +
            "echo data > /tmp/d/file && chmod 4644 /tmp/d/file && ln /tmp/d/file /tmp/d/hard && " +
            "stat -c '%a %n' /tmp/d/*",
        );
        assert.match(r.stdout, /^6755 \/tmp\/d\/sh$/m, r.stderr);
        const target = join(tempDir("msb-escape-dl-"), "out");
        const shadow = statSync("/etc/shadow", { throwIfNoEntry: false });
        try {
          const report = await main.files.download("/tmp/d", target, { timeoutMs: 30_000 });
          assert.deepEqual(report.skipped, [{ path: "fifo", kind: "fifo" }]);
          assert.equal(existsSync(join(target, "fifo")), false);
          const walk = (p: string): void => {
            const st = lstatSync(p);
            assert.equal(st.mode & 0o7000, 0, `${p} has mode ${(st.mode & 0o7777).toString(8)}`);
            assert.equal(st.uid, process.getuid!(), `${p} owner`);
            assert.equal(st.gid, process.getgid!(), `${p} group`);
            if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
          };
          walk(target);
          assert.ok(lstatSync(join(target, "shadow")).isSymbolicLink());
          assert.equal(readlinkSync(join(target, "shadow")), "/etc/shadow");
          assert.ok(lstatSync(join(target, "hard")).isFile());
          assert.equal(readFileSync(join(target, "hard"), "utf8"), "data\n");
          assert.equal(lstatSync(join(target, "sh")).mode & 0o7777, 0o755);
          if (shadow) assert.equal(statSync("/etc/shadow").mtimeMs, shadow.mtimeMs);
        } finally {
          rmSync(dirname(target), { recursive: true, force: true });
        }
      });

      test("an archive forged inside writes nothing through a symlink it planted, nor above the target", async () => {
        const victimDir = tempDir("msb-escape-victim-");
        const victim = join(victimDir, "secret");
        writeFileSync(victim, "original\n");
        const victimMtime = statSync(victim).mtimeMs;
        const outer = tempDir("msb-escape-forged-");
        try {
          await makeRecordTree(hijack, "/tmp/src", TREE_FILES);
          const rounds: { entries: object[]; check: (target: string, err: unknown) => void }[] = [
            {
              entries: [
                { name: "evil", kind: "symlink", link: victim },
                { name: "evil", kind: "file", data: "through-the-link\n" },
                { name: "hard", kind: "hardlink", link: victim },
                { name: "dirlink", kind: "symlink", link: victimDir },
                { name: "dirlink/planted", kind: "file", data: "planted\n" },
              ],
              check: (t, err) => {
                assert.ok(err instanceof InvalidInputError, `want InvalidInputError, got ${err}`);
                assert.ok(lstatSync(join(t, "evil")).isFile(), "evil should be a fresh regular file");
                assert.equal(readFileSync(join(t, "evil"), "utf8"), "through-the-link\n");
                assert.equal(lstatSync(join(t, "evil")).mode & 0o7000, 0);
                assert.equal(existsSync(join(t, "hard")), false);
              },
            },
            {
              entries: [{ name: "../escaped", kind: "file", data: "up\n" }],
              check: (_t, err) => assert.ok(err instanceof InvalidInputError, `want InvalidInputError, got ${err}`),
            },
          ];
          for (const [i, round] of rounds.entries()) {
            let caught: { caught: boolean; why?: string } = { caught: false };
            let target = "";
            let error: unknown;
            for (let attempt = 0; attempt < 10 && !caught.caught; attempt++) {
              target = join(outer, `r${i}-${attempt}`);
              const watcher = (await startHijack(hijack, "forge", "/tmp/src", round.entries)).run;
              error = await hijack.files.download("/tmp/src", target, { timeoutMs: 20_000 }).then(
                () => undefined,
                (e: unknown) => e,
              );
              const w = await watcher;
              caught = JSON.parse(w.stdout || '{"caught":false}') as typeof caught;
            }
            assert.ok(caught.caught, `could not take over tar's output: ${caught.why}`);
            round.check(target, error);
          }
          assert.equal(readFileSync(victim, "utf8"), "original\n");
          assert.equal(statSync(victim).mtimeMs, victimMtime);
          assert.deepEqual(readdirSync(victimDir), ["secret"]);
          assert.equal(existsSync(join(outer, "escaped")), false);
        } finally {
          rmSync(victimDir, { recursive: true, force: true });
          rmSync(outer, { recursive: true, force: true });
        }
      });

      test("a process inside that keeps the download's stream open cannot stretch it past timeoutMs", async () => {
        const outer = tempDir("msb-escape-held-");
        let outcome: unknown = "pending";
        let download: Promise<unknown> | undefined;
        let watcher: Promise<unknown> | undefined;
        try {
          await makeRecordTree(hijack, "/tmp/src", TREE_FILES);
          let holding = false;
          // Catching tar inside the archive is a race the hijacker may lose on a loaded machine: each miss says why.
          const missed: string[] = [];
          for (let attempt = 0; attempt < 10 && !holding; attempt++) {
            await hijack.exec(["rm", "-f", "/tmp/hijack-holding"]);
            let finished = false;
            watcher = (await startHijack(hijack, "hold", "/tmp/src", [])).run.then((r) => {
              finished = true;
              missed.push(r.stdout.trim() || r.stderr.trim().slice(-200));
            });
            outcome = "pending";
            download = hijack.files.download("/tmp/src", join(outer, `t${attempt}`), { timeoutMs: 1000 }).then(
              () => (outcome = "completed"),
              (e: unknown) => (outcome = e),
            );
            await until(async () => finished || (await hijack.files.exists("/tmp/hijack-holding")));
            holding = !finished;
            if (!holding) await download;
          }
          assert.ok(holding, `could not take over tar's output: ${missed.join("; ")}`);
          await until(() => outcome !== "pending", 160, 25);
          assert.ok(outcome instanceof TimeoutError, `4 s after its 1 s timeout the download is ${String(outcome)}`);
        } finally {
          await hijack.exec(["pkill", "-f", "hijack-ready"]);
          await download;
          await watcher;
          rmSync(outer, { recursive: true, force: true });
        }
      });

      test("maxBytes bounds what a download costs the host's disk, entries without data included", async () => {
        const r = await main.exec("rm -rf /tmp/many && mkdir -p /tmp/many && cd /tmp/many && seq 1 1500 | xargs mkdir");
        assert.equal(r.exitCode, 0, r.stderr);
        const outer = tempDir("msb-escape-many-");
        const maxBytes = 64 * 1024;
        try {
          const outcome = await main.files
            .download("/tmp/many", join(outer, "t"), { maxBytes, timeoutMs: 60_000 })
            .then(
              () => undefined,
              (e: unknown) => e,
            );
          const used = diskUsage(outer);
          assert.ok(
            outcome instanceof LimitError || used <= 2 * maxBytes,
            `a download with maxBytes ${maxBytes} took ${used} bytes of the host's disk ` +
              `(${String(outcome ?? "no error")})`,
          );
        } finally {
          rmSync(outer, { recursive: true, force: true });
          await main.exec("rm -rf /tmp/many");
        }
      });

      test("readBytes refuses /dev/zero, a FIFO, a directory with a typed error; no reader left inside", async () => {
        await main.exec("rm -f /tmp/fifo && mkfifo /tmp/fifo");
        for (const path of ["/dev/zero", "/tmp/fifo", "/tmp"]) {
          const err = await main.files.readBytes(path, { timeoutMs: 10_000 }).then(
            () => undefined,
            (e: unknown) => e,
          );
          assert.ok(err instanceof InvalidInputError, `${path}: ${String(err)}`);
        }
        assert.deepEqual(await fileToolsInside(main), []);
        const outer = tempDir("msb-escape-fifo-");
        try {
          const dl = await main.files.download("/tmp/fifo", join(outer, "fifo"), { timeoutMs: 10_000 }).then(
            () => undefined,
            (e: unknown) => e,
          );
          assert.ok(dl instanceof InvalidInputError, String(dl));
          assert.deepEqual(readdirSync(outer), []);
        } finally {
          rmSync(outer, { recursive: true, force: true });
        }
      });

      test("a file that keeps growing, read with maxBytes, is a LimitError", async () => {
        await using sb = await Sandbox.create({ home, limits: { diskBytes: 64 * MiB } });
        ids.push(sb.id);
        await sb.exec(
          "head -c 4194304 /dev/zero > /tmp/grow; " +
            "nohup sh -c 'for i in $(seq 40); do head -c 1048576 /dev/zero >> /tmp/grow || exit; sleep 0.05; done' " +
            ">/dev/null 2>&1 &",
        );
        const err = await sb.files.readBytes("/tmp/grow", { maxBytes: 2 * MiB, timeoutMs: 10_000 }).then(
          () => undefined,
          (e: unknown) => e,
        );
        assert.ok(err instanceof LimitError, String(err));
      });

      test("a download with a tiny timeoutMs is a TimeoutError and leaves no tar inside", async () => {
        const r = await main.exec([
          "python3",
          "-c",
          "import os\nos.makedirs('/tmp/big', exist_ok=True)\n" +
            "for i in range(300): open('/tmp/big/f%d' % i, 'wb').write(bytes(1 << 20))",
        ]);
        assert.equal(r.exitCode, 0, r.stderr);
        const outer = tempDir("msb-escape-slow-");
        try {
          for (const timeoutMs of [100, 1]) {
            const err = await main.files.download("/tmp/big", join(outer, `t${timeoutMs}`), { timeoutMs }).then(
              () => undefined,
              (e: unknown) => e,
            );
            assert.ok(err instanceof TimeoutError, `timeoutMs ${timeoutMs}: ${String(err)}`);
            assert.deepEqual(await fileToolsInside(main), []);
          }
        } finally {
          rmSync(outer, { recursive: true, force: true });
          await main.exec("rm -rf /tmp/big");
        }
      });
    });

    test("disk: one 32 MiB budget for /dev/shm, /, /tmp, home, each and together; host disk untouched", async () => {
      await using sb = await Sandbox.create({ home, limits: { diskBytes: 32 * MiB } });
      ids.push(sb.id);
      const free = hostFree();
      for (const place of ["/dev/shm", "", "/tmp", "$HOME"]) await fillStops(sb, `${place}/fill`);
      const two = await sb.exec(
        "dd if=/dev/zero of=/tmp/a bs=1M count=20 2>/dev/null; dd if=/dev/zero of=/dev/shm/b bs=1M count=1024 2>&1; " +
          "echo sum=$(( $(stat -c %s /tmp/a) + $(stat -c %s /dev/shm/b) ))",
        { timeoutMs: 60_000 },
      );
      assert.match(two.stdout, /No space left on device/);
      const sum = Number(/sum=(\d+)/.exec(two.stdout)?.[1]);
      assert.ok(sum > 16 * MiB && sum < 33 * MiB, `two places together hold ${sum} bytes`);
      assert.ok(Math.abs(hostFree() - free) < 512 * MiB, "the host's free disk space moved");
    });

    test("disk: writes to /testbed stop at the same 32 MiB budget; the host's directory is untouched", async () => {
      const testbed = tempDir("msb-escape-testbed-");
      writeFileSync(join(testbed, "orig"), "x\n");
      try {
        await using sb = await Sandbox.create({ home, dir: testbed, limits: { diskBytes: 32 * MiB } });
        ids.push(sb.id);
        const free = hostFree();
        await sb.exec("dd if=/dev/zero of=/tmp/half bs=1M count=16");
        // 16 MiB already spent in /tmp: what /testbed can take is the rest of the same budget.
        await fillStops(sb, "/testbed/fill", 17 * MiB);
        assert.deepEqual(readdirSync(testbed), ["orig"]);
        assert.ok(Math.abs(hostFree() - free) < 512 * MiB, "the host's free disk space moved");
      } finally {
        rmSync(testbed, { recursive: true, force: true });
      }
    });

    // As root, the sandbox's user namespace is owned by its own host uid, so per-user kernel quotas are charged there;
    // without root the sandbox is the user itself, and spends the user's own quotas like any of its processes.
    test("per-user kernel quotas: inotify instances taken inside do not come out of host root's quota", {
      skip: mode === "userns" ? "an unprivileged sandbox is its user: it spends that user's quotas" : false,
    }, async () => {
      await main.exec(["rm", "-f", "/tmp/quota-held", "/tmp/quota-release"]);
      const hold = main.exec(["python3", "-c", INOTIFY_HOG], { timeoutMs: 20_000 });
      try {
        assert.ok(await until(() => main.files.exists("/tmp/quota-held")), "the hog did not start");
        // Checked at once, then released: the host's quota is held for a few milliseconds only.
        const host = spawnSync(HOST_PYTHON, ["-c", INOTIFY_ONE], { encoding: "utf8" });
        await main.files.write("/tmp/quota-release", "");
        assert.equal(
          host.stdout.trim(),
          "ok",
          `with a sandbox holding ${(await hold).stdout.trim()} inotify instances, ` +
            `the host user (uid ${process.getuid!()}) gets: ${host.stdout.trim()} ` +
            `(fs.inotify.max_user_instances ${readOr("/proc/sys/fs/inotify/max_user_instances").trim()})`,
        );
      } finally {
        await main.files.write("/tmp/quota-release", "");
        await hold;
      }
    });

    test("a sandbox sees none of another's processes, files, SysV shm, abstract sockets; only lo", async () => {
      await using a = await Sandbox.create({ home });
      await using b = await Sandbox.create({ home });
      ids.push(a.id, b.id);
      const tag = `msb${randomBytes(4).toString("hex")}`;
      const holder =
        "import ctypes, socket, time\n" +
        "assert ctypes.CDLL(None).shmget(0x5eed, 4096, 0o1666) >= 0\n" +
        `s = socket.socket(socket.AF_UNIX); s.bind("\\0${tag}"); s.listen()\n` +
        "open('/tmp/holder-ready', 'w').close()\ntime.sleep(60)\n";
      await a.files.write("/tmp/holder.py", holder);
      await a.exec(
        `for d in /tmp /dev/shm $HOME ''; do echo s > $d/${tag}; done; ` +
          `nohup sleep 61 >/dev/null 2>&1 & nohup python3 /tmp/holder.py >/dev/null 2>&1 &`,
      );
      assert.ok(await until(() => a.files.exists("/tmp/holder-ready")), "the holder did not start");
      const look =
        "import ctypes, json, os, socket\n" +
        "seen = {'shm': ctypes.CDLL(None).shmget(0x5eed, 0, 0) >= 0}\n" +
        "s = socket.socket(socket.AF_UNIX)\n" +
        `try:\n    s.connect("\\0${tag}"); seen['socket'] = True\nexcept OSError:\n    seen['socket'] = False\n` +
        "seen['files'] = [d for d in ('/tmp', '/dev/shm', os.environ['HOME'], '/') " +
        `if os.path.exists(os.path.join(d, '${tag}'))]\n` +
        "seen['procs'] = sorted(open('/proc/%s/cmdline' % p).read().replace('\\0', ' ').strip() " +
        "for p in os.listdir('/proc') if p.isdigit() and p != '1')\n" +
        "seen['ifaces'] = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n" +
        "print(json.dumps(seen))\n";
      const inA = JSON.parse((await a.exec(["python3", "-c", look])).stdout) as Record<string, unknown>;
      // The first sandbox does see its own: the probe works.
      assert.equal(inA.shm, true);
      assert.equal(inA.socket, true);
      assert.equal((inA.files as string[]).length, 4);
      const inB = JSON.parse((await b.exec(["python3", "-c", look])).stdout) as {
        shm: boolean;
        socket: boolean;
        files: string[];
        procs: string[];
        ifaces: string[];
      };
      assert.equal(inB.shm, false);
      assert.equal(inB.socket, false);
      assert.deepEqual(inB.files, []);
      assert.ok(!inB.procs.some((p) => p.includes("sleep 61") || p.includes("holder.py")), inB.procs.join("\n"));
      assert.deepEqual(inB.ifaces, ["lo"]);
    });

    test("network off: only lo inside; the host's TCP and abstract unix sockets are unreachable", async () => {
      const tag = `msb-escape-${randomBytes(4).toString("hex")}`;
      const tcp = createServer((c) => c.end("host"));
      await new Promise((r) => tcp.listen(0, "127.0.0.1", () => r(undefined)));
      // Node names an abstract socket with all 108 bytes of sun_path: a Python listener is the usual exact name.
      const abstract = spawn(HOST_PYTHON, ["-c", ABSTRACT_HOST, tag], { stdio: ["ignore", "pipe", "inherit"] });
      await new Promise((r) => abstract.stdout.once("data", r));
      const servers = [tcp, { close: () => abstract.kill("SIGKILL") }];
      try {
        const port = (tcp.address() as AddressInfo).port;
        const script =
          "import json, socket\nseen = {}\n" +
          `for name, family, addr in (("tcp", socket.AF_INET, ("127.0.0.1", ${port})), ` +
          `("abstract", socket.AF_UNIX, "\\0${tag}")):\n` +
          "    s = socket.socket(family); s.settimeout(3)\n" +
          "    try:\n        s.connect(addr); seen[name] = s.recv(10).decode()\n" +
          "    except OSError as e:\n        seen[name] = type(e).__name__\n" +
          "seen['ifaces'] = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n" +
          "print(json.dumps(seen))\n";
        const r = await main.exec(["python3", "-c", script], { timeoutMs: 20_000 });
        const seen = JSON.parse(r.stdout) as { tcp: string; abstract: string; ifaces: string[] };
        assert.deepEqual(seen.ifaces, ["lo"]);
        assert.notEqual(seen.tcp, "host", "a TCP service of the host answered");
        assert.notEqual(seen.abstract, "host", "an abstract unix socket of the host answered");
      } finally {
        for (const s of servers) s.close();
      }
    });

    test("network off: AF_VSOCK, which network namespaces do not confine, cannot be opened", async (t) => {
      const host = spawnSync(HOST_PYTHON, ["-c", "import socket; socket.socket(40, socket.SOCK_STREAM)"]);
      if (host.status !== 0) {
        t.skip("this host has no AF_VSOCK support: nothing to reach");
        return;
      }
      const r = await main.exec([
        "python3",
        "-c",
        "import errno, socket\ntry:\n    socket.socket(40, socket.SOCK_STREAM); print('created')\n" +
          "except OSError as e:\n    print(errno.errorcode[e.errno])",
      ]);
      assert.notEqual(
        r.stdout.trim(),
        "created",
        "socket(AF_VSOCK) works in a sandbox without network: vsock ignores network namespaces, " +
          "so vsock services of the hypervisor are reachable",
      );
    });

    registerNeighbourTests(target, ids);
    registerLimitTests(target, ids);
  });
}

/** Memory and process limits: enforced and reported as such, or reported as not enforced. */
export function registerLimitTests(target: EscapeTarget, ids: string[] = []): void {
  const { home } = target;
  test("limits a caller leaves undefined (as the server and the CLI pass them) still get the defaults", async () => {
    const opts = { home, limits: { memoryBytes: undefined, pids: undefined, diskBytes: undefined } };
    await using sb = await Sandbox.create(opts);
    ids.push(sb.id);
    assert.equal(sb.limits.memoryBytes, DEFAULT_MEMORY_BYTES);
    assert.equal(sb.limits.pids, DEFAULT_PIDS);
    const df = await sb.exec(["df", "-B1", "--output=size", "/tmp"]);
    // The writable places' tmpfs: the disk budget, an eighth short of the memory limit where that is enforced.
    const scratch = scratchBytes(
      { memoryBytes: DEFAULT_MEMORY_BYTES, diskBytes: DEFAULT_DISK_BYTES },
      target.limitsEnforced,
    );
    assert.equal(Number(df.stdout.trim().split("\n").pop()), scratch);
    const state = JSON.parse(readFileSync(sb.paths.state, "utf8")) as { cgroups: { memory?: string; pids?: string } };
    if (target.limitsEnforced) {
      assert.equal(readOr(join(state.cgroups.pids ?? "", "pids.max")).trim(), String(DEFAULT_PIDS));
      assert.equal(Number(readOr(join(state.cgroups.memory ?? "", "memory.limit_in_bytes"))), DEFAULT_MEMORY_BYTES);
    }
  });

  if (!target.limitsEnforced) {
    test("without cgroups the memory and process limits are reported as not enforced", async () => {
      await using sb = await Sandbox.create({ home, limits: { pids: 64, memoryBytes: 128 * MiB } });
      ids.push(sb.id);
      const limits = sb.security().limits;
      assert.equal(limits.memory, false);
      assert.equal(limits.pids, false);
      assert.ok(
        sb.notices.some((n) => /memory.*process-count limits are not enforced/.test(n)),
        JSON.stringify(sb.notices),
      );
    });
    return;
  }
  test("a fork bomb is stopped by the process limit (limit = pids); the sandbox stays usable", async () => {
    await using sb = await Sandbox.create({ home, limits: { pids: 64 } });
    ids.push(sb.id);
    assert.equal(sb.security().limits.pids, true);
    const r = await sb.exec("f() { f | f & }; f; sleep 1; echo survived", {
      timeoutMs: 20_000,
      outputLimitBytes: 4096,
    });
    assert.equal(r.limit, "pids", r.stderr.slice(0, 300));
    assert.equal((await sb.exec(["echo", "usable"])).stdout, "usable\n");
  });

  test("a memory hog is stopped by the memory limit (limit = memory)", async () => {
    await using sb = await Sandbox.create({ home, limits: { memoryBytes: 128 * MiB } });
    ids.push(sb.id);
    assert.equal(sb.security().limits.memory, true);
    const r = await sb.exec(["python3", "-c", "x = bytearray(600 * 1024 * 1024); print('allocated')"], {
      timeoutMs: 60_000,
    });
    assert.equal(r.limit, "memory", r.stderr.slice(0, 300));
    assert.equal(r.exitCode, 137);
    assert.ok(!r.stdout.includes("allocated"));
  });
}

/** The same user's processes outside a sandbox do not count against its process limit (it is no RLIMIT_NPROC). */
export function registerOutsideProcessesTest(home: string): void {
  test("a process limit of 20 is not eaten by 50 processes the same user runs outside", async () => {
    const outside = Array.from({ length: 50 }, () => spawn("sleep", ["60"], { stdio: "ignore" }));
    try {
      await using sb = await Sandbox.create({ home, limits: { pids: 20 } });
      const r = await sb.exec("for i in $(seq 10); do sleep 0.2 & done; wait; echo all-ran", { timeoutMs: 20_000 });
      assert.equal(r.stdout, "all-ran\n", r.stderr);
      assert.equal(r.limit, undefined);
      const bomb = await sb.exec("f() { f | f & }; f; sleep 1", { timeoutMs: 20_000, outputLimitBytes: 4096 });
      assert.equal(bomb.limit, "pids");
    } finally {
      for (const c of outside) c.kill("SIGKILL");
    }
  });
}
