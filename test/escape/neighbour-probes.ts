/** Python probes of the neighbour attacks (neighbours.ts): each prints one JSON line. */

/**
 * `hog SECONDS`: takes every inotify instance, POSIX message queue byte and pipe buffer page the kernel gives this
 * user, says what stopped it, holds them until /tmp/quota-release exists (or SECONDS pass). `probe`: takes one of
 * each ("ok" or the errno name) and says how big a new pipe's buffer is.
 */
export const QUOTA_PROBE = `
import ctypes, errno, fcntl, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(MqAttr)]
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032

def err():
    return errno.errorcode[ctypes.get_errno()]

def inotify(n):
    for _ in range(n):
        if libc.inotify_init1(0) < 0:
            return err()
    return "ok"

def mqueues(n, tag):
    attr = MqAttr(0, 10, 8192, 0)
    for i in range(n):
        if rt.mq_open(("/%s%d" % (tag, i)).encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr)) < 0:
            return err()
    return "ok"

def pipes(n):
    for _ in range(n):
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        except OSError as e:
            return errno.errorcode[e.errno]
    return "ok"

def pipe_size():
    r, w = os.pipe()
    return fcntl.fcntl(w, F_GETPIPE_SZ)

if sys.argv[1] == "hog":
    held = {"inotify": inotify(4096), "mqueue": mqueues(4096, "hog"), "pipes": pipes(4096), "pipe_size": pipe_size()}
    print(json.dumps(held), flush=True)
    open("/tmp/quota-held", "w").close()
    deadline = time.time() + float(sys.argv[2])
    while not os.path.exists("/tmp/quota-release") and time.time() < deadline:
        time.sleep(0.01)
else:
    print(json.dumps({"inotify": inotify(1), "mqueue": mqueues(1, "probe%d" % os.getpid()), "pipe_size": pipe_size()}))
`;

/**
 * Watches DIRS (argv[1], JSON) for opens and reads until /tmp/watch-stop exists (at most 20 s), then prints the
 * names it saw. It writes /tmp/watching once the watches are set.
 */
export const WATCH_PROBE = `
import ctypes, json, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
for d in json.loads(sys.argv[1]):
    assert libc.inotify_add_watch(fd, d.encode(), 0x21) >= 0, d  # IN_ACCESS | IN_OPEN
open("/tmp/watching", "w").close()
names = set()
deadline = time.time() + 20
while not os.path.exists("/tmp/watch-stop") and time.time() < deadline:
    time.sleep(0.02)
    try:
        buf = os.read(fd, 1 << 16)
    except BlockingIOError:
        continue
    i = 0
    while i < len(buf):
        _, _, _, n = struct.unpack_from("iIII", buf, i)
        names.add(buf[i + 16:i + 16 + n].rstrip(bytes(1)).decode())
        i += 16 + n
print(json.dumps(sorted(names)))
`;

/** Busy for argv[1] seconds of wall time; prints the CPU seconds it got. */
export const BUSY = `
import sys, time
t, c = time.monotonic(), time.process_time()
while time.monotonic() - t < float(sys.argv[1]):
    pass
print(round(time.process_time() - c, 3))
`;

/** Connects to the abstract socket argv[1] and to one of its own (a forked child), printing what each answered. */
export const ABSTRACT_PROBE = String.raw`
import json, os, socket, sys
seen = {}
s = socket.socket(socket.AF_UNIX); s.settimeout(5)
try:
    s.connect("\0" + sys.argv[1]); seen["host"] = s.recv(16).decode()
except OSError as e:
    seen["host"] = type(e).__name__
own = "msb-own-%d" % os.getpid()
l = socket.socket(socket.AF_UNIX); l.bind("\0" + own); l.listen()
if os.fork() == 0:
    c = socket.socket(socket.AF_UNIX); c.connect("\0" + own); c.sendall(b"own"); os._exit(0)
conn, _ = l.accept()
seen["own"] = conn.recv(16).decode()
os.wait()
print(json.dumps(seen))
`;

/** A host process serving one abstract unix socket (argv[1]): prints "up", answers "host" to every connection. */
export const ABSTRACT_HOST = String.raw`
import socket, sys
l = socket.socket(socket.AF_UNIX); l.bind("\0" + sys.argv[1]); l.listen()
print("up", flush=True)
while True:
    c, _ = l.accept(); c.sendall(b"host"); c.close()
`;
