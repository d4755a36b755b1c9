import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CLI, tempDir, tempHome } from "./helpers.js";

const home = tempHome();
const cli = (...args: string[]) =>
  spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8", timeout: 60_000 });

test("exec streams output and exits with the command's status", () => {
  const dir = tempDir();
  writeFileSync(join(dir, "f.txt"), "data\n");
  const r = cli(
    "exec",
    "--dir",
    dir,
    "--env",
    "X=1",
    "--",
    "sh",
    "-c",
    "cat f.txt; echo $X; echo oops >&2; echo new > f.txt; exit 5",
  );
  assert.equal(r.status, 5);
  assert.equal(r.stdout, "data\n1\n");
  assert.equal(r.stderr, "oops\n");
  assert.equal(readFileSync(join(dir, "f.txt"), "utf8"), "data\n");
});

test("exec --timeout exits 124; limits are applied; --cwd and --network are honoured", () => {
  const t = cli("exec", "--timeout", "0.5", "--", "sleep", "30");
  assert.equal(t.status, 124);
  assert.match(t.stderr, /timed out/);
  const m = cli("exec", "--memory", "64M", "--", "python3", "-c", "bytearray(400*1024*1024)");
  assert.notEqual(m.status, 0);
  const c = cli("exec", "--cwd", "/tmp", "--", "pwd");
  assert.equal(c.stdout, "/tmp\n");
  const n = cli("exec", "--network", "--", "sh", "-c", "tail -n +3 /proc/net/dev | wc -l");
  const isolated = cli("exec", "--", "sh", "-c", "tail -n +3 /proc/net/dev | wc -l");
  assert.equal(isolated.stdout, "1\n");
  assert.ok(Number(n.stdout.trim()) > 1, n.stdout);
});

test("bad input gets a clear one-line error", () => {
  const r = cli("exec", "--dir", "/nonexistent/dir", "--", "true");
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^minisandbox: dir \/nonexistent\/dir: no such directory\n$/);
  const s = cli("exec", "--memory", "lots", "--", "true");
  assert.match(s.stderr, /invalid size/);
});

test("doctor reports each check and succeeds here; --json is machine-readable", () => {
  const r = cli("doctor", "--json");
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout) as { ok: boolean; checks: { name: string; status: string }[] };
  assert.equal(report.ok, true);
  for (const name of ["bwrap", "user namespaces", "overlayfs", "cgroups", "sandbox"]) {
    assert.ok(
      report.checks.some((c) => c.name === name),
      name,
    );
  }
});

test("shell runs an interactive shell on the caller's terminal", () => {
  const r = spawnSync(process.execPath, [CLI, "--home", home, "shell"], {
    input: "echo inside $HOSTNAME\nexit 3\n",
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(r.status, 3);
  assert.match(r.stdout, /inside sb-/);
});

/** Drives `minisandbox shell` on a pseudo-terminal of 40x100 (Python's pty): waits for each marker, then types. */
const ON_A_TERMINAL = String.raw`
import os, pty, select, sys, termios, time, fcntl, struct
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
before = termios.tcgetattr(fd)
out = b""
def until(marker):
    global out
    end = time.time() + 60
    while marker not in out and time.time() < end:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return
until(b"# ")
os.write(fd, b"tty; stty size; echo RE''ADY\n")  # the echo of the line is not the marker
until(b"READY\r\n")
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
time.sleep(0.5)
os.write(fd, b"stty size; exit 4\n")
until(b"\nexit\r\n")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.stdout.write(f"\nEXIT {os.waitstatus_to_exitcode(status)} RESTORED {termios.tcgetattr(fd) == before}\n")
`;

test("shell on a terminal: a terminal of the sandbox's own, its size followed, the caller's put back", () => {
  const r = spawnSync("python3", ["-c", ON_A_TERMINAL, process.execPath, CLI, "--home", home, "shell"], {
    encoding: "utf8",
    timeout: 90_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^\/dev\/pts\/\d+\r$/m, "tty names the sandbox's own terminal");
  assert.match(r.stdout, /^40 100\r$/m, `with the caller's size:\n${r.stdout}`);
  assert.match(r.stdout, /^50 120\r$/m, "and its changes");
  assert.match(r.stdout, /\nEXIT 4 RESTORED True\n$/, "the shell's status; the caller's terminal as it was");
});

test("unprivileged users get sandboxes through user namespaces", () => {
  const h = tempDir();
  spawnSync("chmod", ["777", h]);
  const dir = tempDir();
  spawnSync("chmod", ["755", dir]);
  writeFileSync(join(dir, "f"), "x\n");
  spawnSync("chown", ["-R", "65534:65534", dir]);
  const r = spawnSync(
    "setpriv",
    [
      "--reuid=65534",
      "--regid=65534",
      "--clear-groups",
      process.execPath,
      CLI,
      "--home",
      join(h, "home"),
      "exec",
      "--dir",
      dir,
      "--",
      "sh",
      "-c",
      "id -u; cat f; echo y >> f; cat f; ps -e --no-headers | wc -l",
    ],
    { encoding: "utf8", timeout: 30_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  const [uid, ...rest] = r.stdout.trim().split("\n");
  assert.equal(uid, "0");
  assert.deepEqual(rest.slice(0, 3), ["x", "x", "y"]);
  assert.equal(readFileSync(join(dir, "f"), "utf8"), "x\n");
});

test("the seccomp profile is on unless --no-seccomp, and turning it off is said", () => {
  const on = cli("exec", "--", "grep", "^Seccomp:", "/proc/self/status");
  assert.equal(on.status, 0, on.stderr);
  assert.match(on.stdout, /^Seccomp:\s+2$/m);
  assert.equal(on.stderr, "");
  const off = cli("exec", "--no-seccomp", "--", "grep", "^Seccomp:", "/proc/self/status");
  assert.equal(off.status, 0, off.stderr);
  assert.match(off.stdout, /^Seccomp:\s+0$/m);
  assert.match(off.stderr, /seccomp is OFF for this sandbox/);
});
