/*
 * msb-helper: the security-critical steps of a sandbox's life, in one small static binary (each also saves the
 * milliseconds a chain of util-linux processes would cost).
 *
 *   msb-helper launch [options] -- BWRAP ARGS...   user namespace (as root: a subordinate id range of its own,
 *                                                  taken from a pool and held until the sandbox ends; otherwise
 *                                                  the caller alone), size-limited tmpfs scratch, the home's
 *                                                  skeleton files, id-mapped copy-on-write trees, an overlay of
 *                                                  its own over every shared read-only tree, rlimits, a high OOM
 *                                                  score, its cgroups (--cgroup DIR, joined meanwhile), then exec
 *                                                  bwrap
 *   msb-helper launch --args-fd N --cgroup DIR...  the same, started ahead of its sandbox: once in its cgroups, the
 *                                                  rest (options, `-- BWRAP ARGS...`) is read from fd N as for
 *                                                  `enter --args-fd` ("drop": exit 0, nothing made)
 *   msb-helper init [options] LABEL                pid 1 of a sandbox: Docker's masks (--read-only, --mask-file,
 *                                                  --mask-dir PATH; --mask-unreadable DIR: every entry under DIR
 *                                                  others cannot read); not ptraceable; born in its cgroups, its
 *                                                  own cgroup namespace, then nothing inherited but
 *                                                  its id range's lock, fresh keyring, seccomp; signals readiness
 *                                                  on fd 4, then reaps
 *   msb-helper enter [options] -- CMD ARGS...      a high OOM score, join cgroups, enter pid 1's namespaces and
 *                                                  root, rlimits, fork; the child drops to the sandbox's
 *                                                  capabilities and user, closes inherited descriptors, gets a
 *                                                  fresh keyring, no_new_privs, a Landlock scope for abstract
 *                                                  sockets (with the host's network) and seccomp, then execs CMD
 *                                                  (--keep-terminal on a terminal: CMD gets a pty of the sandbox's
 *                                                  own devpts, which the parent relays)
 *   msb-helper enter --args-fd N --cgroup DIR...   the same, started ahead of its command: once in its cgroups, the
 *                                                  rest (--pid, options, `-- CMD ARGS...`) is read from fd N
 *                                                  (its length, then NUL-separated, until EOF; "drop": exit 0,
 *                                                  nothing run; nothing or a message cut short: an error)
 *                                                  (`restore ...` instead: the restore below, charged there)
 *   msb-helper restore [options]                   a live sandbox given another's writable state, in place: its
 *                                                  processes killed, a fresh tmpfs filled with a copy, its mount
 *                                                  tree rebuilt and pivoted, new IPC/network namespaces for its
 *                                                  commands, its pid counter set (see cmd_restore)
 *   msb-helper spawner PARENT-PID                  starts the processes above for one node process (spawner.c),
 *                                                  so that node never forks itself on a sandbox's path
 *   msb-helper check                               prints what this kernel and build support (for `doctor`)
 *   msb-helper export-bpf                          the seccomp profile as C arrays (embedded at build time)
 *
 * Every input comes from minisandbox itself (src/sandbox/launcher.ts and enter.ts); errors go to stderr with the
 * step that failed. Nothing here trusts anything the sandbox can write.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <linux/mount.h>
#include <linux/nsfs.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#include "seccomp-profile.h"

#define MAX_ITEMS 64
/* The first generation of a sandbox's writable places, under its scratch (see make_generation). */
#define GEN0 "g0"
/* Where pid 1 finds the lock of its sandbox's id range (the launch's first passed descriptor, 5, no longer needed). */
#define RANGE_LOCK_FD 5
/* Namespace flags `clone` may never carry inside a sandbox (CLONE_NEWTIME shares clone's exit-signal byte). */
#define CLONE_NS_FLAGS \
  (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP)

static const char *prog = "minisandbox";
static int cmd_restore(int argc, char **argv);
int cmd_spawner(int argc, char **argv); /* spawner.c */

static void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(code);
}

/* snprintf that refuses to truncate: a cut path or mount option would silently mean something else. */
static void fmt(char *buf, size_t size, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, size, f, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size) die(2, "argument too long");
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  size_t n = strlen(text);
  if (write(fd, text, n) != (ssize_t)n) die(1, "write %s: %s", path, strerror(errno));
  close(fd);
}

static void move_to_cgroup(const char *dir, pid_t pid) {
  char path[4096], text[32];
  fmt(path, sizeof path, "%s/cgroup.procs", dir);
  fmt(text, sizeof text, "%d\n", pid);
  write_file(path, text);
}

static void join_cgroup(const char *dir) { move_to_cgroup(dir, getpid()); }

static void make_cgroup(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die(1, "make cgroup %s: %s", dir, strerror(errno));
}

static void push(const char **list, int *n, const char *item) {
  if (*n >= MAX_ITEMS) die(2, "too many arguments");
  list[(*n)++] = item;
}

static void mkdir_or_die(const char *path, mode_t mode) {
  if (mkdir(path, mode) != 0 && errno != EEXIST) die(1, "mkdir %s: %s", path, strerror(errno));
  if (chmod(path, mode) != 0) die(1, "chmod %s: %s", path, strerror(errno));
}

static unsigned parse_uint(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || end == s || v > 0xfffffffeUL) die(2, "bad %s %s", what, s);
  return (unsigned)v;
}

/* ---------------------------------------------------------------- rlimits (prlimit's syntax) */

struct limits {
  struct rlimit values[MAX_ITEMS];
  int resources[MAX_ITEMS];
  int n;
};

/* --cpu=SOFT:HARD, --nofile=N, --as=N, --nproc=N, --fsize=N. */
static int take_rlimit(struct limits *l, const char *arg) {
  static const struct {
    const char *flag;
    int resource;
  } names[] = {
    {"--cpu=", RLIMIT_CPU}, {"--nofile=", RLIMIT_NOFILE}, {"--as=", RLIMIT_AS},
    {"--nproc=", RLIMIT_NPROC}, {"--fsize=", RLIMIT_FSIZE},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    size_t len = strlen(names[i].flag);
    if (strncmp(arg, names[i].flag, len) != 0) continue;
    if (l->n >= MAX_ITEMS) die(2, "too many limits");
    char *end;
    unsigned long long soft = strtoull(arg + len, &end, 10), hard = soft;
    if (*end == ':') hard = strtoull(end + 1, &end, 10);
    if (*end != '\0' || soft > hard) die(2, "bad limit %s", arg);
    l->values[l->n].rlim_cur = soft;
    l->values[l->n].rlim_max = hard;
    l->resources[l->n++] = names[i].resource;
    return 1;
  }
  return 0;
}

static void apply_rlimits(const struct limits *l) {
  for (int i = 0; i < l->n; i++)
    if (setrlimit(l->resources[i], &l->values[i]) != 0) die(1, "setrlimit: %s", strerror(errno));
}

/* ---------------------------------------------------------------- hardening shared by init and enter */

/* Whether this process holds `cap` (host root normally does; a container's root may not). */
static int has_cap(int cap) {
  struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &head, data) != 0) return 0;
  return (data[cap / 32].effective >> (cap % 32)) & 1;
}

/*
 * Sandboxes are what a host out of memory kills first: their processes get the highest OOM score (1000). Written
 * with CAP_SYS_RESOURCE (host root), it is also the floor (oom_score_adj_min) that every process forked from here
 * inherits: nothing inside can lower it, and pid 1 ties with the rest, so what the sandbox's own OOM killer takes is
 * its largest process, never pid 1 (which nothing inside can raise: its /proc files are not the sandbox's). Without
 * that capability there is no floor, and a command could lower itself below pid 1: then pid 1 (`for_pid1`) keeps
 * the caller's score, and only commands are raised.
 */
static void oom_first(int for_pid1) {
  if (for_pid1 && !has_cap(CAP_SYS_RESOURCE)) return;
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "1000", 4) != 4) die(1, "oom_score_adj: %s", strerror(errno));
  close(fd);
}

/* Landlock's scopes (ABI 6, Linux 6.12), defined here for older headers. */
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
struct msb_landlock_ruleset_attr {
  __u64 handled_access_fs, handled_access_net, scoped;
};

/*
 * A sandbox with the host's network shares its abstract unix socket namespace too: a Landlock domain scoped to
 * abstract sockets lets the command connect only to sockets made inside its own domain (itself and what it starts),
 * never to the host's or another sandbox's. It restricts nothing else. Needs no_new_privs (set by the caller).
 */
static void scope_abstract_unix(void) {
  struct msb_landlock_ruleset_attr attr = {.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET};
  int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (fd < 0) die(1, "landlock scope for abstract unix sockets (Linux >= 6.12): %s", strerror(errno));
  if (syscall(SYS_landlock_restrict_self, fd, 0) != 0) die(1, "landlock_restrict_self: %s", strerror(errno));
  close(fd);
}

/* A new anonymous session keyring: nothing of the host's (or another sandbox's) keys is reachable. */
static void fresh_keyring(void) {
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS)
    die(1, "new session keyring: %s", strerror(errno));
}

/* Close every descriptor from `first` up: nothing the caller held reaches the sandbox. */
static void close_from(unsigned first) {
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
  for (int fd = (int)first; fd < 65536; fd++) close(fd);
}

static int seccomp_add(scmp_filter_ctx ctx, uint32_t action, const char *name) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return 0; /* not a syscall of this architecture or libseccomp */
  if (seccomp_rule_add(ctx, action, nr, 0) != 0) die(1, "seccomp rule for %s", name);
  return 1;
}

static scmp_filter_ctx seccomp_new(uint32_t default_action) {
  scmp_filter_ctx ctx = seccomp_init(default_action);
  if (!ctx) die(1, "seccomp_init failed");
  /* Other ABIs (32-bit int 0x80, x32) would name syscalls by other numbers: they kill the process. */
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) die(1, "seccomp badarch");
  return ctx;
}

/*
 * The profile of seccomp-profile.h as two stacked filters (the kernel applies the most restrictive answer, and of
 * equal ones the later filter's): the allow-list (anything else: ENOSYS), then the refusals (EPERM), which also
 * carry the argument checks that an allow-list cannot express (clone's namespace flags, TIOCSTI).
 */
static void seccomp_profile(scmp_filter_ctx *allow, scmp_filter_ctx *refuse, int *allowed, int *refused) {
  *allow = seccomp_new(SCMP_ACT_ERRNO(ENOSYS));
  *refuse = seccomp_new(SCMP_ACT_ALLOW);
  *allowed = *refused = 0;
  for (size_t i = 0; i < sizeof SECCOMP_ALLOWED / sizeof SECCOMP_ALLOWED[0]; i++)
    *allowed += seccomp_add(*allow, SCMP_ACT_ALLOW, SECCOMP_ALLOWED[i]);
  *allowed += seccomp_add(*allow, SCMP_ACT_ALLOW, "clone") + seccomp_add(*allow, SCMP_ACT_ALLOW, "ioctl");
  int rc = 0;
  for (size_t i = 0; i < sizeof SECCOMP_PERSONALITIES / sizeof SECCOMP_PERSONALITIES[0]; i++)
    rc |= seccomp_rule_add(*allow, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                           SCMP_A0(SCMP_CMP_EQ, SECCOMP_PERSONALITIES[i]));
  for (size_t i = 0; i < sizeof SECCOMP_REFUSED / sizeof SECCOMP_REFUSED[0]; i++)
    *refused += seccomp_add(*refuse, SCMP_ACT_ERRNO(EPERM), SECCOMP_REFUSED[i]);
  /* clone: threads and processes yes, new namespaces no. clone3 hides its flags in memory: it is not allowed
     (ENOSYS), so libc falls back to clone. */
  for (int bit = 0; bit < 64; bit++) {
    unsigned long long flag = 1ULL << bit;
    if (CLONE_NS_FLAGS & flag)
      rc |= seccomp_rule_add(*refuse, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
  }
  /* vsock ignores network namespaces: it would reach the hypervisor even with the network off. */
  rc |= seccomp_rule_add(*refuse, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_VSOCK));
  rc |= seccomp_rule_add(*refuse, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_EQ, AF_VSOCK));
  /* TIOCSTI types into a terminal; the kernel reads the request as 32 bits, so compare only those. */
  rc |= seccomp_rule_add(*refuse, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCSTI));
  if (rc != 0) die(1, "seccomp argument rules failed");
}

#ifdef MSB_EMBEDDED_BPF
/* The profile compiled to BPF at build time (`msb-helper export-bpf`): loading it costs microseconds, building it
   with libseccomp on every command would cost milliseconds. */
#include MSB_EMBEDDED_BPF
static void load_bpf(const struct sock_filter *code, size_t len) {
  struct sock_fprog prog = {.len = (unsigned short)len, .filter = (struct sock_filter *)code};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) die(1, "load seccomp profile: %s", strerror(errno));
}
#endif

/* no_new_privs, then the profile: from here on nothing this process execs can gain privileges or leave. */
static void lock_down(int seccomp, int scope_abstract) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(1, "no_new_privs: %s", strerror(errno));
  if (scope_abstract) scope_abstract_unix();
  if (!seccomp) return;
#ifdef MSB_EMBEDDED_BPF
  load_bpf(MSB_BPF_ALLOW, sizeof MSB_BPF_ALLOW / sizeof MSB_BPF_ALLOW[0]);
  load_bpf(MSB_BPF_REFUSE, sizeof MSB_BPF_REFUSE / sizeof MSB_BPF_REFUSE[0]);
#else
  scmp_filter_ctx allow, refuse;
  int allowed, refused;
  seccomp_profile(&allow, &refuse, &allowed, &refused);
  int rc = seccomp_load(allow);
  if (rc == 0) rc = seccomp_load(refuse);
  if (rc != 0) die(1, "load seccomp profile: %s", strerror(-rc));
  seccomp_release(allow);
  seccomp_release(refuse);
#endif
}

/* Print one filter as a C array of struct sock_filter (for MSB_EMBEDDED_BPF). */
static void export_filter(scmp_filter_ctx ctx, const char *name) {
  FILE *tmp = tmpfile();
  if (!tmp || seccomp_export_bpf(ctx, fileno(tmp)) != 0) die(1, "export seccomp filter");
  off_t size = lseek(fileno(tmp), 0, SEEK_END);
  if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0) die(1, "bad exported filter size");
  lseek(fileno(tmp), 0, SEEK_SET);
  printf("static const struct sock_filter %s[] = {\n", name);
  struct sock_filter f;
  while (read(fileno(tmp), &f, sizeof f) == (ssize_t)sizeof f)
    printf("  {0x%04x, %u, %u, 0x%08x},\n", f.code, f.jt, f.jf, f.k);
  printf("};\n");
  fclose(tmp);
}

static int cmd_export_bpf(void) {
  scmp_filter_ctx allow, refuse;
  int allowed, refused;
  seccomp_profile(&allow, &refuse, &allowed, &refused);
  printf("/* Generated by `msb-helper export-bpf` at build time: %d syscalls allowed, %d refused. */\n", allowed,
         refused);
  export_filter(allow, "MSB_BPF_ALLOW");
  export_filter(refuse, "MSB_BPF_REFUSE");
  seccomp_release(allow);
  seccomp_release(refuse);
  return 0;
}

/* ---------------------------------------------------------------- launch */

/*
 * A user namespace whose ids first..first+count-1 are host ids base..base+count-1, held by a descriptor. Only a
 * process outside may write such a map (the kernel requires CAP_SETUID over the parent namespace): a short-lived
 * child creates the namespace and we, still host root, write its maps. `first` 0 makes the sandbox's namespace; any
 * other `first` serves only to id-map a tree owned by another range (an image's root, the store's) onto this one's.
 */
static int make_userns(unsigned first, unsigned base, unsigned count) {
  int up[2], down[2];
  if (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0) die(1, "pipe: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child == 0) {
    char b = 1;
    close(up[0]);
    close(down[1]);
    /* The namespace's owner is whoever creates it, and the kernel charges per-user quotas of everything inside
       (inotify instances and watches, message queues...) to its owner too: make that the sandbox's own id, never
       host root, and never another sandbox's. */
    if (setgroups(0, NULL) != 0 || setresgid(base, base, base) != 0 || setresuid(base, base, base) != 0) _exit(1);
    if (unshare(CLONE_NEWUSER) != 0) _exit(1);
    if (write(up[1], &b, 1) != 1) _exit(1);
    /* Wait until the parent holds the namespace (or died: then the read ends at EOF). */
    if (read(down[0], &b, 1) < 0) _exit(1);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  char b, path[64], map[64];
  if (read(up[0], &b, 1) != 1) die(1, "create user namespace: %s", strerror(errno));
  fmt(map, sizeof map, "%u %u %u\n", first, base, count);
  fmt(path, sizeof path, "/proc/%d/uid_map", child);
  write_file(path, map);
  fmt(path, sizeof path, "/proc/%d/gid_map", child);
  write_file(path, map);
  fmt(path, sizeof path, "/proc/%d/ns/user", child);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  close(down[1]);
  close(up[0]);
  while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
  }
  return fd;
}

/*
 * One sandbox, one id range: a free slot of the pool (base + k * size, k < slots), tried from a random one on. A
 * slot is taken with flock(2) on DIR/<its first id>, and the descriptor goes to the sandbox's pid 1, which keeps it
 * until it exits (and with it the sandbox: the kernel kills every process of its pid namespace): however pid 1 ends,
 * even by SIGKILL, the kernel drops the lock and the range is free again. Every launch on this host takes its range
 * there, whichever server or process started it.
 */
static unsigned take_id_range(const char *dir, unsigned base, unsigned slots, unsigned size, int *lock) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) die(1, "mkdir %s: %s", dir, strerror(errno));
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (dfd < 0 || fstat(dfd, &st) != 0) die(1, "open %s: %s", dir, strerror(errno));
  /* Anyone else able to write there could hold every range, or free one still in use. */
  if (st.st_uid != 0 || (st.st_mode & 022)) die(1, "%s must be a directory of root's that only root can write", dir);
  unsigned start;
  if (getrandom(&start, sizeof start, 0) != (ssize_t)sizeof start) start = (unsigned)getpid();
  for (unsigned i = 0; i < slots; i++) {
    unsigned first = base + ((start + i) % slots) * size;
    char name[16];
    fmt(name, sizeof name, "%u", first);
    int fd = openat(dfd, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) die(1, "open %s/%s: %s", dir, name, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      close(dfd);
      *lock = fd;
      return first;
    }
    if (errno != EWOULDBLOCK) die(1, "flock %s/%s: %s", dir, name, strerror(errno));
    close(fd);
  }
  die(75, "no free id range: all %u ranges of the pool are held by live sandboxes (reserve more ids in /etc/subuid "
          "and /etc/subgid: see `minisandbox doctor`)", slots);
  return 0;
}

/*
 * `path` opened in our current mount namespace. A descriptor the caller passed (`/proc/self/fd/N`: a directory it
 * opened and checked) may belong to the mount namespace we left: its path is opened again here, and must be the very
 * same object, or the launch stops.
 */
static int open_in_our_ns(const char *path) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  if (strncmp(path, "/proc/self/fd/", 14) != 0) return fd;
  char real[4096];
  ssize_t n = readlink(path, real, sizeof real - 1);
  if (n <= 0 || n >= (ssize_t)sizeof real - 1) die(1, "readlink %s: %s", path, strerror(errno));
  real[n] = '\0';
  int again = open(real, O_PATH | O_CLOEXEC);
  struct stat a, b;
  if (again < 0 || fstat(fd, &a) != 0 || fstat(again, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
    die(1, "%s changed while it was being mounted", real);
  close(fd);
  return again;
}

/*
 * A detached copy of the mount at `path` (a bind mount not attached anywhere yet). With a user namespace it is
 * id-mapped through it and read-only: host uid 0 shows as root inside, and nothing is written through the mapping.
 */
static int clone_tree(const char *path, int userns) {
  int at = open_in_our_ns(path);
  int tree = (int)syscall(SYS_open_tree, at, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
  if (tree < 0) die(1, "open_tree %s: %s", path, strerror(errno));
  close(at);
  if (userns < 0) return tree;
  struct mount_attr attr = {
    .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    .userns_fd = (unsigned)userns,
  };
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
    die(1, "id-mapped mount of %s: %s (the kernel or this filesystem lacks id-mapped mounts)", path, strerror(errno));
  return tree;
}

/*
 * A layer tree shown from its metadata image (composefs-style), for a lower given as `erofs,IMAGE,OBJECTS,TREE`:
 * the image (EROFS, mounted from its file, read-only and id-mapped like any lower) and the store's objects/ (a
 * read-only clone), composed by a read-only overlay whose data-only layer is the objects: a file is the image's inode
 * (mode, owner, time, size) over its object's bytes (`trusted.overlay.redirect`). The objects are not id-mapped:
 * overlayfs opens them as their mounter, host root, and an image's objects belong to the store's range, which the
 * sandbox's map does not hold (host root's rights over a file need its owner mapped: a 0600 one would be refused);
 * nothing of their owners shows, the image's inode being what the sandbox sees. Nothing of it is writable: no upper
 * layer here, the sandbox's own overlay above copies up into its generation. Every mount is detached: it exists only
 * where the launch attaches it, in the sandbox's mount namespace, and goes with it. Host root only (EROFS is not
 * mountable in a user namespace); one image is mounted once per launch, whatever the number of its trees.
 */
#define IMAGE_PREFIX "erofs,"
#define MAX_IMAGES 8
static struct {
  char image[4096];
  int erofs, objects;
} images[MAX_IMAGES];
static int nimages;

static void set_mount_attrs(int mnt, int userns, const char *what) {
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
  if (userns >= 0) attr.attr_set |= MOUNT_ATTR_IDMAP, attr.userns_fd = (unsigned)userns;
  if (syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    die(1, "id-mapped mount of %s: %s", what, strerror(errno));
}

static int mount_image(const char *image, int userns) {
  for (int i = 0; i < nimages; i++)
    if (!strcmp(images[i].image, image)) return i;
  if (nimages >= MAX_IMAGES) die(2, "too many layer images");
  int fs = (int)syscall(SYS_fsopen, "erofs", FSOPEN_CLOEXEC);
  if (fs < 0) die(1, "layer image %s: this kernel has no EROFS (%s)", image, strerror(errno));
  if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", image, 0) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0)
    die(1, "mount layer image %s: %s", image, strerror(errno));
  int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
  if (mnt < 0) die(1, "mount layer image %s: %s", image, strerror(errno));
  close(fs);
  set_mount_attrs(mnt, userns, image);
  fmt(images[nimages].image, sizeof images[nimages].image, "%s", image);
  images[nimages].erofs = mnt;
  images[nimages].objects = -1;
  return nimages++;
}

static int image_tree(const char *spec, int userns) {
  char buf[8192];
  fmt(buf, sizeof buf, "%s", spec + strlen(IMAGE_PREFIX));
  char *image = buf, *objects = strchr(image, ','), *tree = objects ? strchr(objects + 1, ',') : NULL;
  if (!tree) die(2, "bad layer image lower %s (want erofs,IMAGE,OBJECTS,TREE)", spec);
  *objects++ = '\0', *tree++ = '\0';
  if (!*tree || strchr(tree, '/') || !strcmp(tree, ".") || !strcmp(tree, "..")) die(2, "bad tree name %s", tree);
  if (userns < 0) die(2, "layer images need root (the store's layers are materialized otherwise)");
  int i = mount_image(image, userns);
  if (images[i].objects < 0) {
    images[i].objects = clone_tree(objects, -1);
    set_mount_attrs(images[i].objects, -1, objects);
  }
  int top = openat(images[i].erofs, tree, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) die(1, "layer image %s has no tree %s: %s", image, tree, strerror(errno));
  int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
  if (fs < 0) die(1, "overlay: %s", strerror(errno));
  if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_FD, "lowerdir+", NULL, top) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_FD, "datadir+", NULL, images[i].objects) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "metacopy", "on", 0) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "redirect_dir", "follow", 0) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0)
    die(1, "overlay over layer image %s: %s (overlayfs lacks data-only layers)", image, strerror(errno));
  int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  if (mnt < 0) die(1, "overlay over layer image %s: %s", image, strerror(errno));
  close(fs);
  close(top);
  return mnt;
}

static int lower_tree(const char *lower, int userns) {
  return strncmp(lower, IMAGE_PREFIX, strlen(IMAGE_PREFIX)) ? clone_tree(lower, userns) : image_tree(lower, userns);
}

/* Attach a detached tree at `target`, creating the mount point as a file or a directory like the tree's root. */
static void attach_tree(int tree, const char *target) {
  struct stat st;
  if (fstat(tree, &st) != 0) die(1, "stat mount for %s: %s", target, strerror(errno));
  if (S_ISDIR(st.st_mode)) mkdir_or_die(target, 0755);
  else {
    int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die(1, "create %s: %s", target, strerror(errno));
    close(fd);
  }
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) != 0)
    die(1, "attach mount at %s: %s", target, strerror(errno));
  close(tree);
}

/*
 * The launch into the sandbox's cgroups (--cgroup DIR...), by a child of its own while the launch goes on: a cgroup
 * v1 move waits for an RCU grace period (milliseconds, more on a busy host), which then overlaps the launch's work
 * instead of preceding it. bwrap, and with it pid 1, are started from the launch once it is in: every process of the
 * sandbox is born in its groups, none is moved later. The child moves its parent only while that is its parent: a
 * parent that died sends it SIGKILL before its pid can be reaped and reused.
 */
static pid_t joiner = -1;

static void start_joining(const char *const *dirs, int n) {
  if (n == 0) return;
  pid_t self = getpid();
  joiner = fork();
  if (joiner < 0) die(1, "fork: %s", strerror(errno));
  if (joiner > 0) return;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != self) _exit(1);
  for (int i = 0; i < n; i++) move_to_cgroup(dirs[i], self);
  _exit(0);
}

/* Before anything is written in bulk (charged to the memory group of its writer) and before bwrap starts. */
static void await_cgroups(void) {
  if (joiner < 0) return;
  int status;
  while (waitpid(joiner, &status, 0) < 0)
    if (errno != EINTR) die(1, "wait for the cgroup move: %s", strerror(errno));
  joiner = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(1, "the launch could not join the sandbox's cgroups");
}

static int run_cp(const char *from, const char *to) {
  char src[4096];
  fmt(src, sizeof src, "%s/.", from);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execl("/bin/cp", "cp", "-a", src, to, (char *)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* A copy of the layer stack (bottom first, so upper layers win): where overlayfs cannot be mounted. */
static void copy_layers(const char *lowers, const char *target) {
  char buf[8192];
  fmt(buf, sizeof buf, "%s", lowers);
  const char *parts[MAX_ITEMS];
  int n = 0;
  for (char *save, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) push(parts, &n, p);
  await_cgroups();
  for (int i = n - 1; i >= 0; i--)
    if (run_cp(parts[i], target) != 0) die(1, "copying %s failed", parts[i]);
}

/*
 * A host path the sandbox sees, cloned while we can still reach it (as host root, before the user namespace).
 *   SHARED  read-only, id-mapped as root; a directory is shown through an overlay of the sandbox's own (toolchains,
 *           the helper): what the sandbox locks or watches there is that overlay's, not the host's or a neighbour's
 *   SYSTEM  the same, never id-mapped (/usr, /etc...: host root's files stay nobody's inside, as without a map)
 *   LIVE    read-only, id-mapped, bound as is: the host writes it while the sandbox runs (control files)
 *   RW      writable, never id-mapped (root inside must not write as host root)
 */
enum source_kind { SHARED, SYSTEM, LIVE, RW };

struct source {
  const char *path, *name;
  enum source_kind kind;
  int tree;
};

struct launch_opts {
  const char *overlays[MAX_ITEMS], *home_files[MAX_ITEMS], *cgroups[MAX_ITEMS];
  struct source sources[MAX_ITEMS];
  int *lowers[MAX_ITEMS]; /* per overlay: cloned lower trees, -1 terminated */
  int nov, nsrc, nhome, ncg, force_copy;
  const char *scratch, *disk, *owner, *idmap, *id_pool, *id_locks;
  unsigned id_base, id_count; /* root mode: this sandbox's range */
  unsigned owners[MAX_ITEMS]; /* ranges that own lower trees of ours, and the namespaces that map them onto ours */
  int owner_ns[MAX_ITEMS], nowners;
  struct limits limits;
  char **bwrap;
};

static void add_source(struct launch_opts *o, const char *spec, enum source_kind kind) {
  if (o->nsrc >= MAX_ITEMS) die(2, "too many mounts");
  char *copy = strdup(spec), *eq = strchr(copy, '=');
  if (!eq || eq == copy || !eq[1] || strchr(copy, '/') < eq) die(2, "bad mount %s (want NAME=PATH)", spec);
  *eq = '\0';
  o->sources[o->nsrc++] = (struct source){.path = eq + 1, .name = copy, .kind = kind, .tree = -1};
}

/* `late`: the options read from --args-fd, once the cgroups are joined. */
static void parse_launch(int argc, char **argv, struct launch_opts *o, int late) {
  int i = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (take_rlimit(&o->limits, a)) continue;
    if (!strcmp(a, "--force-copy")) o->force_copy = 1;
    else if (!v) die(2, "%s needs a value", a);
    else if (!strcmp(a, "--overlay")) push(o->overlays, &o->nov, v), i++;
    else if (!strcmp(a, "--source")) add_source(o, v, SHARED), i++;
    else if (!strcmp(a, "--system")) add_source(o, v, SYSTEM), i++;
    else if (!strcmp(a, "--source-live")) add_source(o, v, LIVE), i++;
    else if (!strcmp(a, "--source-rw")) add_source(o, v, RW), i++;
    else if (!strcmp(a, "--scratch")) o->scratch = v, i++;
    else if (!strcmp(a, "--disk")) o->disk = v, i++;
    else if (!strcmp(a, "--owner")) o->owner = v, i++;
    else if (!strcmp(a, "--idmap")) o->idmap = v, i++;
    else if (!strcmp(a, "--idmap-pool")) o->id_pool = v, i++;
    else if (!strcmp(a, "--id-locks")) o->id_locks = v, i++;
    else if (!strcmp(a, "--home-file")) push(o->home_files, &o->nhome, v), i++;
    else if (!strcmp(a, "--cgroup") && late) die(2, "--cgroup comes before the launch's arguments, not with them");
    else if (!strcmp(a, "--cgroup")) push(o->cgroups, &o->ncg, v), i++;
    else die(2, "unknown option %s", a);
  }
  if (i >= argc - 1 || !o->scratch || !o->disk)
    die(2, "usage: msb-helper launch --scratch DIR --disk BYTES [...] -- BWRAP ARGS...");
  if ((o->idmap && o->id_pool) || (!o->id_pool != !o->id_locks))
    die(2, "give --idmap BASE:COUNT, or --idmap-pool BASE:SLOTS:SIZE with --id-locks DIR");
  o->bwrap = argv + i + 1;
}

/* The namespace that maps the range at `owner` onto ours (made once per owner). */
static int owner_userns(struct launch_opts *o, unsigned owner) {
  for (int i = 0; i < o->nowners; i++)
    if (o->owners[i] == owner) return o->owner_ns[i];
  if (o->nowners >= MAX_ITEMS) die(2, "too many owners");
  o->owners[o->nowners] = owner;
  return o->owner_ns[o->nowners++] = make_userns(owner, o->id_base, o->id_count);
}

/*
 * A lower layer: "DIR" (host ids, mapped through our namespace) or "+OWNER@DIR", a tree whose files belong to the
 * id range starting at host id OWNER (an image's root in the store): mapped from that range onto ours, or not at all
 * outside root mode.
 */
static int clone_lower(struct launch_opts *o, const char *spec, int userns) {
  if (spec[0] != '+') return lower_tree(spec, userns);
  const char *at = strchr(spec, '@');
  char num[16];
  size_t len = at ? (size_t)(at - spec - 1) : 0;
  if (!len || len >= sizeof num || strspn(spec + 1, "0123456789") != len) die(2, "bad owned lower %s", spec);
  memcpy(num, spec + 1, len);
  num[len] = '\0';
  unsigned owner = parse_uint(num, "owner");
  if (userns < 0 || owner == o->id_base) return lower_tree(at + 1, -1);
  return lower_tree(at + 1, owner_userns(o, owner));
}

/*
 * Clone every host path the sandbox will see: lower layers and sources. In root mode this runs before entering the
 * user namespace: only host root can id-map, and the sandbox's root may not even traverse the directories above
 * them. Writable sources are never id-mapped (root inside must not write as host root).
 */
static void clone_sources(struct launch_opts *o, int userns) {
  for (int i = 0; i < o->nsrc; i++) {
    struct source *s = &o->sources[i];
    s->tree = clone_tree(s->path, s->kind == SHARED || s->kind == LIVE ? userns : -1);
  }
  for (int i = 0; i < o->nov; i++) {
    char buf[8192];
    fmt(buf, sizeof buf, "%s", o->overlays[i]);
    o->lowers[i] = calloc(MAX_ITEMS + 1, sizeof(int));
    int k = 0;
    for (char *save, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
      if (k >= MAX_ITEMS) die(2, "too many lower layers");
      o->lowers[i][k++] = clone_lower(o, p, userns);
    }
    o->lowers[i][k] = -1;
  }
}

/* Enter a user namespace of our own: the id range taken (as host root), or just ourselves as root. */
static void enter_userns(int userns) {
  if (userns >= 0) {
    if (setns(userns, CLONE_NEWUSER) != 0) die(1, "enter user namespace: %s", strerror(errno));
    if (setgroups(0, NULL) != 0 || setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0)
      die(1, "become root of the user namespace: %s", strerror(errno));
    close(userns);
    if (unshare(CLONE_NEWNS) != 0) die(1, "unshare mount namespace: %s", strerror(errno));
    return;
  }
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) die(1, "unshare: %s", strerror(errno));
  char map[64];
  write_file("/proc/self/setgroups", "deny");
  fmt(map, sizeof map, "0 %u 1\n", (unsigned)uid);
  write_file("/proc/self/uid_map", map);
  fmt(map, sizeof map, "0 %u 1\n", (unsigned)gid);
  write_file("/proc/self/gid_map", map);
}

/*
 * The home's skeleton files (--home-file NAME=TEXT), written before anything of the sandbox runs, owned by its user:
 * a fresh sandbox starts with them at no extra cost.
 */
static void write_home_files(const char *const *files, int n, const char *home, unsigned uid, unsigned gid) {
  for (int i = 0; i < n; i++) {
    const char *spec = files[i], *eq = strchr(spec, '=');
    char name[256], path[4096];
    size_t len = eq ? (size_t)(eq - spec) : 0;
    if (!len || len >= sizeof name) die(2, "bad --home-file %s (want NAME=TEXT)", spec);
    memcpy(name, spec, len);
    name[len] = '\0';
    if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) die(2, "bad home file name %s", name);
    fmt(path, sizeof path, "%s/%s", home, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) die(1, "create %s: %s", path, strerror(errno));
    const char *text = eq + 1;
    size_t left = strlen(text);
    while (left > 0) {
      ssize_t n = write(fd, text, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die(1, "write %s: %s", path, strerror(errno));
      text += n, left -= (size_t)n;
    }
    if (fchown(fd, uid, gid) != 0) die(1, "chown %s: %s", path, strerror(errno));
    close(fd);
  }
}

/*
 * A shared read-only directory, shown through an overlay of this sandbox's own (the tree as its only real layer,
 * over the scratch's empty `e`): flock(2) and inotify act on the overlay's inodes, so a lock taken or a watch set
 * inside never meets the host's or a neighbour's. Files are bound as they are.
 */
static void attach_source(const struct launch_opts *o, const struct source *s) {
  char path[4096], under[4096], opts[8192];
  struct stat st;
  fmt(path, sizeof path, "%s/b/%s", o->scratch, s->name);
  if ((s->kind != SHARED && s->kind != SYSTEM) || fstat(s->tree, &st) != 0 || !S_ISDIR(st.st_mode))
    return attach_tree(s->tree, path);
  fmt(under, sizeof under, "%s/r/%s", o->scratch, s->name);
  attach_tree(s->tree, under);
  mkdir_or_die(path, 0755);
  fmt(opts, sizeof opts, "lowerdir=%s:%s/e", under, o->scratch);
  if (mount("overlay", path, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts) != 0)
    die(1, "overlay over %s: %s", s->path, strerror(errno));
}

/*
 * Every writable place of the sandbox is on one tmpfs of --disk bytes, its *generation* (GEN0 at the launch; a
 * restore makes the next one: see cmd_restore), so that --disk bounds them all together and a generation goes as a
 * whole. The scratch itself (another tmpfs) holds only mount points: the cloned trees, their overlays, the
 * generations.
 */
static void make_generation(const char *gen, const char *disk, unsigned ou, unsigned og) {
  char opts[256], path[4096];
  fmt(opts, sizeof opts, "size=%s,mode=0755", disk);
  mkdir_or_die(gen, 0755);
  if (mount("minisandbox", gen, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
    die(1, "mount tmpfs on %s: %s", gen, strerror(errno));
  static const struct {
    const char *name;
    mode_t mode;
  } dirs[] = {{"root", 0755}, {"tmp", 01777}, {"shm", 01777}, {"home", 0755}, {"upper", 0755}, {"work", 0755},
              {"m", 0755}};
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    fmt(path, sizeof path, "%s/%s", gen, dirs[d].name);
    mkdir_or_die(path, dirs[d].mode);
  }
  fmt(path, sizeof path, "%s/home", gen);
  if (chown(path, ou, og) != 0) die(1, "chown %s: %s", path, strerror(errno));
}

static void parse_owner(const char *owner, unsigned *ou, unsigned *og) {
  if (sscanf(owner, "%u:%u", ou, og) != 2) die(2, "bad --owner %s", owner);
}

static void make_scratch(const struct launch_opts *o) {
  char path[4096];
  if (mount("minisandbox", o->scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0)
    die(1, "mount tmpfs on %s: %s", o->scratch, strerror(errno));
  static const struct {
    const char *name;
    mode_t mode;
  } dirs[] = {{"l", 0700}, {"b", 0755}, {"r", 0700}, {"e", 0555}, {"ns", 0700}, {"s", 0700}};
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    fmt(path, sizeof path, "%s/%s", o->scratch, dirs[d].name);
    mkdir_or_die(path, dirs[d].mode);
  }
  unsigned ou = 0, og = 0;
  parse_owner(o->owner, &ou, &og);
  fmt(path, sizeof path, "%s/" GEN0, o->scratch);
  make_generation(path, o->disk, ou, og);
  /* The next one, empty, for a restore (which then makes the one after it). */
  fmt(path, sizeof path, "%s/g1", o->scratch);
  make_generation(path, o->disk, ou, og);
  fmt(path, sizeof path, "%s/" GEN0 "/home", o->scratch);
  write_home_files(o->home_files, o->nhome, path, ou, og);
  for (int i = 0; i < o->nsrc; i++) attach_source(o, &o->sources[i]);
}

/* One copy-on-write tree: overlayfs over the (id-mapped) lower layers, upper and work dirs on the scratch tmpfs. */
static void mount_overlay(const struct launch_opts *o, int index) {
  char lowerdir[8192] = "", path[4096], upper[4096], work[4096], opts[16384];
  /* The cloned lowers, attached on the scratch: reachable by path for overlayfs and for the copy fallback alike. */
  for (int k = 0; o->lowers[index][k] >= 0; k++) {
    fmt(path, sizeof path, "%s/l/%d-%d", o->scratch, index, k);
    attach_tree(o->lowers[index][k], path);
    size_t len = strlen(lowerdir);
    fmt(lowerdir + len, sizeof lowerdir - len, "%s%s", k ? ":" : "", path);
  }
  const char *lowers = lowerdir;
  fmt(upper, sizeof upper, "%s/" GEN0 "/upper/%d", o->scratch, index);
  fmt(work, sizeof work, "%s/" GEN0 "/work/%d", o->scratch, index);
  fmt(path, sizeof path, "%s/" GEN0 "/m/%d", o->scratch, index);
  mkdir_or_die(upper, 0755);
  mkdir_or_die(work, 0755);
  mkdir_or_die(path, 0755);
  fmt(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lowers, upper, work);
  if (o->force_copy || mount("overlay", path, "overlay", MS_NOSUID | MS_NODEV, opts) != 0) {
    fprintf(stderr, "minisandbox: overlayfs unavailable, copying %s\n", lowers);
    copy_layers(lowers, path);
  }
}

static char **read_late_args(int fd, int *count);

/* Root mode: this sandbox's id range (a free one of --idmap-pool, or the one --idmap shares) and its namespace. */
static int range_and_userns(struct launch_opts *o, int *lock) {
  unsigned base = 0, count = 0, slots = 0;
  if (o->id_pool) {
    if (sscanf(o->id_pool, "%u:%u:%u", &base, &slots, &count) != 3 || !base || !slots || !count ||
        (unsigned long long)base + (unsigned long long)slots * count > 0xffffffffULL)
      die(2, "bad --idmap-pool %s", o->id_pool);
    base = take_id_range(o->id_locks, base, slots, count, lock);
  } else if (sscanf(o->idmap, "%u:%u", &base, &count) != 2 || base == 0 || count == 0) {
    die(2, "bad --idmap %s", o->idmap);
  }
  o->id_base = base, o->id_count = count;
  return make_userns(0, base, count);
}

static int cmd_launch(int argc, char **argv) {
  prog = "minisandbox-launch";
  struct launch_opts o = {.owner = "0:0"};
  int args_fd = -1;
  if (argc >= 2 && !strcmp(argv[0], "--args-fd")) {
    args_fd = (int)parse_uint(argv[1], "--args-fd");
    for (int i = 2; i < argc; i += 2) {
      if (strcmp(argv[i], "--cgroup") != 0 || i + 1 >= argc)
        die(2, "usage: msb-helper launch --args-fd N [--cgroup DIR]...: the rest comes on fd N");
      push(o.cgroups, &o.ncg, argv[i + 1]);
    }
  } else {
    parse_launch(argc, argv, &o, 0);
  }
  /* Descriptors above the launcher's pipes (3, 4) serve only to name host directories: gone at exec. */
  syscall(SYS_close_range, 5, ~0U, CLOSE_RANGE_CLOEXEC);
  oom_first(1);
  if (args_fd >= 0) {
    /* Started ahead of its sandbox: in its cgroups while nothing waits (a cgroup v1 move waits for an RCU grace
       period), then the rest of the launch comes, as it would have on the command line. */
    for (int c = 0; c < o.ncg; c++) join_cgroup(o.cgroups[c]);
    int n = 0;
    char **late = read_late_args(args_fd, &n);
    if (!late) return 0; /* not needed after all: nothing was made */
    /* A standard stream stays open (on /dev/null, as a launch's stdin is) for bwrap and pid 1. */
    if (args_fd <= 2 && open("/dev/null", O_RDWR) != args_fd) die(1, "reopen fd %d: %s", args_fd, strerror(errno));
    parse_launch(n, late, &o, 1);
  } else {
    start_joining(o.cgroups, o.ncg);
  }
  int userns = -1, lock = -1;
  if (o.idmap || o.id_pool) {
    userns = range_and_userns(&o, &lock);
    clone_sources(&o, userns);
  }
  enter_userns(userns);
  if (userns < 0) clone_sources(&o, -1);
  /* Nothing mounted from here on propagates to the host, and all of it vanishes with the namespace. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die(1, "make / private: %s", strerror(errno));
  make_scratch(&o);
  for (int i = 0; i < o.nov; i++) mount_overlay(&o, i);
  apply_rlimits(&o.limits);
  /* The range's lock goes through bwrap (which keeps none of its descriptors, but passes them on) to pid 1, which
     holds it for the sandbox's life (`init --holds-id-range`): when pid 1 ends, so does the lock. The descriptors
     passed to the launch are done with: the lock takes the first of their numbers (dup2 leaves it open at exec). */
  if (lock >= 0 && dup2(lock, RANGE_LOCK_FD) != RANGE_LOCK_FD) die(1, "keep the id range's lock: %s", strerror(errno));
  await_cgroups();
  execv(o.bwrap[0], o.bwrap);
  die(1, "exec %s: %s", o.bwrap[0], strerror(errno));
  return 1;
}

/* ---------------------------------------------------------------- init */

static void on_signal(int sig) { (void)sig; }

/*
 * The sandbox's cgroup namespace, rooted at its own groups: pid 1 was born in them (the launch joined them before
 * starting bwrap), so nothing above them is ever named inside. CAP_SYS_ADMIN, which bwrap left to pid 1 for this
 * alone, is dropped right after (commands get their capabilities from `enter`).
 */
static void own_cgroup_namespace(void) {
  if (unshare(CLONE_NEWCGROUP) != 0 && errno != EINVAL) die(1, "cgroup namespace: %s", strerror(errno));
  if (prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0) die(1, "drop CAP_SYS_ADMIN: %s", strerror(errno));
  struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &head, data) != 0) die(1, "capget: %s", strerror(errno));
  data[0].effective &= ~(1u << CAP_SYS_ADMIN);
  data[0].permitted &= ~(1u << CAP_SYS_ADMIN);
  data[0].inheritable &= ~(1u << CAP_SYS_ADMIN);
  if (syscall(SYS_capset, &head, data) != 0) die(1, "capset: %s", strerror(errno));
}

/*
 * Docker's masks, made by pid 1 before anything else runs (bwrap would read its whole mount table after each mount:
 * a third of a start's CPU). The new mount API sets only the flags asked for, so flags a mount keeps locked stay.
 */
static void read_only_in_place(const char *path) {
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (tree < 0) die(1, "open_tree %s: %s", path, strerror(errno));
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
    die(1, "read-only %s: %s", path, strerror(errno));
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0)
    die(1, "mount on %s: %s", path, strerror(errno));
  close(tree);
}

/* A file reads as empty: /dev/null on top, read-only (a device on a nodev mount would not open). */
static void mask_file(const char *path) {
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/dev/null", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree < 0) die(1, "open_tree /dev/null: %s", strerror(errno));
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    die(1, "read-only /dev/null: %s", strerror(errno));
  // A path gone since it was listed (a file deleted from /etc meanwhile) has nothing left to hide.
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0 && errno != ENOENT)
    die(1, "mask %s: %s", path, strerror(errno));
  close(tree);
}

/* A directory shows as empty: a read-only tmpfs on top. */
static void mask_dir(const char *path) {
  if (mount("masked", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") != 0 &&
      errno != ENOENT)
    die(1, "mask %s: %s", path, strerror(errno));
}

/* What pid 1 masked by walking (--mask-unreadable), reported on fd 4 before readiness: `f` or `d`, a path, NUL. */
static char *walk_report;
static size_t walk_report_len;

static void report_mask(char kind, const char *path) {
  size_t n = strlen(path) + 2;
  char *grown = realloc(walk_report, walk_report_len + n + 1);
  if (!grown) die(1, "out of memory");
  walk_report = grown;
  walk_report[walk_report_len] = kind;
  memcpy(walk_report + walk_report_len + 1, path, n - 1);
  walk_report_len += n;
}

/*
 * Every entry under `path` that its owner keeps from other users (no read bit for "other"; for a directory, no
 * search bit either): shadow and gshadow, SSH host keys, sudoers, private TLS keys. Files read as /dev/null,
 * directories show empty. Walked by pid 1 on the sandbox's own read-only view of the tree before anything else runs:
 * what is masked is what is there now. Only directories anyone may read are walked into; one that cannot be read
 * after all (an ACL, a security module) is masked whole.
 */
static void mask_unreadable(char *path, size_t cap, int top) {
  /* The top may be a symlink (an /etc that is one, as the host has it); nothing under it is followed. */
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (top ? 0 : O_NOFOLLOW));
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    mask_dir(path);
    return report_mask('d', path);
  }
  size_t len = strlen(path);
  for (struct dirent *e; (errno = 0, e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    struct stat st;
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      die(1, "stat %s/%s: %s", path, e->d_name, strerror(errno));
    }
    int dir = S_ISDIR(st.st_mode);
    if (!dir && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) continue;
    if (len + 1 + strlen(e->d_name) >= cap) die(1, "path too long under %s", path);
    path[len] = '/';
    strcpy(path + len + 1, e->d_name);
    if (!(st.st_mode & S_IROTH) || (dir && !(st.st_mode & S_IXOTH))) {
      if (dir) mask_dir(path);
      else mask_file(path);
      report_mask(dir ? 'd' : 'f', path);
    } else if (dir) {
      mask_unreadable(path, cap, 0);
    }
    path[len] = '\0';
  }
  if (errno != 0) die(1, "read %s: %s", path, strerror(errno));
  closedir(d);
}

static int cmd_init(int argc, char **argv) {
  prog = "minisandbox-init";
  /* Not ptraceable, its /proc entries closed to the sandbox's own root: commands cannot take over pid 1. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die(1, "dumpable: %s", strerror(errno));
  int seccomp = 1, keep_lock = 0;
  int i = 1;
  for (; i < argc - 1; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--no-seccomp")) seccomp = 0, i--;
    else if (!strcmp(a, "--holds-id-range")) keep_lock = 1, i--;
    else if (!strcmp(a, "--read-only")) read_only_in_place(v);
    else if (!strcmp(a, "--mask-file")) mask_file(v);
    else if (!strcmp(a, "--mask-dir")) mask_dir(v);
    else if (!strcmp(a, "--mask-unreadable")) {
      char path[4096];
      fmt(path, sizeof path, "%s", v);
      mask_unreadable(path, sizeof path, 1);
    } else die(2, "init: unknown option %s", a);
  }
  if (i != argc - 1) die(2, "usage: msb-helper init [--no-seccomp] [--holds-id-range] [--read-only|...] LABEL");
  own_cgroup_namespace();
  fresh_keyring();
  /* The id range's lock (RANGE_LOCK_FD, see cmd_launch) is held as long as pid 1 lives; nothing else is kept. */
  if (keep_lock && fcntl(RANGE_LOCK_FD, F_GETFD) < 0) die(1, "the id range's lock is missing");
  close_from(keep_lock ? RANGE_LOCK_FD + 1 : 5);
  lock_down(seccomp, 0);
  /* fd 3: bwrap's info pipe (not ours to keep); fd 4: the launcher waits there for the masks' report and `R`. */
  close(3);
  /* What the walks masked, then readiness: the launcher may reuse the list for its next sandboxes. */
  report_mask('R', "");
  if (write(4, walk_report, walk_report_len - 1) != (ssize_t)(walk_report_len - 1)) return 1;
  free(walk_report);
  close(4);
  /* From now on pid 1 says nothing: the launcher's pipes are not a channel for the sandbox. */
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0), dup2(null, 1), dup2(null, 2);
    if (null > 2) close(null);
  }
  signal(SIGHUP, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  /* SIGCHLD blocked except while suspended: an exit between waitpid and sigsuspend stays pending, none is missed. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGCHLD, &sa, NULL);
  sigset_t chld, none;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigemptyset(&none);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    sigsuspend(&none);
  }
}

/* ---------------------------------------------------------------- enter */

static const char *const CAP_NAMES[] = {
  "chown",        "dac_override",  "dac_read_search", "fowner",         "fsetid",
  "kill",         "setgid",        "setuid",          "setpcap",        "linux_immutable",
  "net_bind_service", "net_broadcast", "net_admin",   "net_raw",        "ipc_lock",
  "ipc_owner",    "sys_module",    "sys_rawio",       "sys_chroot",     "sys_ptrace",
  "sys_pacct",    "sys_admin",     "sys_boot",        "sys_nice",       "sys_resource",
  "sys_time",     "sys_tty_config", "mknod",          "lease",          "audit_write",
  "audit_control", "setfcap",      "mac_override",    "mac_admin",      "syslog",
  "wake_alarm",   "block_suspend", "audit_read",      "perfmon",        "bpf",
  "checkpoint_restore",
};
#define NCAPS ((int)(sizeof CAP_NAMES / sizeof CAP_NAMES[0]))

/* Keep only the named capabilities in the bounding set (setpriv --bounding-set -all,+a,+b). */
static void limit_bounding_set(const char *keep) {
  int wanted[NCAPS] = {0};
  char buf[1024];
  fmt(buf, sizeof buf, "%s", keep);
  for (char *save, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int c = 0; c < NCAPS; c++)
      if (!strcmp(p, CAP_NAMES[c])) wanted[c] = found = 1;
    if (!found) die(2, "unknown capability %s", p);
  }
  for (int c = 0; c < 64; c++) {
    if (c < NCAPS && wanted[c]) continue;
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
      die(1, "drop capability %d: %s", c, strerror(errno));
  }
}

/* pid's namespace of a kind, or -1 when we already are in it (a sandbox with the host's network shares ours, and
   joining it again from inside the sandbox's user namespace is not allowed). */
static int open_ns(const char *pid, const char *name, int required) {
  char path[128], own[128];
  fmt(path, sizeof path, "/proc/%s/ns/%s", pid, name);
  fmt(own, sizeof own, "/proc/self/ns/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && (required || errno != ENOENT)) die(1, "open %s: %s", path, strerror(errno));
  struct stat theirs, ours;
  if (fd >= 0 && fstat(fd, &theirs) == 0 && stat(own, &ours) == 0 && theirs.st_ino == ours.st_ino &&
      theirs.st_dev == ours.st_dev) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The exit status of the child, as our own (a signal is re-raised, so the caller sees 128+N as usual). */
static int wait_and_mirror(pid_t child) {
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) die(1, "waitpid: %s", strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  int sig = WTERMSIG(status);
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  kill(getpid(), sig);
  return 128 + sig;
}

/* ---------------------------------------------------------------- terminal */

/* An interactive command on the caller's terminal gets a terminal of its own from the sandbox's devpts, as `docker
   run -t` does: `tty` names it, and nothing inside holds the caller's. The waiting parent relays both ways (the
   caller's terminal raw meanwhile, put back as it was), and passes on window size changes and hang-ups. */
struct pty {
  int master;
  char slave[64];
  struct termios saved;
  int have_saved;
};

/* Opened inside the sandbox's root (its /dev/ptmx), before the fork; -1 when it has none (then the old way). */
static int open_pty(struct pty *p) {
  p->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (p->master < 0) return -1;
  if (unlockpt(p->master) != 0 || ptsname_r(p->master, p->slave, sizeof p->slave) != 0) {
    close(p->master);
    return -1;
  }
  struct winsize ws;
  if (ioctl(0, TIOCGWINSZ, &ws) == 0) ioctl(p->master, TIOCSWINSZ, &ws);
  p->have_saved = tcgetattr(0, &p->saved) == 0;
  return 0;
}

/* In the child: a session of its own whose controlling terminal is the pty, on stdin, stdout and stderr. */
static void attach_pty(const struct pty *p) {
  if (setsid() < 0) die(1, "setsid: %s", strerror(errno));
  int s = open(p->slave, O_RDWR);
  if (s < 0 || ioctl(s, TIOCSCTTY, 0) != 0) die(1, "terminal %s: %s", p->slave, strerror(errno));
  if (p->have_saved) tcsetattr(s, TCSANOW, &p->saved);
  for (int fd = 0; fd < 3; fd++)
    if (dup2(s, fd) < 0) die(1, "dup2: %s", strerror(errno));
  if (s > 2) close(s);
}

/* One read from `from` written whole to `to`: 0 at end of file or on an error other than EINTR/EAGAIN. */
static int copy_some(int from, int to) {
  char buf[8192];
  ssize_t n = read(from, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  for (ssize_t off = 0; off < n;) {
    ssize_t w = write(to, buf + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return 0;
    off += w;
  }
  return n > 0;
}

/* Has the child exited (not reaped: wait_and_mirror does that)? */
static int child_exited(pid_t child) {
  siginfo_t info = {0};
  return waitid(P_PID, (id_t)child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child;
}

/* Relay until the child exits (then what it wrote last) or the terminal goes; `sigs` are blocked, read here. */
static int relay_pty(struct pty *p, pid_t child, const sigset_t *sigs) {
  int sfd = signalfd(-1, sigs, SFD_CLOEXEC);
  if (sfd < 0) die(1, "signalfd: %s", strerror(errno));
  if (p->have_saved) {
    struct termios raw = p->saved;
    cfmakeraw(&raw);
    tcsetattr(0, TCSADRAIN, &raw);
  }
  int input = 0;
  for (;;) {
    struct pollfd f[3] = {{p->master, POLLIN, 0}, {sfd, POLLIN, 0}, {input, POLLIN, 0}};
    if (poll(f, 3, -1) < 0 && errno != EINTR) break;
    if ((f[0].revents & POLLIN) && !copy_some(p->master, 1)) break;
    if ((f[0].revents & (POLLHUP | POLLERR)) && !(f[0].revents & POLLIN)) break;
    if ((f[2].revents & (POLLIN | POLLHUP)) && !copy_some(0, p->master)) input = -1; /* poll ignores fd -1 */
    struct signalfd_siginfo si;
    if (!(f[1].revents & POLLIN) || read(sfd, &si, sizeof si) != (ssize_t)sizeof si) continue;
    struct winsize ws;
    if (si.ssi_signo == SIGWINCH && ioctl(0, TIOCGWINSZ, &ws) == 0) ioctl(p->master, TIOCSWINSZ, &ws);
    else if (si.ssi_signo != SIGCHLD && si.ssi_signo != SIGWINCH) kill(child, (int)si.ssi_signo);
    if (si.ssi_signo == SIGCHLD && child_exited(child)) {
      /* What it wrote last, even with a background job still holding the terminal open. */
      fcntl(p->master, F_SETFL, fcntl(p->master, F_GETFL) | O_NONBLOCK);
      while (copy_some(p->master, 1)) {
      }
      break;
    }
  }
  if (p->have_saved) tcsetattr(0, TCSADRAIN, &p->saved);
  return wait_and_mirror(child);
}

struct enter_opts {
  const char *cgroups[MAX_ITEMS];
  const char **envs;
  int ncg, nenv, merge, seccomp, keep_terminal, scope_abstract;
  /* Where the child says it reached the command (see tell_reached), or -1. */
  int reached_fd;
  const char *pid, *cwd, *caps, *ns_dir;
  uid_t uid;
  gid_t gid;
  struct limits limits;
  char **cmd;
};

/*
 * After a restore the sandbox's commands have IPC and network namespaces of their own, kept at --ns-dir (see
 * fresh_namespaces): those, checked to belong to the sandbox's user namespace; anything else is pid 1's.
 */
static int restored_ns(const struct enter_opts *o, const char *name) {
  int required = strcmp(name, "cgroup") != 0;
  if (!o->ns_dir || (strcmp(name, "ipc") != 0 && strcmp(name, "net") != 0)) return open_ns(o->pid, name, required);
  char path[4096];
  fmt(path, sizeof path, "%s/%s", o->ns_dir, name);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return open_ns(o->pid, name, required);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  int owner = ioctl(fd, NS_GET_USERNS);
  char own[128];
  fmt(own, sizeof own, "/proc/%s/ns/user", o->pid);
  struct stat a, b;
  if (owner < 0 || fstat(owner, &a) != 0 || stat(own, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
    die(1, "%s is not a namespace of this sandbox", path);
  close(owner);
  return fd;
}

/* `late`: options read from --args-fd, once the cgroups are joined. */
static void parse_enter(int argc, char **argv, struct enter_opts *o, int late) {
  o->envs = realloc(o->envs, ((size_t)o->nenv + (size_t)argc + 1) * sizeof *o->envs);
  if (!o->envs) die(1, "out of memory");
  int i = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (take_rlimit(&o->limits, a)) continue;
    if (!strcmp(a, "--merge-stderr")) o->merge = 1;
    else if (!strcmp(a, "--no-seccomp")) o->seccomp = 0;
    else if (!strcmp(a, "--keep-terminal")) o->keep_terminal = 1;
    else if (!strcmp(a, "--scope-abstract-unix")) o->scope_abstract = 1;
    else if (!v) die(2, "%s needs a value", a);
    else if (late && (!strcmp(a, "--cgroup") || !strcmp(a, "--new-cgroup")))
      die(2, "%s comes before the command, not with it", a);
    else if (!strcmp(a, "--pid")) o->pid = v, i++;
    else if (!strcmp(a, "--ns-dir")) o->ns_dir = v, i++;
    else if (!strcmp(a, "--cgroup")) push(o->cgroups, &o->ncg, v), i++;
    /* The command's own group, made here: a cgroup v1 mkdir can wait on the hierarchy's lock, better here than in
       the caller's event loop. */
    else if (!strcmp(a, "--new-cgroup")) make_cgroup(v), push(o->cgroups, &o->ncg, v), i++;
    else if (!strcmp(a, "--caps")) o->caps = v, i++;
    else if (!strcmp(a, "--uid")) o->uid = parse_uint(v, "uid"), i++;
    else if (!strcmp(a, "--gid")) o->gid = parse_uint(v, "gid"), i++;
    else if (!strcmp(a, "--cwd")) o->cwd = v, i++;
    else if (!strcmp(a, "--env")) o->envs[o->nenv++] = v, i++;
    else die(2, "unknown option %s", a);
  }
  if (o->cmd) die(2, "msb-helper enter: one command");
  if (i < argc - 1) o->cmd = argv + i + 1;
}

/*
 * The rest of an `enter --args-fd` command line, read until EOF: "LEN\0" then LEN bytes of NUL-terminated tokens, or
 * "drop\0" when the helper is not needed after all (NULL). Anything else — nothing at all (the caller went away), a
 * message cut short or too long — is an error, never "not needed": the caller may believe it handed a command over.
 */
#define MAX_LATE_ARGS (4 << 20)
static const char DROP_MESSAGE[] = "drop"; /* sent with its NUL */
static char **read_late_args(int fd, int *count) {
  size_t cap = 1 << 14, len = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) die(1, "out of memory");
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die(1, "read arguments: %s", strerror(errno));
    if (r == 0) break;
    len += (size_t)r;
    if (len == cap) {
      if (cap >= MAX_LATE_ARGS) die(2, "arguments over %d bytes", MAX_LATE_ARGS);
      cap *= 2;
      buf = realloc(buf, cap + 1);
    }
  }
  close(fd);
  if (len == 0) die(1, "no command came: its caller closed the pipe without a word");
  if (len == sizeof DROP_MESSAGE && !memcmp(buf, DROP_MESSAGE, sizeof DROP_MESSAGE)) return NULL;
  char *head_end = memchr(buf, '\0', len);
  char *end;
  errno = 0;
  unsigned long want = head_end ? strtoul(buf, &end, 10) : 0;
  size_t head = head_end ? (size_t)(head_end - buf) + 1 : 0;
  if (!head_end || end != head_end || errno || want == 0 || head + want != len || buf[len - 1] != '\0')
    die(1, "the command's arguments came cut short or malformed (%zu bytes)", len);
  char *args_buf = buf + head;
  int n = 0;
  for (size_t k = 0; k < want; k++) n += args_buf[k] == '\0';
  char **args = calloc((size_t)n + 1, sizeof *args);
  if (!args) die(1, "out of memory");
  for (size_t k = 0, t = 0; k < want; k += strlen(args_buf + k) + 1) args[t++] = args_buf + k;
  *count = n;
  return args;
}

/*
 * One byte to the caller: every step of the helper's went well, what follows is the command's own (its exec, or its
 * directory missing). Without it, the helper's exit status is the helper's failure, never the command's. The
 * descriptor is close-on-exec: the command never holds it, so it can neither forge the byte nor withhold it.
 */
static void tell_reached(const struct enter_opts *o) {
  if (o->reached_fd >= 0 && write(o->reached_fd, "E", 1) != 1) die(1, "tell the caller: %s", strerror(errno));
}

/* In the child, inside every namespace: become the sandbox's user with its capabilities, then exec. */
static void become_and_exec(struct enter_opts *o) {
  limit_bounding_set(o->caps);
  fresh_keyring();
  /* An unprivileged sandbox's namespace denies setgroups (it maps one id): there are no groups to drop. */
  if (setgroups(0, NULL) != 0 && errno != EPERM) die(1, "setgroups: %s", strerror(errno));
  if (setresgid(o->gid, o->gid, o->gid) != 0 || setresuid(o->uid, o->uid, o->uid) != 0)
    die(1, "switch to %u:%u: %s", (unsigned)o->uid, (unsigned)o->gid, strerror(errno));
  /* The same messages and codes as `env -i -C DIR`, so that callers map them to errors alike. */
  if (chdir(o->cwd) != 0) {
    tell_reached(o);
    die(125, "cannot change directory to '%s': %s", o->cwd, strerror(errno));
  }
  /* One descriptor for both streams, so that the order of writes survives (subprocess's stderr=STDOUT). */
  if (o->merge && dup2(1, 2) < 0) die(1, "dup2: %s", strerror(errno));
  /* A session of its own: no controlling terminal of the host's, and kill(0) reaches only its own process group
     (process groups span pid namespaces). Only an interactive shell keeps the caller's terminal (then one of the
     sandbox's own in its place, when there is one: attach_pty made that session already). */
  if (!o->keep_terminal && setsid() < 0) die(1, "setsid: %s", strerror(errno));
  /* Nothing the caller held reaches the command; the descriptor to tell it by is kept (as 3, close-on-exec). */
  if (o->reached_fd >= 0) {
    if (o->reached_fd == 3 ? fcntl(3, F_SETFD, FD_CLOEXEC) != 0 : dup3(o->reached_fd, 3, O_CLOEXEC) != 3)
      die(1, "keep the descriptor to tell the caller: %s", strerror(errno));
    o->reached_fd = 3;
  }
  close_from(o->reached_fd >= 0 ? 4 : 3);
  clearenv();
  for (int e = 0; e < o->nenv; e++) putenv((char *)o->envs[e]);
  lock_down(o->seccomp, o->scope_abstract);
  tell_reached(o);
  execvp(o->cmd[0], o->cmd);
  die(errno == ENOENT ? 127 : 126, "'%s': %s", o->cmd[0], strerror(errno));
}

static int cmd_enter(int argc, char **argv) {
  struct enter_opts o = {.cwd = "/", .seccomp = 1, .reached_fd = -1};
  int args_fd = -1;
  if (argc >= 2 && !strcmp(argv[0], "--args-fd")) {
    args_fd = (int)parse_uint(argv[1], "--args-fd");
    argc -= 2, argv += 2;
  }
  /* While still host root: the command, and everything it starts, is what a host out of memory kills first. */
  oom_first(0);
  parse_enter(argc, argv, &o, 0);
  if (args_fd < 0 && !o.cmd) die(2, "usage: msb-helper enter --pid PID --caps LIST [...] -- CMD...");
  if (args_fd >= 0 && o.cmd) die(2, "usage: msb-helper enter --args-fd N: the command comes on fd N");
  /* Cgroups first, so that nothing this command forks escapes its accounting (or its kill). A cgroup v1 move waits
     for an RCU grace period: joined ahead of the command (--args-fd), that wait is not in its latency. */
  for (int c = 0; c < o.ncg; c++) join_cgroup(o.cgroups[c]);
  if (args_fd >= 0) {
    /* One byte on the descriptor above the arguments' (when the caller gave one): in the cgroups now. */
    int joined = args_fd + 1;
    if (fcntl(joined, F_GETFD) >= 0) {
      if (write(joined, "J", 1) != 1) die(1, "tell the caller the cgroups are joined: %s", strerror(errno));
      close(joined);
    }
    /* Two above (when the caller gave one): where the command's child says it reached the command. */
    if (fcntl(args_fd + 2, F_GETFD) >= 0) o.reached_fd = args_fd + 2;
    int n = 0;
    char **late = read_late_args(args_fd, &n);
    if (!late) return 0; /* told it is not needed: nothing ran, and nobody reads this status */
    /* Waiting in the sandbox's cgroups, the helper may be asked to restore it instead (its copies charged there). */
    if (!strcmp(late[0], "restore")) return cmd_restore(n - 1, late + 1);
    parse_enter(n, late, &o, 1);
  }
  if (!o.pid || !o.caps || !o.cmd) die(2, "usage: msb-helper enter --pid PID --caps LIST [...] -- CMD...");
  /* nsenter's order: the user namespace first (it grants the rights to join the others), the mount one last. */
  static const char *const order[] = {"user", "cgroup", "ipc", "uts", "net", "pid", "mnt"};
  int fds[7];
  for (int n = 0; n < 7; n++) fds[n] = restored_ns(&o, order[n]);
  char rootpath[128];
  fmt(rootpath, sizeof rootpath, "/proc/%s/root", o.pid);
  int root = open(rootpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die(1, "open %s: %s", rootpath, strerror(errno));
  for (int n = 0; n < 7; n++)
    if (fds[n] >= 0 && setns(fds[n], 0) != 0) die(1, "enter %s namespace: %s", order[n], strerror(errno));
  if (fchdir(root) != 0 || chroot(".") != 0) die(1, "enter root: %s", strerror(errno));
  /* This waiting parent stays outside the sandbox's pid namespace; keep it out of reach of its own uid too. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  apply_rlimits(&o.limits);
  /* An interactive shell on a terminal: one of the sandbox's own (its signals read by the relaying parent). */
  struct pty pty;
  int use_pty = o.keep_terminal && isatty(0) && open_pty(&pty) == 0;
  static const int relayed_signals[] = {SIGCHLD, SIGWINCH, SIGHUP, SIGTERM, SIGINT, SIGQUIT};
  sigset_t relayed, before;
  sigemptyset(&relayed);
  for (size_t k = 0; k < sizeof relayed_signals / sizeof *relayed_signals; k++) sigaddset(&relayed, relayed_signals[k]);
  if (use_pty) sigprocmask(SIG_BLOCK, &relayed, &before);
  /* A pid namespace applies to children only. */
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child > 0) {
    if (o.reached_fd >= 0) close(o.reached_fd);
    return use_pty ? relay_pty(&pty, child, &relayed) : wait_and_mirror(child);
  }
  if (use_pty) {
    sigprocmask(SIG_SETMASK, &before, NULL);
    attach_pty(&pty);
  }
  become_and_exec(&o);
  return 1;
}

/* ---------------------------------------------------------------- restore */

/*
 * msb-helper restore: a live sandbox given the writable state of another one, in place (its pid 1, namespaces, id
 * range and cgroups stay). With --kill-cgroup, every process of the sandbox but pid 1 is killed first. A new
 * generation of writable places (a fresh tmpfs: no inode number, block or file of the previous one survives) is
 * filled with a copy of the seed's — a pristine sibling's, to go back to the start; a frozen one's, to fork it —
 * with new overlays over the same lower layers; the sandbox's mount tree is rebuilt on it and pivoted to, so that
 * pid 1's root follows; System V and POSIX IPC objects are removed and commands get new IPC (and, without the host's
 * network, network) namespaces; the pid namespace's counter is set to the seed's (--last-pid: known already, or
 * `keep` to leave it). Then "R <the seed's counter>" on stdout, and the previous generation is let go; the next one
 * is made, with its commands' namespaces, and with --refill filled with another copy of the seed, its overlays
 * mounted (by a host-root child forked before this process became the sandbox's root). A restore told the new
 * generation was so filled from its seed (--prefilled) takes it as it is: no copy, no overlay, no namespace to make.
 */
struct restore_opts {
  const char *pid1, *holder, *scratch, *gen, *old_gen, *next_gen, *disk, *owner, *kill_cgroup;
  const char *root; /* the place that is the sandbox's `/` ("+root"; an image's: "+m/0", its overlay) */
  const char *seed_holder, *seed_dir, *seed_pid1; /* the seed: its launch process, its generation, its pid 1 */
  unsigned shift_from, shift_to, shift_count;     /* root mode: the seed's id range, ours, their size */
  const char *moves[MAX_ITEMS], *binds[MAX_ITEMS], *overlays[MAX_ITEMS], *symlinks[MAX_ITEMS];
  int nmove, nbind, nov, nsym, fresh_net, ro[MAX_ITEMS];
  int prefilled, remake;  /* the new generation: filled ahead with the seed's copy (when it says so), or made anew */
  long long refill_max;   /* after "R": the next generation filled with another copy of the seed, up to this size */
  pid_t keep[MAX_ITEMS];
  int nkeep;
  long last_pid; /* the seed's pid counter when known (-1: read it), or -2: leave ours (a fork's child) */
};

static void parse_restore(int argc, char **argv, struct restore_opts *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int *flag = !strcmp(a, "--fresh-net") ? &o->fresh_net : !strcmp(a, "--prefilled") ? &o->prefilled
              : !strcmp(a, "--remake-gen") ? &o->remake : NULL;
    if (flag) {
      *flag = 1;
      continue;
    }
    if (!v) die(2, "restore: %s needs a value", a);
    i++;
    if (!strcmp(a, "--pid1")) o->pid1 = v;
    else if (!strcmp(a, "--holder")) o->holder = v;
    else if (!strcmp(a, "--scratch")) o->scratch = v;
    else if (!strcmp(a, "--gen")) o->gen = v;
    else if (!strcmp(a, "--old-gen")) o->old_gen = v;
    else if (!strcmp(a, "--next-gen")) o->next_gen = v;
    else if (!strcmp(a, "--disk")) o->disk = v;
    else if (!strcmp(a, "--owner")) o->owner = v;
    else if (!strcmp(a, "--kill-cgroup")) o->kill_cgroup = v;
    else if (!strcmp(a, "--root")) o->root = v;
    else if (!strcmp(a, "--cgroup")) join_cgroup(v); /* a helper started for the restore: its copies charged there */
    else if (!strcmp(a, "--keep")) {
      if (o->nkeep >= MAX_ITEMS) die(2, "too many --keep");
      o->keep[o->nkeep++] = (pid_t)parse_uint(v, "pid");
    } else if (!strcmp(a, "--seed-holder")) o->seed_holder = v;
    else if (!strcmp(a, "--seed-dir")) o->seed_dir = v;
    else if (!strcmp(a, "--seed-pid1")) o->seed_pid1 = v;
    else if (!strcmp(a, "--refill")) o->refill_max = (long long)parse_uint(v, "refill size");
    else if (!strcmp(a, "--last-pid")) o->last_pid = !strcmp(v, "keep") ? -2 : (long)parse_uint(v, "last pid");
    else if (!strcmp(a, "--shift")) {
      if (sscanf(v, "%u:%u:%u", &o->shift_from, &o->shift_to, &o->shift_count) != 3 || !o->shift_count)
        die(2, "bad --shift %s (want FROM:TO:COUNT)", v);
    } else if (!strcmp(a, "--move")) push(o->moves, &o->nmove, v);
    else if (!strcmp(a, "--bind") || !strcmp(a, "--ro-bind")) {
      if (o->nbind < MAX_ITEMS) o->ro[o->nbind] = a[2] == 'r';
      push(o->binds, &o->nbind, v);
    } else if (!strcmp(a, "--overlay")) push(o->overlays, &o->nov, v);
    else if (!strcmp(a, "--symlink")) push(o->symlinks, &o->nsym, v);
    else die(2, "restore: unknown option %s", a);
  }
  if (!o->pid1 || !o->holder || !o->scratch || !o->gen || !o->disk || !o->owner || !o->seed_holder ||
      !o->seed_dir || !o->seed_pid1)
    die(2, "usage: msb-helper restore --pid1 P --holder H --scratch DIR --gen NAME --disk BYTES --owner U:G "
           "--seed-holder H --seed-dir DIR --seed-pid1 P [...]");
}

static int open_proc_ns(const char *pid, const char *name) {
  char path[128];
  fmt(path, sizeof path, "/proc/%s/ns/%s", pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  return fd;
}

static void setns_or_die(int fd, int type, const char *what) {
  if (setns(fd, type) != 0) die(1, "enter %s: %s", what, strerror(errno));
}

static int is_kept(const struct restore_opts *o, pid_t pid) {
  if (pid == getpid()) return 1;
  for (int i = 0; i < o->nkeep; i++)
    if (o->keep[i] == pid) return 1;
  return 0;
}

/* Every process of a cgroup tree (into `out`, up to `max`). */
static int tree_pids(const char *dir, pid_t *out, int n, int max) {
  char path[4096];
  fmt(path, sizeof path, "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  if (f) {
    long pid;
    while (n < max && fscanf(f, "%ld", &pid) == 1) out[n++] = (pid_t)pid;
    fclose(f);
  }
  DIR *d = opendir(dir);
  if (!d) return n;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_type == DT_DIR && e->d_name[0] != '.') {
      fmt(path, sizeof path, "%s/%s", dir, e->d_name);
      n = tree_pids(path, out, n, max);
    }
  closedir(d);
  return n;
}

static int in_pidns(pid_t pid, const struct stat *ns) {
  char path[64];
  struct stat st;
  fmt(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
  return stat(path, &st) == 0 && st.st_ino == ns->st_ino && st.st_dev == ns->st_dev;
}

/*
 * Every process of the sandbox but pid 1 (and what --keep names: the launch, this helper) killed, none able to start
 * meanwhile (pids.max 0: a fork bomb cannot outrun it); those of
 * its pid namespace are waited for until pid 1 has reaped them, so that the namespace's next pid is the one set later.
 */
#define MAX_KILL 65536
static void kill_all_but_kept(const struct restore_opts *o, const struct stat *pidns) {
  char path[4096], saved[64] = "max";
  fmt(path, sizeof path, "%s/pids.max", o->kill_cgroup);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) die(1, "open %s: %s", path, strerror(errno));
  ssize_t n = read(fd, saved, sizeof saved - 1);
  if (n > 0) saved[n] = '\0';
  if (pwrite(fd, "0", 1, 0) != 1) die(1, "write %s: %s", path, strerror(errno));
  static pid_t pids[MAX_KILL], inside[MAX_KILL];
  int ninside = 0;
  for (int round = 0;; round++) {
    int count = tree_pids(o->kill_cgroup, pids, 0, MAX_KILL), left = 0;
    for (int i = 0; i < count; i++) {
      if (is_kept(o, pids[i])) continue;
      left++;
      if (ninside < MAX_KILL && in_pidns(pids[i], pidns)) inside[ninside++] = pids[i];
      kill(pids[i], SIGKILL);
    }
    if (!left) break;
    if (round > 50000) die(1, "the sandbox's processes did not die");
    usleep(100);
  }
  for (int i = 0, waited = 0; i < ninside; i++)
    while (kill(inside[i], 0) == 0 && waited++ < 50000) usleep(100);
  if (pwrite(fd, saved, strlen(saved), 0) < 0) die(1, "write %s: %s", path, strerror(errno));
  close(fd);
}

/*
 * A tree copied as `cp -a` would (ids, modes, times, hard links, holes, user.* xattrs — overlayfs's own among them —
 * and ACLs), by this process: ids shifted from the seed's range onto ours; no file capability; no device but
 * overlayfs's whiteouts (char 0/0). Never follows a symlink; nests at most COPY_DEPTH directories.
 */
#define COPY_DEPTH 4096

struct copy_state {
  const struct restore_opts *o;
  int dst_root;
  char *rel; /* the current path under dst_root */
  size_t rel_len, rel_cap;
  struct link {
    dev_t dev;
    ino_t ino;
    char *rel;
  } *links;
  size_t nlinks, links_cap;
};

static unsigned shifted(const struct copy_state *c, unsigned id) {
  const struct restore_opts *o = c->o;
  if (!o->shift_count) return id;
  if (id < o->shift_from || id - o->shift_from >= o->shift_count) return o->shift_to + 65534; /* nobody inside */
  return id - o->shift_from + o->shift_to;
}

static void rel_push(struct copy_state *c, const char *name, size_t *saved) {
  size_t len = strlen(name);
  *saved = c->rel_len;
  if (c->rel_len + len + 2 > c->rel_cap) {
    c->rel_cap = (c->rel_len + len + 2) * 2;
    c->rel = realloc(c->rel, c->rel_cap);
    if (!c->rel) die(1, "out of memory");
  }
  if (c->rel_len) c->rel[c->rel_len++] = '/';
  memcpy(c->rel + c->rel_len, name, len + 1);
  c->rel_len += len;
}

static void copy_xattrs(int from, int to, const char *what) {
  static char names[65536], value[65536];
  ssize_t n = flistxattr(from, names, sizeof names);
  if (n < 0) {
    if (errno == ENOTSUP) return;
    die(1, "list xattrs of %s: %s", what, strerror(errno));
  }
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, "user.", 5) != 0 && strncmp(k, "system.posix_acl_", 17) != 0) continue;
    ssize_t len = fgetxattr(from, k, value, sizeof value);
    if (len < 0) die(1, "read xattr %s of %s: %s", k, what, strerror(errno));
    if (fsetxattr(to, k, value, (size_t)len, 0) != 0) die(1, "write xattr %s of %s: %s", k, what, strerror(errno));
  }
}

/* The data of a regular file, holes kept (a sparse file stays sparse). */
static void copy_data(int from, int to, off_t size, const char *what) {
  for (off_t pos = 0; pos < size;) {
    off_t data = lseek(from, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;
    if (data < 0) die(1, "seek %s: %s", what, strerror(errno));
    off_t hole = lseek(from, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    if (lseek(to, data, SEEK_SET) < 0) die(1, "seek %s: %s", what, strerror(errno));
    for (off_t off = data; off < hole;) {
      ssize_t n = sendfile(to, from, &off, (size_t)(hole - off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die(1, "copy %s: %s", what, n < 0 ? strerror(errno) : "it shrank");
    }
    pos = hole;
  }
  if (ftruncate(to, size) != 0) die(1, "size of %s: %s", what, strerror(errno));
}

/* Owner (shifted), then mode (a chown clears setuid and setgid), then times: as the source has them. */
static void copy_meta(const struct copy_state *c, int fd, const struct stat *st) {
  if (fchown(fd, shifted(c, st->st_uid), shifted(c, st->st_gid)) != 0) die(1, "chown %s: %s", c->rel, strerror(errno));
  if (fchmod(fd, st->st_mode & 07777) != 0) die(1, "chmod %s: %s", c->rel, strerror(errno));
  struct timespec times[2] = {st->st_atim, st->st_mtim};
  if (futimens(fd, times) != 0) die(1, "times of %s: %s", c->rel, strerror(errno));
}

/* A file with other links already copied is linked to that copy (true when done). */
static int linked_before(struct copy_state *c, const struct stat *st, int dst, const char *name) {
  if (st->st_nlink < 2) return 0;
  for (size_t i = 0; i < c->nlinks; i++)
    if (c->links[i].dev == st->st_dev && c->links[i].ino == st->st_ino) {
      if (linkat(c->dst_root, c->links[i].rel, dst, name, 0) != 0) die(1, "link %s: %s", c->rel, strerror(errno));
      return 1;
    }
  if (c->nlinks == c->links_cap) {
    c->links_cap = c->links_cap ? c->links_cap * 2 : 64;
    c->links = realloc(c->links, c->links_cap * sizeof *c->links);
    if (!c->links) die(1, "out of memory");
  }
  c->links[c->nlinks++] = (struct link){.dev = st->st_dev, .ino = st->st_ino, .rel = strdup(c->rel)};
  return 0;
}

static void copy_entry(struct copy_state *c, int src, int dst, const char *name, int depth);

/* The entries of directory `src` into directory `dst` (both open), then `dst` given `src`'s metadata. */
static void copy_dir(struct copy_state *c, int src, int dst, int depth) {
  if (depth > COPY_DEPTH) die(1, "%s: directories nest deeper than %d", c->rel, COPY_DEPTH);
  int list = dup(src);
  DIR *d = list >= 0 ? fdopendir(list) : NULL;
  if (!d) die(1, "read directory %s: %s", c->rel, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) copy_entry(c, src, dst, e->d_name, depth);
  closedir(d);
  struct stat st;
  if (fstat(src, &st) != 0) die(1, "stat %s: %s", c->rel, strerror(errno));
  copy_xattrs(src, dst, c->rel);
  copy_meta(c, dst, &st);
}

static void copy_file(struct copy_state *c, int src, int dst, const char *name, const struct stat *st) {
  if (linked_before(c, st, dst, name)) return;
  int from = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  int to = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (from < 0 || to < 0) die(1, "open %s: %s", c->rel, strerror(errno));
  copy_data(from, to, st->st_size, c->rel);
  copy_xattrs(from, to, c->rel);
  copy_meta(c, to, st);
  close(from), close(to);
}

/* A symlink, a whiteout, a FIFO or a socket; any other device is skipped (it could not be made here anyway). */
static void copy_special(struct copy_state *c, int src, int dst, const char *name, const struct stat *st) {
  if (S_ISLNK(st->st_mode)) {
    static char target[4096];
    ssize_t n = readlinkat(src, name, target, sizeof target - 1);
    if (n < 0) die(1, "readlink %s: %s", c->rel, strerror(errno));
    target[n] = '\0';
    if (symlinkat(target, dst, name) != 0) die(1, "symlink %s: %s", c->rel, strerror(errno));
  } else {
    int whiteout = S_ISCHR(st->st_mode) && st->st_rdev == 0;
    if (!whiteout && !S_ISFIFO(st->st_mode) && !S_ISSOCK(st->st_mode)) return;
    if (linked_before(c, st, dst, name)) return;
    if (mknodat(dst, name, st->st_mode & (S_IFMT | 0777), whiteout ? 0 : st->st_rdev) != 0)
      die(1, "mknod %s: %s", c->rel, strerror(errno));
    if (fchmodat(dst, name, st->st_mode & 0777, 0) != 0) die(1, "chmod %s: %s", c->rel, strerror(errno));
  }
  struct timespec times[2] = {st->st_atim, st->st_mtim};
  if (fchownat(dst, name, shifted(c, st->st_uid), shifted(c, st->st_gid), AT_SYMLINK_NOFOLLOW) != 0 ||
      utimensat(dst, name, times, AT_SYMLINK_NOFOLLOW) != 0)
    die(1, "metadata of %s: %s", c->rel, strerror(errno));
}

static void copy_entry(struct copy_state *c, int src, int dst, const char *name, int depth) {
  size_t saved;
  rel_push(c, name, &saved);
  struct stat st;
  if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) != 0) die(1, "stat %s: %s", c->rel, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    int from = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (from < 0) die(1, "open %s: %s", c->rel, strerror(errno));
    if (mkdirat(dst, name, 0700) != 0 && errno != EEXIST) die(1, "mkdir %s: %s", c->rel, strerror(errno));
    int to = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (to < 0) die(1, "open %s: %s", c->rel, strerror(errno));
    copy_dir(c, from, to, depth + 1);
    close(from), close(to);
  } else if (S_ISREG(st.st_mode)) {
    copy_file(c, src, dst, name, &st);
  } else {
    copy_special(c, src, dst, name, &st);
  }
  c->rel_len = saved;
  c->rel[saved] = '\0';
}

/* Directory `from` copied into the existing directory `to`, its own metadata included. */
static void copy_tree(const struct restore_opts *o, const char *from, const char *to) {
  int src = open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int dst = open(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (src < 0 || dst < 0) die(1, "open %s: %s", src < 0 ? from : to, strerror(errno));
  struct copy_state c = {.o = o, .dst_root = dst, .rel = calloc(1, 256), .rel_cap = 256};
  if (!c.rel) die(1, "out of memory");
  copy_dir(&c, src, dst, 0);
  for (size_t i = 0; i < c.nlinks; i++) free(c.links[i].rel);
  free(c.links);
  free(c.rel);
  close(src), close(dst);
}

/* As the sandbox's root, in its launch's mount namespace: what only it may do there (mounts). */
static void become_sandbox_root(int userns, int launch_mnt) {
  setns_or_die(userns, CLONE_NEWUSER, "the sandbox's user namespace");
  if (setgroups(0, NULL) != 0 && errno != EPERM) die(1, "setgroups: %s", strerror(errno));
  if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) die(1, "become the sandbox's root: %s", strerror(errno));
  setns_or_die(launch_mnt, CLONE_NEWNS, "the launch's mount namespace");
}

static void wait_ok(pid_t child, const char *what) {
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) die(1, "waitpid: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(1, "%s failed", what);
}

/* Whether `path` is a mount of its own (a generation made ahead: by the launch, or after the previous restore). */
static int is_mount_root(const char *path) {
  struct statx st;
  return syscall(SYS_statx, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &st) == 0 &&
         (st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (st.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* The same for `path` (absolute) resolved inside the tree `root`, never out of it. */
static int is_mount_root_in(int root, const char *path) {
  struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
  if (fd < 0) return 0;
  struct statx st;
  int yes = syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &st) == 0 &&
            (st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (st.stx_attributes & STATX_ATTR_MOUNT_ROOT);
  close(fd);
  return yes;
}

/*
 * What a generation filled ahead holds once it is whole (a copy of the seed, its overlays mounted): a file in its own
 * root, which no sandbox sees (only the places under it are mounted inside).
 */
#define FILLED_MARK "filled"

static int is_filled(const char *gen) {
  char path[4096];
  struct stat st;
  fmt(path, sizeof path, "%s/" FILLED_MARK, gen);
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * The seed's writable places copied into generation `gen` (a path in the target's launch namespace) through the
 * launch processes' views of both scratches. Files are made by the sandbox's root on the host (the tmpfs refuses ids
 * its namespace does not map), with the host root's capabilities still effective: to read whatever the seed holds
 * and give each copy its owner.
 */
static void copy_seed(const struct restore_opts *o, const char *gen) {
  if (o->shift_count) {
    setfsgid(o->shift_to);
    setfsuid(o->shift_to);
    struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &head, data) != 0) die(1, "capget: %s", strerror(errno));
    data[0].effective = data[0].permitted, data[1].effective = data[1].permitted;
    if (syscall(SYS_capset, &head, data) != 0) die(1, "capset: %s", strerror(errno));
  }
  static const char *const places[] = {"root", "tmp", "home", "shm", "upper"};
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    char from[4096], to[4096];
    fmt(from, sizeof from, "/proc/%s/root%s/%s", o->seed_holder, o->seed_dir, places[i]);
    fmt(to, sizeof to, "/proc/%s/root%s/%s", o->holder, gen, places[i]);
    copy_tree(o, from, to);
  }
}

/*
 * The new generation. One filled ahead with a copy of this very seed (--prefilled, and whole) is taken as it is: the
 * restore is then a swap. Otherwise an empty one made ahead (by the launch, or after the previous restore) is filled
 * with a copy of the seed; one filled ahead from another seed, or whatever --remake-gen says may be unfinished, goes
 * first, and a new one is made by a child as the sandbox's root (this process stays host root to copy). Returns
 * whether it was filled ahead.
 */
static int fill_new_generation(const struct restore_opts *o, int userns, int launch_mnt) {
  char gen[4096], seen[4096];
  fmt(gen, sizeof gen, "%s/%s", o->scratch, o->gen);
  fmt(seen, sizeof seen, "/proc/%s/root%s", o->holder, gen);
  int made = is_mount_root(seen), filled = made && is_filled(seen);
  if (filled && o->prefilled) return 1;
  if (!made || filled || o->remake) {
    pid_t child = fork();
    if (child < 0) die(1, "fork: %s", strerror(errno));
    if (child == 0) {
      unsigned ou = 0, og = 0;
      parse_owner(o->owner, &ou, &og);
      become_sandbox_root(userns, launch_mnt);
      if (is_mount_root(gen) && umount2(gen, MNT_DETACH) != 0) die(1, "umount %s: %s", gen, strerror(errno));
      make_generation(gen, o->disk, ou, og);
      _exit(0);
    }
    wait_ok(child, "making the new generation");
  }
  copy_seed(o, gen);
  return 0;
}

/*
 * A host-root child for --refill, forked before this process becomes the sandbox's root: once told (a byte on the
 * returned pipe: the next generation exists), it copies the seed into it, unless the seed's generation holds more
 * than --refill bytes. Exits 0 when it copied, 2 when it did not (too large), else failed.
 */
static pid_t start_refill(const struct restore_opts *o, int *go) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die(1, "pipe: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child == 0) {
    close(p[1]);
    close(1); /* the caller's "R" is the restore's own */
    char go_byte;
    if (read(p[0], &go_byte, 1) != 1) _exit(1); /* the restore failed or let go */
    char seen[4096], next[4096];
    struct statfs fs;
    fmt(seen, sizeof seen, "/proc/%s/root%s", o->seed_holder, o->seed_dir);
    if (statfs(seen, &fs) != 0) die(1, "statfs %s: %s", seen, strerror(errno));
    if ((long long)(fs.f_blocks - fs.f_bfree) * (long long)fs.f_bsize > o->refill_max) _exit(2);
    fmt(next, sizeof next, "%s/%s", o->scratch, o->next_gen);
    copy_seed(o, next);
    _exit(0);
  }
  close(p[0]);
  *go = p[1];
  return child;
}

static void generation_overlay(const struct restore_opts *o, const char *gen, const char *spec);

/* The next generation given its refill (see start_refill): its overlays and its mark once whole, else it goes. */
static int finish_refill(const struct restore_opts *o, pid_t child, int go, const char *next) {
  int status = -1;
  signal(SIGPIPE, SIG_IGN); /* a copier already gone is told nothing */
  if (write(go, "g", 1) == 1)
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  close(go);
  int copied = WIFEXITED(status) && WEXITSTATUS(status) == 0, skipped = WIFEXITED(status) && WEXITSTATUS(status) == 2;
  if (copied) {
    for (int i = 0; i < o->nov; i++) generation_overlay(o, next, o->overlays[i]);
    char mark[4096];
    fmt(mark, sizeof mark, "%s/" FILLED_MARK, next);
    int fd = open(mark, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) die(1, "create %s: %s", mark, strerror(errno));
    close(fd);
    return 0;
  }
  if (skipped) return 0;
  /* Unfinished: it goes, and the next restore makes its generation itself. */
  if (umount2(next, MNT_DETACH) == 0) rmdir(next);
  return 1;
}

/* --overlay I:FIRST:COUNT: overlay I of the new generation, over the launch's cloned lowers l/I-FIRST... */
static void generation_overlay(const struct restore_opts *o, const char *gen, const char *spec) {
  int index, first, count;
  if (sscanf(spec, "%d:%d:%d", &index, &first, &count) != 3 || index < 0 || first < 0 || count < 1)
    die(2, "bad --overlay %s (want I:FIRST:COUNT)", spec);
  char lowerdir[8192] = "", upper[4096], work[4096], at[4096], opts[16384];
  for (int k = first; k < first + count; k++) {
    size_t len = strlen(lowerdir);
    fmt(lowerdir + len, sizeof lowerdir - len, "%s%s/l/%d-%d", k > first ? ":" : "", o->scratch, index, k);
  }
  fmt(upper, sizeof upper, "%s/upper/%d", gen, index);
  fmt(work, sizeof work, "%s/work/%d", gen, index);
  fmt(at, sizeof at, "%s/m/%d", gen, index);
  if (mkdir(upper, 0755) != 0 && errno != EEXIST) die(1, "mkdir %s: %s", upper, strerror(errno));
  mkdir_or_die(work, 0755);
  mkdir_or_die(at, 0755);
  fmt(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lowerdir, upper, work);
  if (mount("overlay", at, "overlay", MS_NOSUID | MS_NODEV, opts) != 0)
    die(1, "overlay for %s: %s", spec, strerror(errno));
}

/* A detached copy of a scratch path ("+PLACE": of the new generation), with a bind's flags. */
static int place_tree(const struct restore_opts *o, const char *gen, const char *rel, int ro) {
  char path[4096];
  if (rel[0] == '+') fmt(path, sizeof path, "%s/%s", gen, rel + 1);
  else fmt(path, sizeof path, "%s/%s", o->scratch, rel);
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree < 0) die(1, "open_tree %s: %s", path, strerror(errno));
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ro ? MOUNT_ATTR_RDONLY : 0)};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    die(1, "flags of %s: %s", path, strerror(errno));
  return tree;
}

/* `name` in directory `dir` removed, whatever it is (a directory with all it holds); never follows a symlink. */
static void remove_entry(int dir, const char *name, int depth) {
  if (unlinkat(dir, name, 0) == 0 || errno == ENOENT) return;
  if (errno != EISDIR && errno != EPERM) die(1, "remove %s: %s", name, strerror(errno));
  if (depth > COPY_DEPTH) die(1, "remove %s: directories nest deeper than %d", name, COPY_DEPTH);
  int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) die(1, "open %s: %s", name, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) remove_entry(dirfd(d), e->d_name, depth + 1);
  closedir(d);
  if (unlinkat(dir, name, AT_REMOVEDIR) != 0) die(1, "remove %s: %s", name, strerror(errno));
}

/*
 * `path` (absolute, as inside) under the directory `root`, made when missing, never through a symlink: a component
 * in the way (what a seed may hold there) is replaced by a directory; the last one is a directory or, for `file`,
 * a regular file. Returns it opened O_PATH.
 */
static int make_mount_point(int root, const char *path, int file) {
  char buf[4096];
  fmt(buf, sizeof buf, "%s", path);
  int cur = dup(root);
  char *save, *next;
  for (char *p = strtok_r(buf, "/", &save); p; p = next) {
    next = strtok_r(NULL, "/", &save);
    int leaf_file = file && !next;
    int flags = O_PATH | O_NOFOLLOW | O_CLOEXEC | (leaf_file ? 0 : O_DIRECTORY);
    int fd = openat(cur, p, flags);
    struct stat st;
    if (fd >= 0 && leaf_file && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) close(fd), fd = -1, errno = EEXIST;
    if (fd < 0 && errno != ENOENT) remove_entry(cur, p, 0);
    if (fd < 0) {
      int made = leaf_file ? openat(cur, p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)
                           : mkdirat(cur, p, 0755);
      if (made < 0) die(1, "make mount point %s: %s", path, strerror(errno));
      if (leaf_file) close(made);
      fd = openat(cur, p, flags);
      if (fd < 0) die(1, "open mount point %s: %s", path, strerror(errno));
    }
    close(cur);
    cur = fd;
  }
  return cur;
}

static void attach_at(int tree, int at, const char *what) {
  if (syscall(SYS_move_mount, tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
    die(1, "mount %s: %s", what, strerror(errno));
  close(tree);
}

/* The new root, attached beside the old one (at a fresh directory of the old root): returns it opened. */
static int attach_new_root(int new_root, char *top, size_t size) {
  unsigned suffix;
  if (getrandom(&suffix, sizeof suffix, 0) != (ssize_t)sizeof suffix) suffix = (unsigned)getpid();
  fmt(top, size, "/.msb-restore-%08x", suffix);
  if (chdir("/") != 0 || mkdir(top, 0700) != 0) die(1, "mkdir %s: %s", top, strerror(errno));
  int at = open(top, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (at < 0) die(1, "open %s: %s", top, strerror(errno));
  attach_at(new_root, at, "the new root");
  close(at);
  int root = open(top, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) die(1, "open the new root: %s", strerror(errno));
  return root;
}

/* --symlink TARGET=/PATH: the merged-/usr links, made again (whatever the seed had there goes). */
static void make_symlinks(const struct restore_opts *o, int root) {
  for (int i = 0; i < o->nsym; i++) {
    const char *eq = strchr(o->symlinks[i], '=');
    if (!eq || eq[1] != '/' || strchr(eq + 2, '/')) die(2, "bad --symlink %s (want TARGET=/NAME)", o->symlinks[i]);
    char to[4096];
    fmt(to, sizeof to, "%.*s", (int)(eq - o->symlinks[i]), o->symlinks[i]);
    const char *name = eq + 2;
    remove_entry(root, name, 0);
    if (symlinkat(to, root, name) != 0) die(1, "symlink %s: %s", eq + 1, strerror(errno));
  }
}

/* Whether `target` lies inside one of the trees a restore moves (a bind there comes along with it). */
static int under_moved(const struct restore_opts *o, const char *target) {
  for (int i = 0; i < o->nmove; i++) {
    size_t len = strlen(o->moves[i]);
    if (!strncmp(target, o->moves[i], len) && target[len] == '/') return 1;
  }
  return 0;
}

/*
 * In the sandbox's mount namespace: the new root attached beside the old one; the system trees (--move: /usr,
 * /proc with pid 1's masks, /dev...) moved onto it, with what is mounted in them: a read-only source there (a file
 * of /etc) stays as it is (`trees[i]` < 0: the very mount it would be made again from), a place (bwrap's /dev/shm)
 * is moved out to the old tree; the new generation's places and the scratch's read-only sources (--bind/--ro-bind
 * SRC=TARGET, in bwrap's order) mounted; the merged-/usr symlinks made; then pivot_root, which takes pid 1's root
 * along, and the old tree (the previous generation's mounts, the places moved out included) detached at once.
 */
static void rebuild_tree(const struct restore_opts *o, int new_root, const int *trees) {
  char top[64];
  int root = attach_new_root(new_root, top, sizeof top);
  for (int i = 0; i < o->nmove; i++) {
    int dst = make_mount_point(root, o->moves[i], 0);
    if (syscall(SYS_move_mount, AT_FDCWD, o->moves[i], dst, "", MOVE_MOUNT_T_EMPTY_PATH) != 0)
      die(1, "move %s: %s", o->moves[i], strerror(errno));
    close(dst);
  }
  for (int i = 0; i < o->nbind; i++) {
    const char *target = strchr(o->binds[i], '=') + 1;
    char inside[4096], out[128];
    struct stat st;
    if (trees[i] < 0) continue;
    if (fstat(trees[i], &st) != 0) die(1, "stat mount for %s: %s", target, strerror(errno));
    /* What a moved tree has there (bwrap's /dev/shm in /dev) makes way: into the old tree, which goes as a whole. */
    fmt(inside, sizeof inside, "%s%s", top, target);
    if (under_moved(o, target) && is_mount_root(inside)) {
      fmt(out, sizeof out, "%s-%d", top, i);
      if (mkdir(out, 0700) != 0 || syscall(SYS_move_mount, AT_FDCWD, inside, AT_FDCWD, out, 0) != 0)
        die(1, "move %s out: %s", target, strerror(errno));
    }
    attach_at(trees[i], make_mount_point(root, target, !S_ISDIR(st.st_mode)), target);
  }
  make_symlinks(o, root);
  if (fchdir(root) != 0) die(1, "chdir to the new root: %s", strerror(errno));
  if (syscall(SYS_pivot_root, ".", ".") != 0) die(1, "pivot_root: %s", strerror(errno));
  if (umount2(".", MNT_DETACH) != 0) die(1, "detach the old root: %s", strerror(errno));
  if (chdir("/") != 0) die(1, "chdir /: %s", strerror(errno));
  close(root);
}

/* Every System V object of the current IPC namespace (listed in /proc/sysvipc), and every POSIX message queue. */
static void remove_ipc_objects(void) {
  static const char *const lists[] = {"/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg"};
  for (int l = 0; l < 3; l++) {
    FILE *f = fopen(lists[l], "re");
    if (!f) continue;
    char line[512];
    if (!fgets(line, sizeof line, f)) line[0] = '\0'; /* the header */
    while (fgets(line, sizeof line, f)) {
      long key, id;
      if (sscanf(line, "%ld %ld", &key, &id) != 2) continue;
      int rc = l == 0 ? shmctl((int)id, IPC_RMID, NULL) : l == 1 ? semctl((int)id, 0, IPC_RMID)
                                                                 : msgctl((int)id, IPC_RMID, NULL);
      if (rc != 0 && errno != EINVAL && errno != EIDRM) die(1, "remove IPC object %ld: %s", id, strerror(errno));
    }
    fclose(f);
  }
  int fs = (int)syscall(SYS_fsopen, "mqueue", FSOPEN_CLOEXEC);
  if (fs < 0) return; /* no POSIX message queues in this kernel */
  if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) die(1, "mqueue: %s", strerror(errno));
  int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
  int dir = mnt < 0 ? -1 : openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dir >= 0 ? fdopendir(dir) : NULL;
  if (!d) die(1, "list POSIX message queues: %s", strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
      die(1, "remove message queue %s: %s", e->d_name, strerror(errno));
  closedir(d);
  close(mnt);
  close(fs);
}

/* Loopback up in the (new) network namespace we are in, as bwrap brings it up. */
static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  fmt(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) die(1, "loopback: %s", strerror(errno));
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) die(1, "loopback up: %s", strerror(errno));
  close(s);
}

/* New IPC (and network) namespaces, owned by the user namespace we are in, kept as nsfs binds at `dir`/ipc (net). */
static void keep_new_namespaces(const char *dir, int net) {
  if (unshare(CLONE_NEWIPC | (net ? CLONE_NEWNET : 0)) != 0) die(1, "new IPC/network namespace: %s", strerror(errno));
  if (net) loopback_up();
  static const char *const names[] = {"ipc", "net"};
  for (int i = 0; i < 1 + net; i++) {
    char src[64], at[4096];
    fmt(src, sizeof src, "/proc/self/ns/%s", names[i]);
    fmt(at, sizeof at, "%s/%s", dir, names[i]);
    mkdir_or_die(dir, 0700);
    int fd = open(at, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) die(1, "create %s: %s", at, strerror(errno));
    close(fd);
    if (mount(src, at, NULL, MS_BIND, NULL) != 0) die(1, "keep the new %s namespace: %s", names[i], strerror(errno));
  }
}

/*
 * New IPC (and network) namespaces for the sandbox's commands in generation `gen`, owned by its user namespace, kept
 * as nsfs binds at the scratch's ns/GEN/ipc and ns/GEN/net (commands enter those: `enter --ns-dir`); pid 1 stays in
 * its own, where nothing of the sandbox's is left. Made ahead after the previous restore (never entered) when there
 * (a network namespace costs milliseconds to make, more while the host makes and frees many), else now.
 */
static void fresh_namespaces(const struct restore_opts *o, const char *gen) {
  char dir[4096], ipc[4096];
  fmt(dir, sizeof dir, "%s/ns/%s", o->scratch, gen);
  fmt(ipc, sizeof ipc, "%s/ipc", dir);
  if (!is_mount_root(ipc)) keep_new_namespaces(dir, o->fresh_net);
}

/* A generation's command namespaces (ns/GEN), once no command can enter them any more. */
static void drop_namespaces(const struct restore_opts *o, const char *gen) {
  static const char *const names[] = {"ipc", "net"};
  char path[4096];
  for (int i = 0; i < 2; i++) {
    fmt(path, sizeof path, "%s/ns/%s/%s", o->scratch, gen, names[i]);
    if (umount2(path, MNT_DETACH) == 0) unlink(path);
  }
  fmt(path, sizeof path, "%s/ns/%s", o->scratch, gen);
  rmdir(path);
}

/*
 * The last pid a pid namespace handed out, read by a child inside it, which then sets the counter back (its own
 * pid is free again once it is reaped): nothing of the namespace changes. With `set` >= 0, the counter is set to
 * that instead: the next process gets `set` + 1. Our later children are ours again (host root only: `own`).
 */
static long pid_counter(int pidns, long set, int own) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) die(1, "pid counter: %s", strerror(errno));
  setns_or_die(pidns, CLONE_NEWPID, "a sandbox's pid namespace");
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child == 0) {
    long value = set >= 0 ? set : (long)getpid() - 1;
    char text[32];
    fmt(text, sizeof text, "%ld", value);
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) _exit(1);
    _exit(write(pipefd[1], &value, sizeof value) == (ssize_t)sizeof value ? 0 : 1);
  }
  close(pipefd[1]);
  wait_ok(child, "setting a pid namespace's counter");
  long value = -1;
  if (read(pipefd[0], &value, sizeof value) != (ssize_t)sizeof value) die(1, "pid counter: no answer");
  close(pipefd[0]);
  if (own >= 0) setns_or_die(own, CLONE_NEWPID, "our own pid namespace");
  return value;
}


static int cmd_restore(int argc, char **argv) {
  prog = "minisandbox-restore";
  struct restore_opts o = {.last_pid = -1, .root = "+root"};
  parse_restore(argc, argv, &o);
  umask(0);
  /* A deep tree keeps a few descriptors per level open while it is copied. */
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  int userns = open_proc_ns(o.pid1, "user"), sb_mnt = open_proc_ns(o.pid1, "mnt"), pidns = open_proc_ns(o.pid1, "pid");
  int sb_ipc = open_proc_ns(o.pid1, "ipc"), launch_mnt = open_proc_ns(o.holder, "mnt");
  int seed_pidns = open_proc_ns(o.seed_pid1, "pid");
  struct stat pidns_st;
  if (fstat(pidns, &pidns_st) != 0) die(1, "pid namespace: %s", strerror(errno));
  if (o.kill_cgroup) kill_all_but_kept(&o, &pidns_st);
  int own_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  long last_pid = o.last_pid == -1 ? pid_counter(seed_pidns, -1, own_pidns) : o.last_pid;
  int swap = fill_new_generation(&o, userns, launch_mnt);
  /* The refill's copier stays host root; this process, from here on, is the sandbox's root in its launch's mount
     namespace (where its scratch is). */
  int go = -1;
  pid_t refill = o.refill_max > 0 && o.next_gen ? start_refill(&o, &go) : -1;
  /* A read-only source inside a moved tree is there already (seen through pid 1, host root still): it is kept. */
  int kept[MAX_ITEMS], trees[MAX_ITEMS];
  char sb_root_path[64];
  fmt(sb_root_path, sizeof sb_root_path, "/proc/%s/root", o.pid1);
  int sb_root = open(sb_root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (sb_root < 0) die(1, "open %s: %s", sb_root_path, strerror(errno));
  for (int i = 0; i < o.nbind; i++) {
    const char *eq = strchr(o.binds[i], '=');
    if (!eq || eq == o.binds[i] || eq[1] != '/') die(2, "bad bind %s (want SRC=/TARGET)", o.binds[i]);
    kept[i] = o.binds[i][0] != '+' && under_moved(&o, eq + 1) && is_mount_root_in(sb_root, eq + 1);
    trees[i] = -1;
  }
  close(sb_root);
  become_sandbox_root(userns, launch_mnt);
  char gen[4096];
  fmt(gen, sizeof gen, "%s/%s", o.scratch, o.gen);
  if (!swap)
    for (int i = 0; i < o.nov; i++) generation_overlay(&o, gen, o.overlays[i]);
  int new_root = place_tree(&o, gen, o.root, 0);
  for (int i = 0; i < o.nbind; i++) {
    char rel[4096];
    const char *eq = strchr(o.binds[i], '=');
    fmt(rel, sizeof rel, "%.*s", (int)(eq - o.binds[i]), o.binds[i]);
    if (!kept[i]) trees[i] = place_tree(&o, gen, rel, o.ro[i]);
  }
  /* The sandbox's own IPC objects go before commands get new namespaces (pid 1 keeps the emptied one). Once an
     earlier restore gave commands their own (the current generation's are there), nothing but pid 1 has been in it
     since it was emptied. */
  char cmd_ipc[4096];
  fmt(cmd_ipc, sizeof cmd_ipc, "%s/ns/%s/ipc", o.scratch, o.old_gen ? o.old_gen : "-");
  if (!is_mount_root(cmd_ipc)) {
    setns_or_die(sb_ipc, CLONE_NEWIPC, "the sandbox's IPC namespace");
    remove_ipc_objects();
  }
  fresh_namespaces(&o, o.gen);
  setns_or_die(sb_mnt, CLONE_NEWNS, "the sandbox's mount namespace");
  rebuild_tree(&o, new_root, trees);
  setns_or_die(launch_mnt, CLONE_NEWNS, "the launch's mount namespace");
  if (last_pid >= 0) pid_counter(pidns, last_pid, -1);
  /* Ready, and the seed's counter (which the caller may give next time: reading it costs a process). */
  char ready[32];
  fmt(ready, sizeof ready, "R %ld\n", last_pid);
  if (write(1, ready, strlen(ready)) != (ssize_t)strlen(ready)) return 1;
  close(1);
  /* The previous generation (its files and pages go with its last mount) and its commands' namespaces. The next
     one is made for the next restore, with its namespaces, and filled with another copy of the seed (--refill). */
  char path[4096];
  if (o.old_gen) {
    fmt(path, sizeof path, "%s/%s", o.scratch, o.old_gen);
    if (umount2(path, MNT_DETACH) == 0) rmdir(path);
    drop_namespaces(&o, o.old_gen);
  }
  int status = 0;
  if (o.next_gen) {
    unsigned ou = 0, og = 0;
    parse_owner(o.owner, &ou, &og);
    fmt(path, sizeof path, "%s/ns/%s", o.scratch, o.next_gen);
    keep_new_namespaces(path, o.fresh_net);
    fmt(path, sizeof path, "%s/%s", o.scratch, o.next_gen);
    make_generation(path, o.disk, ou, og);
    if (refill > 0) status = finish_refill(&o, refill, go, path);
  }
  return status;
}

/* ---------------------------------------------------------------- check */

/* What this kernel and build support, one `key value` per line (read by `minisandbox doctor`). */
static int cmd_check(void) {
  scmp_filter_ctx allow, refuse;
  int allowed, refused;
  seccomp_profile(&allow, &refuse, &allowed, &refused);
  seccomp_release(allow);
  seccomp_release(refuse);
  printf("seccomp_allowed %d\nseccomp_refused %d\n", allowed, refused);
#ifdef MSB_EMBEDDED_BPF
  printf("seccomp_embedded yes\n");
#else
  printf("seccomp_embedded no\n");
#endif
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  printf("open_tree %s\n", tree >= 0 ? "yes" : strerror(errno));
  if (tree >= 0) close(tree);
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  printf("landlock_abi %ld\n", abi < 0 ? 0 : abi);
  printf("oom_floor %s\n", has_cap(CAP_SYS_RESOURCE) ? "yes" : "no");
  return 0;
}

/*
 * check-image LOWER FILE BASE: the lower a launch would make of a layer image (erofs,IMAGE,OBJECTS,TREE), id-mapped
 * onto BASE, and FILE of its tree printed: the caller compares it with what it put there.
 */
static int cmd_check_image(int argc, char **argv) {
  if (argc != 3) die(2, "usage: msb-helper check-image erofs,IMAGE,OBJECTS,TREE FILE BASE");
  unsigned base = (unsigned)strtoul(argv[2], NULL, 10);
  if (!base) die(2, "bad base id %s", argv[2]);
  int tree = image_tree(argv[0], make_userns(0, base, 1));
  int fd = openat(tree, argv[1], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) die(1, "open %s in the layer image: %s", argv[1], strerror(errno));
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) die(1, "write: %s", strerror(errno));
  if (n < 0) die(1, "read %s in the layer image: %s", argv[1], strerror(errno));
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "launch")) return cmd_launch(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "init")) return cmd_init(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "enter")) return cmd_enter(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "restore")) return cmd_restore(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "spawner")) return cmd_spawner(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "check")) return cmd_check();
  if (argc >= 2 && !strcmp(argv[1], "check-image")) return cmd_check_image(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "export-bpf")) return cmd_export_bpf();
  fprintf(stderr, "usage: msb-helper launch|init|enter|check ...\n");
  return 2;
}
