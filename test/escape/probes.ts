/**
 * Python programs run inside sandboxes by the escape suite (/usr/bin/python3 is there). Each prints one JSON line.
 * Raw syscalls go through ctypes, so that no libc wrapper, fallback or other binary stands between the attack and
 * the kernel: what is recorded is the kernel's (or the seccomp filter's) own answer.
 */

/**
 * Every refused syscall, each tried in a forked child (a call that wrongly succeeded cannot disturb the others,
 * and a SIGSYS kill is recorded as such). argv: the host root disk's major and minor device numbers.
 * Output: { name: { ret, errno } | { signal } }.
 */
export const SYSCALL_PROBE = String.raw`
import ctypes, errno, json, mmap, os, signal, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
MAJOR, MINOR = int(sys.argv[1]), int(sys.argv[2])
AT_FDCWD = -100

def arg(a):
    if a is None or isinstance(a, (bytes, ctypes.Array, ctypes.c_void_p)):
        return a
    return ctypes.c_long(a)

def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    return r, (errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno())) if r == -1 else None)

def isolated(fn):
    """Run fn in a child; its (ret, errno) comes back through a pipe, a fatal signal is reported instead."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            ret, err = fn()
        except Exception as e:
            ret, err = None, repr(e)
        os.write(wr, json.dumps({"ret": ret, "errno": err}).encode())
        os._exit(0)
    os.close(wr)
    data = b""
    while True:
        chunk = os.read(rd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(rd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return json.loads(data) if data else {"error": "no answer"}

def raw_clone(flags):
    r, err = sc(56, flags | signal.SIGCHLD, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    return r, err

def block_device():
    path = "/tmp/escape-blk"
    r, err = sc(133, path.encode(), 0o60600, os.makedev(MAJOR, MINOR))
    if r == 0:
        try:
            with open(path, "rb") as f:
                return len(f.read(512)), "read host disk"
        except OSError as e:
            return -1, "created but unreadable: " + errno.errorcode.get(e.errno, str(e.errno))
    return r, err

def char_mem():
    r, err = sc(133, b"/tmp/escape-mem", 0o20600, os.makedev(1, 1))
    if r == 0:
        try:
            with open("/tmp/escape-mem", "rb") as f:
                return len(f.read(16)), "read /dev/mem"
        except OSError as e:
            return -1, "created but unreadable: " + errno.errorcode.get(e.errno, str(e.errno))
    return r, err

def shocker():
    # open_by_handle_at on inode 2 (the root directory of an ext4 filesystem), as in the "shocker" exploit.
    handle = struct.pack("IiII", 8, 1, 2, 0)
    buf = ctypes.create_string_buffer(handle, len(handle))
    fd = os.open("/etc", os.O_RDONLY)
    return sc(304, fd, buf, os.O_RDONLY)

def name_to_handle():
    buf = ctypes.create_string_buffer(struct.pack("Ii", 128, 0) + b"\0" * 128)
    mount_id = ctypes.c_int(0)
    return sc(303, AT_FDCWD, b"/etc/passwd", buf, ctypes.addressof(mount_id), 0)

def setns_self():
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    return sc(308, fd, 0)

def open_pid1_ns():
    try:
        os.open("/proc/1/ns/mnt", os.O_RDONLY)
        return 0, None
    except OSError as e:
        return -1, errno.errorcode.get(e.errno, str(e.errno))

def pidfd_getfd():
    pidfd, err = sc(434, 1, 0)
    if pidfd < 0:
        return pidfd, "pidfd_open: " + str(err)
    return sc(438, pidfd, 0, 0)

def pidfd_kill_init():
    pidfd, err = sc(434, 1, 0)
    if pidfd < 0:
        return pidfd, "pidfd_open: " + str(err)
    return sc(424, pidfd, signal.SIGKILL, 0, 0)

def process_vm_readv():
    child = os.fork()
    if child == 0:
        signal.pause()
        os._exit(0)
    local = ctypes.create_string_buffer(64)
    remote = ctypes.create_string_buffer(64)
    liov = struct.pack("QQ", ctypes.addressof(local), 64)
    riov = struct.pack("QQ", ctypes.addressof(remote), 64)
    lbuf = ctypes.create_string_buffer(liov, len(liov))
    rbuf = ctypes.create_string_buffer(riov, len(riov))
    try:
        return sc(310, child, lbuf, 1, rbuf, 1, 0)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)

def suspend_seccomp():
    # PTRACE_SEIZE with PTRACE_O_SUSPEND_SECCOMP: a tracer that could lift its tracee's filter.
    child = os.fork()
    if child == 0:
        signal.pause()
        os._exit(0)
    try:
        return sc(101, 0x4206, child, 0, 1 << 21)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)

def chroot_escape():
    # The classic chroot breakout: chroot into a subdirectory, walk ".." past it, chroot there.
    before = os.stat("/")
    os.makedirs("/tmp/jail", exist_ok=True)
    os.chroot("/tmp/jail")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    after = os.stat("/")
    same = (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    return (0 if same else 1), ",".join(sorted(os.listdir("/")))

def personality():
    r, err = sc(135, 0x0400000)
    now, _ = sc(135, 0xFFFFFFFF)
    return r, "%s (now 0x%x)" % (err, now)

def x32():
    return sc(0x40000000 | 39)

def int80():
    # mov eax, 20 (getpid in the 32-bit table); int 0x80; ret
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    return fn(), "int 0x80 executed"

def adjtimex_set():
    # struct timex with modes = ADJ_OFFSET: setting the clock needs CAP_SYS_TIME on the host.
    buf = ctypes.create_string_buffer(struct.pack("I", 1) + b"\0" * 204)
    return sc(159, buf)

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
probes = {
    "mount": lambda: sc(165, b"none", b"/tmp", b"tmpfs", 0, None),
    "mount_cgroup": lambda: sc(165, b"cgroup", b"/tmp", b"cgroup", 0, b"memory"),
    "umount2": lambda: sc(166, b"/etc/shadow", 2),
    "pivot_root": lambda: sc(155, b"/tmp", b"/tmp"),
    "open_tree": lambda: sc(428, AT_FDCWD, b"/", 1),
    "move_mount": lambda: sc(429, AT_FDCWD, b"/tmp", AT_FDCWD, b"/mnt", 0),
    "fsopen": lambda: sc(430, b"tmpfs", 0),
    "fsmount": lambda: sc(432, 3, 0, 0),
    "fspick": lambda: sc(433, AT_FDCWD, b"/", 0),
    "mount_setattr": lambda: sc(442, AT_FDCWD, b"/", 0, None, 0),
    "unshare_user": lambda: sc(272, CLONE_NEWUSER),
    "unshare_mnt": lambda: sc(272, CLONE_NEWNS),
    "clone_newuser": lambda: raw_clone(CLONE_NEWUSER),
    "clone_newns": lambda: raw_clone(CLONE_NEWNS),
    "clone_newpid_newnet": lambda: raw_clone(CLONE_NEWPID | CLONE_NEWNET),
    "clone3": lambda: sc(435, 0, 0),
    "setns": setns_self,
    "open_pid1_ns": open_pid1_ns,
    "ptrace_attach_1": lambda: sc(101, 16, 1, 0, 0),
    "ptrace_seize_1": lambda: sc(101, 0x4206, 1, 0, 0),
    "ptrace_suspend_seccomp": suspend_seccomp,
    "chroot_escape": chroot_escape,
    "pidfd_getfd_1": pidfd_getfd,
    "pidfd_kill_1": pidfd_kill_init,
    "process_vm_readv": process_vm_readv,
    "process_vm_writev": lambda: sc(311, 1, 0, 0, 0, 0, 0),
    "add_key": lambda: sc(248, b"user", b"escape", b"secret", 6, -3),
    "keyctl": lambda: sc(250, 0, -3, 1),
    "request_key": lambda: sc(249, b"user", b"escape", None, 0),
    "bpf": lambda: sc(321, 5, 0, 0),
    "perf_event_open": lambda: sc(298, 0, 0, -1, -1, 0),
    "userfaultfd": lambda: sc(323, 0),
    "io_uring_setup": lambda: sc(425, 1, 0),
    "kexec_load": lambda: sc(246, 0, 0, 0, 0),
    "kexec_file_load": lambda: sc(320, -1, -1, 0, b"", 0),
    "init_module": lambda: sc(175, 0, 0, b""),
    "finit_module": lambda: sc(313, 0, b"", 0),
    "delete_module": lambda: sc(176, b"ext4", 0),
    "iopl": lambda: sc(172, 3),
    "ioperm": lambda: sc(173, 0x80, 1, 1),
    "open_by_handle_at": shocker,
    "name_to_handle_at": name_to_handle,
    "mknod_block_root_disk": block_device,
    "mknod_dev_mem": char_mem,
    "personality_read_implies_exec": personality,
    "syslog": lambda: sc(103, 3, 0, 0),
    "reboot": lambda: sc(169, 0xfee1dead, 672274793, 0x4321fedc, 0),
    "swapon": lambda: sc(167, b"/tmp", 0),
    "acct": lambda: sc(163, b"/tmp/acct"),
    "settimeofday": lambda: sc(164, 0, 0),
    "clock_settime": lambda: sc(227, 0, 0),
    "adjtimex_set": adjtimex_set,
    "sethostname": lambda: sc(170, b"escaped", 7),
    "x32_getpid": x32,
    "int80_getpid": int80,
}
print(json.dumps({name: isolated(fn) for name, fn in probes.items()}))
`;

/**
 * The descriptors a command starts with and how far an inherited one reaches; the host's terminal; then a signal
 * to the command's whole process group (which, if the command was not put in a session of its own, is the host
 * process that created the sandbox, and every other sandbox that process runs).
 * argv: the descriptor number the host process holds open on `/`. Prints its JSON before the signal.
 */
export const OWNER_ATTACK = String.raw`
import errno, fcntl, json, os, select, signal, sys, termios

held = int(sys.argv[1])
out = {"fds": [], "tty": {}}
for fd in range(0, 1024):
    try:
        os.fstat(fd)
        out["fds"].append(fd)
    except OSError:
        pass
try:
    out["through_held_fd"] = sorted(os.listdir("/proc/self/fd/%d/.." % held))[:20]
except OSError as e:
    out["through_held_fd"] = errno.errorcode.get(e.errno, str(e.errno))
out["pgrp"], out["sid"] = os.getpgrp(), os.getsid(0)
try:
    tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    out["tty"]["open"] = True
    try:
        os.write(tty, b"SANDBOX-WROTE-TO-HOST-TTY\n")
        out["tty"]["write"] = True
    except OSError as e:
        out["tty"]["write"] = errno.errorcode.get(e.errno, str(e.errno))
    try:
        fcntl.ioctl(tty, termios.TIOCSTI, b"#")
        out["tty"]["tiocsti"] = "accepted"
    except OSError as e:
        out["tty"]["tiocsti"] = errno.errorcode.get(e.errno, str(e.errno))
    ready, _, _ = select.select([tty], [], [], 3)
    out["tty"]["read"] = os.read(tty, 100).decode(errors="replace") if ready else None
except OSError as e:
    out["tty"]["open"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out), flush=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    os.kill(0, signal.SIGTERM)
    print("process group signalled", flush=True)
except OSError as e:
    print("process group signal refused: " + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
`;

/**
 * Takes over the output of the `tar` that a download runs inside the sandbox: stop it, duplicate its stdout (the
 * host's end of the copy) with pidfd_getfd, then either write a forged archive into it ("forge") or keep it open
 * and idle ("hold"). argv: mode, the directory tar archives, how many files it holds, the JSON list of forged entries.
 * Tar writes whole 10240-byte records and every file in the archived tree takes exactly one record after the
 * first 512-byte "./" header, so wherever tar is stopped the reader is 512 bytes short of an entry's end.
 */
export const TAR_HIJACK = String.raw`
import ctypes, io, json, os, signal, sys, tarfile, time

mode, tree, files, entries = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
RECORD = 10240

def forged():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.type = {"file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[e["kind"]]
            data = e.get("data", "").encode()
            info.size, info.mode, info.linkname = len(data), 0o6777, e.get("link", "")
            t.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()

def stop(pid):
    """SIGSTOP, then wait until it has stopped: kill() returns before, and until then it may still write."""
    os.kill(pid, signal.SIGSTOP)
    while True:
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("T", "t"):
            return True
        if state in ("Z", "X"):
            return False
        time.sleep(0.001)

open("/tmp/hijack-ready", "w").close()
me, needle = os.getpid(), ("/bin/tar\0-C\0" + tree + "\0").encode()
deadline = time.time() + 20
while time.time() < deadline:
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                if not f.read().startswith(needle):
                    continue
        except OSError:
            continue
        pid = int(name)
        if not stop(pid):
            print(json.dumps({"caught": False, "why": "tar ended before it stopped"}))
            sys.exit(0)
        with open("/proc/%d/io" % pid) as f:
            written = int([l for l in f if l.startswith("wchar")][0].split()[1])
        # wchar also counts the byte the process wrote before its exec (the helper's "started" signal)
        written -= 1 if written % RECORD == 1 else 0
        fd = libc.syscall(438, libc.syscall(434, pid, 0), 1, 0)
        if fd < 0:
            print(json.dumps({"caught": False, "why": "pidfd_getfd errno %d" % ctypes.get_errno()}))
            sys.exit(0)
        if written % RECORD or written > files * RECORD:
            os.kill(pid, signal.SIGKILL)
            print(json.dumps({"caught": False, "why": "tar stopped at byte %d, not inside a file" % written}))
            sys.exit(0)
        if mode == "forge":
            os.write(fd, (b"\0" * 512 if written else b"") + forged())
            os.kill(pid, signal.SIGKILL)
            os.close(fd)
            print(json.dumps({"caught": True, "written_before": written}))
            sys.exit(0)
        os.kill(pid, signal.SIGKILL)
        open("/tmp/hijack-holding", "w").close()
        time.sleep(60)
        sys.exit(0)
print(json.dumps({"caught": False, "why": "no tar seen"}))
`;

/** Each of a sandbox's processes, as the sandbox sees them (pid, state, command line). */
export const PS = String.raw`
import json, os
procs = []
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                procs.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
print(json.dumps(procs))
`;

/**
 * Host side (python3 outside any sandbox): hold an inheritable descriptor on `/` at number argv[1], then run the
 * command argv[2:] on a new pseudo-terminal as its controlling terminal, the way a person runs the CLI. When the
 * command prints OWNER-READY, "type" a secret line. Prints { tty: all terminal output, status }.
 */
export const TERMINAL_OWNER = String.raw`
import json, os, pty, select, sys, time

held, argv = int(sys.argv[1]), sys.argv[2:]
root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
os.dup2(root, held)
os.set_inheritable(held, True)
os.close(root)
pid, master = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out, typed, deadline = b"", False, time.time() + 90
while time.time() < deadline:
    ready, _, _ = select.select([master], [], [], 0.5)
    if not ready:
        continue
    try:
        data = os.read(master, 65536)
    except OSError:
        break
    if not data:
        break
    out += data
    if not typed and b"OWNER-READY" in out:
        os.write(master, b"typed-secret-4711\n")
        typed = True
done, status = os.waitpid(pid, os.WNOHANG)
if done == 0:
    os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
print(json.dumps({"tty": out.decode("utf-8", "replace"), "status": status}))
`;
