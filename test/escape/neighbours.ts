/**
 * Attacks on a neighbour and on the host through what sandboxes share: the host's ids and per-user kernel quotas,
 * read-only trees (locks, inotify), the CPU, memory (OOM scores, tmpfs pages), abstract unix sockets with the
 * network on. Part of the escape suite (attacks.ts), as root and as an unprivileged user.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { abstractSocketsScoped, ID_LOCKS_DIR } from "../../src/sandbox/host.js";
import { cgroupSupport, cpuUsageNs, freeze, type SandboxCgroups, thaw } from "../../src/sandbox/limits.js";
import { Sandbox } from "../../src/sandbox/sandbox.js";
import type { EscapeTarget } from "./attacks.js";
import { ABSTRACT_HOST, ABSTRACT_PROBE, BUSY, QUOTA_PROBE, WATCH_PROBE } from "./neighbour-probes.js";

const HOST_PYTHON = "/usr/bin/python3";

async function until(check: () => boolean | Promise<boolean>, tries = 400, ms = 25): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return true;
    await sleep(ms);
  }
  return false;
}

function stateOf(sb: Sandbox): { holderPid: number; cgroups: SandboxCgroups } {
  return JSON.parse(readFileSync(sb.paths.state, "utf8")) as { holderPid: number; cgroups: SandboxCgroups };
}

/** `flock -n PATH true` on the host: "free" or "held" (a conflict is its exit code 75; anything else, an error). */
function hostLock(path: string): string {
  const r = spawnSync("flock", ["-n", "-E", "75", path, "true"], { encoding: "utf8" });
  if (r.status !== 0 && r.status !== 75) throw new Error(`flock ${path}: ${r.status} ${r.stderr}`);
  return r.status === 0 ? "free" : "held";
}

async function execTrueMs(sb: Sandbox): Promise<number> {
  const t0 = performance.now();
  assert.equal((await sb.exec("true")).exitCode, 0);
  return performance.now() - t0;
}

const median = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;

/**
 * `exec true` in `sb` while the processes of the freezer group `spinners` are frozen, then while they run, in turns
 * a few times: each pair sees the same load from the rest of the host. Medians of each (one slow run says nothing).
 * Every command comes 100 ms after the last, its helper started ahead in both cases.
 */
async function execTrueBesides(sb: Sandbox, spinners: string, rounds = 7): Promise<{ idle: number; busy: number }> {
  const idle: number[] = [];
  const busy: number[] = [];
  for (let i = 0; i < rounds; i++) {
    await freeze(spinners);
    try {
      await sleep(100);
      idle.push(await execTrueMs(sb));
    } finally {
      thaw(spinners);
    }
    await sleep(100);
    busy.push(await execTrueMs(sb));
  }
  return { idle: median(idle), busy: median(busy) };
}

function statusUid(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").match(/^Uid:\s+(\d+)/m);
  return Number(line?.[1]);
}

export function registerNeighbourTests(target: EscapeTarget, ids: string[]): void {
  const { home, mode } = target;
  const root = mode === "root";
  // A toolchain-like host tree (read-only inside at its own path, like an interpreter installation).
  const toolchain = mkdtempSync(join(tmpdir(), "msb-escape-toolchain-"));
  chmodSync(toolchain, 0o755);
  writeFileSync(join(toolchain, "python3.11"), "#!/bin/sh\n", { mode: 0o755 });
  // Files only a neighbour, only the host, only the sandbox itself will open (see the inotify attack).
  for (const tag of ["by-neighbour", "by-host", "by-itself"]) writeFileSync(join(toolchain, tag), tag, { mode: 0o644 });
  let a: Sandbox;
  let b: Sandbox;

  describe("neighbours and the host", () => {
    before(async () => {
      [a, b] = await Promise.all([
        Sandbox.create({ home, toolchains: [toolchain] }),
        Sandbox.create({ home, toolchains: [toolchain] }),
      ]);
      ids.push(a.id, b.id);
    });
    after(async () => {
      await Promise.all([a?.close(), b?.close()]);
      rmSync(toolchain, { recursive: true, force: true });
    });

    test("one sandbox, one id range: neighbours and a fork are distinct host ids; a range is freed with its holder", {
      skip: root ? false : "an unprivileged sandbox is its user: there is one id to map",
    }, async () => {
      const [child] = await a.fork(1);
      ids.push(child!.id);
      try {
        const uids = [a, b, child!].map((sb) => sb.hostIds.uid);
        assert.equal(new Set(uids).size, 3, `host uids ${uids}`);
        for (const sb of [a, b, child!]) {
          const pool = target.idPool!;
          const slot = (sb.hostIds.uid - pool.base) / pool.size;
          assert.ok(Number.isInteger(slot) && slot >= 0 && slot < pool.slots, `${sb.hostIds.uid} outside the pool`);
          assert.equal(statusUid(sb.pid1), sb.hostIds.uid, "pid 1 runs as the sandbox's own range");
          // What the sandbox writes belongs to its range on the host too (its scratch, read through its holder).
          await sb.exec("echo mine > /tmp/owned-by");
          const { holderPid } = stateOf(sb);
          // Its current generation of writable places (g0, or the next one for a fork, which was restored).
          const scratch = `/proc/${holderPid}/root${sb.paths.scratch}`;
          const gen = readdirSync(scratch).filter(
            (d) => /^g\d+$/.test(d) && existsSync(`${scratch}/${d}/tmp/owned-by`),
          );
          const st = spawnSync("stat", ["-c", "%u", `${scratch}/${gen[0]}/tmp/owned-by`], { encoding: "utf8" });
          assert.equal(Number(st.stdout.trim()), sb.hostIds.uid, st.stderr);
          assert.equal(hostLock(join(ID_LOCKS_DIR, String(sb.hostIds.uid))), "held", "a live sandbox holds its range");
        }
      } finally {
        await child!.close();
      }
      assert.equal(
        hostLock(join(ID_LOCKS_DIR, String(child!.hostIds.uid))),
        "free",
        "a closed sandbox's range is free",
      );
      // SIGKILL of the holder (the kernel drops its lock): the range is free again, whoever kills it.
      const doomed = await Sandbox.create({ home });
      ids.push(doomed.id);
      const { holderPid } = stateOf(doomed);
      process.kill(holderPid, "SIGKILL");
      assert.ok(await until(() => hostLock(join(ID_LOCKS_DIR, String(doomed.hostIds.uid))) === "free"));
      await doomed.close();
    });

    test("per-user quotas are each sandbox's: one taking every inotify, mqueue and pipe page spares a neighbour", {
      skip: root ? false : "an unprivileged sandbox is its user: it spends that user's quotas",
    }, async () => {
      await a.files.write("/tmp/quota.py", QUOTA_PROBE);
      await b.files.write("/tmp/quota.py", QUOTA_PROBE);
      const hog = a.exec(["python3", "/tmp/quota.py", "hog", "20"], { timeoutMs: 40_000 });
      try {
        assert.ok(await until(() => a.files.exists("/tmp/quota-held")), "the hog did not start");
        const own = JSON.parse((await a.exec(["python3", "/tmp/quota.py", "probe"])).stdout);
        const neighbour = JSON.parse((await b.exec(["python3", "/tmp/quota.py", "probe"])).stdout);
        // The probe works: in the hog's own sandbox, everything is spent.
        assert.deepEqual(own.inotify, "EMFILE", JSON.stringify(own));
        assert.deepEqual(own.mqueue, "EMFILE", JSON.stringify(own));
        assert.ok(own.pipe_size < 65536, `a spent user's pipes are small: ${own.pipe_size}`);
        assert.deepEqual(neighbour, { inotify: "ok", mqueue: "ok", pipe_size: 65536 });
      } finally {
        await a.files.write("/tmp/quota-release", "");
        await hog;
      }
    });

    test("flock on /etc/passwd, /usr and a toolchain's file blocks neither a neighbour nor the host", async () => {
      const files = ["/etc/passwd", "/usr/bin/env", join(toolchain, "python3.11")];
      const holdAll = files.map((f) => `flock ${f} -c 'sleep 30' &`).join(" ");
      await a.exec(`${holdAll} sleep 0.3; echo held`);
      try {
        assert.ok(
          await until(async () => (await a.exec(`flock -n -E 75 ${files[0]} true; echo $?`)).stdout.trim() === "75"),
          "the locks are held inside",
        );
        const inB = await b.exec(files.map((f) => `flock -n -E 75 ${f} true; echo $?`).join("; "));
        assert.deepEqual(inB.stdout.trim().split("\n"), ["0", "0", "0"], `a neighbour: ${inB.stderr}`);
        assert.deepEqual(files.map(hostLock), ["free", "free", "free"], "the host");
        // And the other way round: a lock the host holds is not the sandbox's.
        const hold = "import fcntl, sys, time\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_EX)\ntime.sleep(30)";
        const host = spawn(HOST_PYTHON, ["-c", hold, files[0]!], { stdio: "ignore" });
        try {
          assert.ok(await until(() => hostLock(files[0]!) === "held"));
          assert.equal((await b.exec(`flock -n -E 75 ${files[0]} true; echo $?`)).stdout.trim(), "0");
        } finally {
          host.kill("SIGKILL");
        }
      } finally {
        await a.exec("pkill -f 'sleep 30'; true");
      }
    });

    test("inotify on /etc, /usr/bin, a toolchain sees the sandbox's own opens, no neighbour's or host's", async () => {
      await a.files.write("/tmp/watch.py", WATCH_PROBE);
      await a.exec(["rm", "-f", "/tmp/watching", "/tmp/watch-stop"]);
      const dirs = ["/etc", "/usr/bin", toolchain];
      const watch = a.exec(["python3", "/tmp/watch.py", JSON.stringify(dirs)], { timeoutMs: 30_000 });
      try {
        assert.ok(await until(() => a.files.exists("/tmp/watching")), "the watcher did not start");
        const tag = (name: string): string => join(toolchain, name);
        await b.exec(`cat ${tag("by-neighbour")} /etc/hostname /usr/bin/true > /dev/null`);
        spawnSync("sh", ["-c", `cat ${tag("by-host")} /etc/hostname /usr/bin/true > /dev/null`]);
        await sleep(200);
        await a.exec(`cat ${tag("by-itself")} > /dev/null`);
        await sleep(200);
      } finally {
        await a.files.write("/tmp/watch-stop", "");
      }
      const seen = JSON.parse((await watch).stdout) as string[];
      assert.ok(seen.includes("by-itself"), `the watch works: ${seen}`);
      assert.ok(!seen.includes("by-neighbour"), `a neighbour's open was seen: ${seen}`);
      assert.ok(!seen.includes("by-host"), `the host's open was seen: ${seen}`);
      assert.ok(!seen.includes("hostname"), `someone else's open of /etc/hostname was seen: ${seen}`);
    });

    test("CPU: 64 spinners one sandbox's exec leaves behind take no more than a fair share from a neighbour", {
      skip: cgroupSupport().cpu && cgroupSupport().cpuacct ? false : "no cgroup cpu controller for this user",
    }, async () => {
      // Each spinner in a session of its own: the kernel's per-session autogroups are no defence.
      await a.exec("for i in $(seq 64); do setsid sh -c 'while :; do :; done' >/dev/null 2>&1 & done");
      try {
        await sleep(300);
        // What a finished exec leaves running stays the sandbox's: counted in its processes (and capped by them).
        const pids = stateOf(a).cgroups.pids;
        if (pids) assert.ok(Number(readFileSync(join(pids, "pids.current"), "utf8")) >= 64, "the spinners count");
        const [ua0, ub0] = [cpuUsageNs(stateOf(a).cgroups)!, cpuUsageNs(stateOf(b).cgroups)!];
        const busy = await b.exec(["python3", "-c", BUSY, "3"], { timeoutMs: 60_000 });
        const [ua1, ub1] = [cpuUsageNs(stateOf(a).cgroups)!, cpuUsageNs(stateOf(b).cgroups)!];
        const spinners = (ua1 - ua0) / 1e9;
        const neighbour = (ub1 - ub0) / 1e9;
        // A fair share: the neighbour's one busy thread gets about what 64 spinners get together (one CPU each on
        // two cores, less whatever else the host runs, which both lose alike); without shares it gets 1/65 of it.
        assert.ok(
          neighbour >= 0.3 * spinners,
          `the neighbour got ${neighbour.toFixed(2)} CPU s while the spinners got ${spinners.toFixed(2)} ` +
            `(its own count: ${busy.stdout.trim()} s)`,
        );
        // A command next door starts about as fast with the spinners as without them (about twice as slow, one
        // CPU of two being theirs): without a share of its own it waits behind 64 of them, some 30 times slower.
        // Measured in turns with the spinners frozen, so that the rest of the host's load weighs on both alike.
        const freezer = stateOf(a).cgroups.freezer;
        if (freezer) {
          const { idle, busy: crowded } = await execTrueBesides(b, freezer);
          const said = `exec true next door: ${idle.toFixed(0)} ms, ${crowded.toFixed(0)} ms with 64 spinners running`;
          process.stderr.write(`# ${said}\n`);
          assert.ok(crowded <= 5 * idle + 50, said);
        }
      } finally {
        await a.exec("pkill -f 'while :; do :; done'; true");
      }
    });

    test("OOM: sandbox processes score 1000; pid 1's score is out of reach; no command goes below pid 1", async () => {
      const floor = spawnSync(join(import.meta.dirname, "..", "..", "native", "msb-helper"), ["check"], {
        encoding: "utf8",
      }).stdout.includes("oom_floor yes");
      const r = await a.exec(
        "cat /proc/self/oom_score_adj; echo 1000 > /proc/1/oom_score_adj 2>/dev/null && echo raised || echo refused; " +
          "sh -c 'echo 0 > /proc/$$/oom_score_adj 2>/dev/null && cat /proc/$$/oom_score_adj || echo refused'",
      );
      const [own, pid1, lowered] = r.stdout.trim().split("\n");
      assert.equal(own, "1000");
      assert.equal(pid1, "refused", "pid 1's score is not the sandbox's to change");
      const pid1Score = Number(readFileSync(`/proc/${a.pid1}/oom_score_adj`, "utf8"));
      if (floor) {
        assert.equal(lowered, "refused", "with CAP_SYS_RESOURCE, 1000 is every sandbox process's floor");
        assert.equal(pid1Score, 1000);
      } else {
        // No floor here (root lacks CAP_SYS_RESOURCE): pid 1 keeps the caller's score, the lowest a command can reach.
        assert.ok(Number(lowered) >= pid1Score, `a command lowered itself to ${lowered}, below pid 1's ${pid1Score}`);
      }
    });

    test("memory: pages of /dev/shm, /tmp and / count in the sandbox's memory group, a fork's copies in the fork's", {
      skip: target.limitsEnforced ? false : "memory is not limited for this user",
    }, async () => {
      await using sb = await Sandbox.create({ home, limits: { memoryBytes: 256 * 1024 ** 2 } });
      ids.push(sb.id);
      const usage = (s: Sandbox): number =>
        Number(readFileSync(join(stateOf(s).cgroups.memory!, "memory.usage_in_bytes"), "utf8")) / 1024 ** 2;
      const before = usage(sb);
      for (const dir of ["/dev/shm", "/tmp", "/"])
        await sb.exec(`head -c 33554432 /dev/urandom > ${dir}/fill-${dir.replace(/\//g, "")}`);
      assert.ok(usage(sb) - before >= 90, `96 MiB written, ${(usage(sb) - before).toFixed(0)} MiB charged`);
      const [child] = await sb.fork(1);
      ids.push(child!.id);
      try {
        assert.ok(usage(child!) >= 90, `the fork's 96 MiB of copies: ${usage(child!).toFixed(0)} MiB charged`);
      } finally {
        await child!.close();
      }
      // Filling them up to the memory limit ends in "No space left on device" (they stop short of it), not in the
      // out-of-memory killer (the pages are no process's: it would kill process after process, pid 1 last).
      const over = await sb.exec("head -c 268435456 /dev/zero > /dev/shm/over", { timeoutMs: 60_000 });
      assert.match(over.stderr, /No space left on device/);
      assert.equal(over.limit, undefined, "no process was killed");
      assert.equal((await sb.exec("echo alive")).stdout, "alive\n", "the sandbox, pid 1 included, lives on");
    });

    test("network: true: a host process's abstract unix socket is unreachable; the sandbox's own sockets work", {
      skip: abstractSocketsScoped() ? false : "this kernel has no Landlock scope for abstract unix sockets",
    }, async () => {
      const name = `msb-escape-${randomBytes(4).toString("hex")}`;
      const host = spawn(HOST_PYTHON, ["-c", ABSTRACT_HOST, name], { stdio: ["ignore", "pipe", "inherit"] });
      try {
        await new Promise((r) => host.stdout.once("data", r));
        // The host's own processes reach it (the probe works)...
        const fromHost = spawnSync(HOST_PYTHON, ["-c", ABSTRACT_PROBE, name], { encoding: "utf8" });
        assert.equal(JSON.parse(fromHost.stdout).host, "host");
        await using net = await Sandbox.create({ home, network: true });
        ids.push(net.id);
        const r = await net.exec(["python3", "-c", ABSTRACT_PROBE, name], { timeoutMs: 20_000 });
        const seen = JSON.parse(r.stdout) as { host: string; own: string };
        assert.equal(seen.own, "own");
        assert.equal(seen.host, "PermissionError", "a sandbox with the host's network reached a host abstract socket");
      } finally {
        host.kill("SIGKILL");
      }
    });
  });
}
