/*
 * msb-helper: the security-critical steps of a sandbox's life, in one small static binary (each also saves the
 * milliseconds a chain of util-linux processes would cost).
 *
 *   msb-helper launch [options] -- BWRAP ARGS...   user namespace (as root: a subordinate id range of its own,
 *                                                  taken from a pool and held until the sandbox ends; otherwise
 *                                                  the caller alone), size-limited tmpfs scratch, the home's
 *                                                  skeleton files, id-mapped copy-on-write trees, an overlay of
 *                                                  its own over every shared read-only tree, rlimits, a high OOM
 *                                                  score, then exec bwrap (the caller moves it and pid 1 into the
 *                                                  cgroups)
 *   msb-helper init [options] LABEL                pid 1 of a sandbox: Docker's masks (--read-only, --mask-file,
 *                                                  --mask-dir PATH); not ptraceable; once in its cgroups (a byte
 *                                                  on stdin), its own cgroup namespace, then nothing inherited but
 *                                                  its id range's lock, fresh keyring, seccomp; signals readiness
 *                                                  on fd 4, then reaps
 *   msb-helper enter [options] -- CMD ARGS...      a high OOM score, join cgroups, enter pid 1's namespaces and
 *                                                  root, rlimits, fork; the child drops to the sandbox's
 *                                                  capabilities and user, closes inherited descriptors, gets a
 *                                                  fresh keyring, no_new_privs, a Landlock scope for abstract
 *                                                  sockets (with the host's network) and seccomp, then execs CMD
 *   msb-helper enter --args-fd N --cgroup DIR...   the same, started ahead of its command: once in its cgroups, the
 *                                                  rest (--pid, options, `-- CMD ARGS...`) is read from fd N
 *                                                  (NUL-separated, until EOF; nothing at all: exit 0, nothing run)
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
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seccomp-profile.h"

#define MAX_ITEMS 64
/* Where pid 1 finds the lock of its sandbox's id range (the launch's first passed descriptor, 5, no longer needed). */
#define RANGE_LOCK_FD 5
/* Namespace flags `clone` may never carry inside a sandbox (CLONE_NEWTIME shares clone's exit-signal byte). */
#define CLONE_NS_FLAGS \
  (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP)

static const char *prog = "minisandbox";

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

static void join_cgroup(const char *dir) {
  char path[4096], pid[32];
  fmt(path, sizeof path, "%s/cgroup.procs", dir);
  fmt(pid, sizeof pid, "%d\n", getpid());
  write_file(path, pid);
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
 * other `first` serves only to id-map a tree owned by another sandbox's range (a fork's snapshot) onto this one's.
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
 * Bulk writes to the scratch (a fork's seed, the copy fallback) are charged to the memory cgroup of the process that
 * makes them: before the first, wait until the caller has moved us into the sandbox's groups (it then writes 'L' on
 * our stdin; pid 1 skips that byte when nobody read it).
 */
static void await_cgroups(void) {
  static int done;
  char b = 0;
  if (done) return;
  done = 1;
  while (read(0, &b, 1) < 0 && errno == EINTR) {
  }
  if (b != 'L') die(1, "the launcher did not confirm the cgroups");
}

static int run_cp(const char *from, const char *to) {
  char src[4096];
  fmt(src, sizeof src, "%s/.", from);
  await_cgroups();
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
 *   SEED    a fork's snapshot, read once by the launch; id-mapped from the range that owns it (`owner`)
 */
enum source_kind { SHARED, SYSTEM, LIVE, RW, SEED };

struct source {
  const char *path, *name;
  enum source_kind kind;
  unsigned owner;
  int tree;
};

struct launch_opts {
  const char *overlays[MAX_ITEMS], *home_files[MAX_ITEMS];
  struct source sources[MAX_ITEMS];
  int *lowers[MAX_ITEMS]; /* per overlay: cloned lower trees, -1 terminated */
  int nov, nsrc, nhome, force_copy, seed; /* seed: index of the --seed source, or -1 */
  const char *scratch, *disk, *owner, *idmap, *id_pool, *id_locks;
  unsigned id_base, id_count; /* root mode: this sandbox's range */
  unsigned owners[MAX_ITEMS]; /* ranges that own trees of ours, and the namespaces that map them onto ours */
  int owner_ns[MAX_ITEMS], nowners;
  struct limits limits;
  char **bwrap;
};

/* "OWNER@PATH": a tree owned by the id range that starts at OWNER (a fork's snapshot); a plain path: no owner. */
static const char *owned_path(const char *spec, unsigned *owner) {
  const char *at = strchr(spec, '@');
  *owner = 0;
  if (!at || at == spec || strspn(spec, "0123456789") != (size_t)(at - spec)) return spec;
  char num[16];
  if ((size_t)(at - spec) >= sizeof num) die(2, "bad owner in %s", spec);
  memcpy(num, spec, (size_t)(at - spec));
  num[at - spec] = '\0';
  *owner = parse_uint(num, "owner");
  return at + 1;
}

static void add_source(struct launch_opts *o, const char *spec, enum source_kind kind) {
  if (o->nsrc >= MAX_ITEMS) die(2, "too many mounts");
  char *copy = strdup(spec), *eq = strchr(copy, '=');
  if (!eq || eq == copy || !eq[1] || strchr(copy, '/') < eq) die(2, "bad mount %s (want NAME=PATH)", spec);
  *eq = '\0';
  unsigned owner = 0;
  const char *path = kind == SEED ? owned_path(eq + 1, &owner) : eq + 1;
  o->sources[o->nsrc++] = (struct source){.path = path, .name = copy, .kind = kind, .owner = owner, .tree = -1};
}

static void parse_launch(int argc, char **argv, struct launch_opts *o) {
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
    else if (!strcmp(a, "--seed")) add_source(o, v, SEED), o->seed = o->nsrc - 1, i++;
    else if (!strcmp(a, "--scratch")) o->scratch = v, i++;
    else if (!strcmp(a, "--disk")) o->disk = v, i++;
    else if (!strcmp(a, "--owner")) o->owner = v, i++;
    else if (!strcmp(a, "--idmap")) o->idmap = v, i++;
    else if (!strcmp(a, "--idmap-pool")) o->id_pool = v, i++;
    else if (!strcmp(a, "--id-locks")) o->id_locks = v, i++;
    else if (!strcmp(a, "--home-file")) push(o->home_files, &o->nhome, v), i++;
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
 * How a tree is mapped: through our namespace (host ids shown as they are inside), through its owner's namespace onto
 * ours (a tree written by another range), or not at all (-1: written in our own range already, or never mapped).
 */
static int mapping_for(struct launch_opts *o, enum source_kind kind, unsigned owner, int userns) {
  if (userns < 0) return -1;
  if (owner) return owner == o->id_base ? -1 : owner_userns(o, owner);
  return kind == SHARED || kind == LIVE ? userns : -1;
}

/*
 * Clone every host path the sandbox will see: lower layers and sources. In root mode this runs before entering the
 * user namespace: only host root can id-map, and the sandbox's root may not even traverse the directories above
 * them. Writable sources are never id-mapped (root inside must not write as host root).
 */
static void clone_sources(struct launch_opts *o, int userns) {
  for (int i = 0; i < o->nsrc; i++) {
    struct source *s = &o->sources[i];
    s->tree = clone_tree(s->path, mapping_for(o, s->kind, s->owner, userns));
  }
  for (int i = 0; i < o->nov; i++) {
    char buf[8192];
    fmt(buf, sizeof buf, "%s", o->overlays[i]);
    o->lowers[i] = calloc(MAX_ITEMS + 1, sizeof(int));
    int k = 0;
    for (char *save, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
      if (k >= MAX_ITEMS) die(2, "too many lower layers");
      /* "+[OWNER@]DIR": written by a sandbox (a fork's snapshot), owned by that sandbox's range: mapped from it. */
      unsigned owner = 0;
      const char *path = p[0] == '+' ? owned_path(p + 1, &owner) : p;
      int ns = p[0] == '+' ? mapping_for(o, RW, owner, userns) : userns;
      o->lowers[i][k++] = clone_tree(path, ns);
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

static int is_empty_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  int empty = 1;
  while (empty && (e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = 0;
  closedir(d);
  return empty;
}

/* A fork starts from its parent's writable places (--seed NAME=DIR: DIR/{root,tmp,home,shm} of a snapshot). */
static void seed_scratch(const struct launch_opts *o) {
  static const char *const places[] = {"root", "tmp", "home", "shm"};
  const char *name = o->sources[o->seed].name;
  char from[4096], to[4096];
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    fmt(from, sizeof from, "%s/b/%s/%s", o->scratch, name, places[i]);
    fmt(to, sizeof to, "%s/%s", o->scratch, places[i]);
    if (access(from, F_OK) != 0) {
      if (errno == ENOENT) continue;
      die(1, "seed %s: %s", from, strerror(errno));
    }
    if (is_empty_dir(from)) continue;
    if (run_cp(from, to) != 0) die(1, "seeding %s from the snapshot failed", places[i]);
  }
}

/*
 * The home's skeleton files (--home-file NAME=TEXT), written before anything of the sandbox runs, owned by its user:
 * a fresh sandbox starts with them at no extra cost.
 */
static void write_home_files(const struct launch_opts *o, const char *home, unsigned uid, unsigned gid) {
  for (int i = 0; i < o->nhome; i++) {
    const char *spec = o->home_files[i], *eq = strchr(spec, '=');
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

/* The scratch tmpfs holds every writable place of the sandbox, so that --disk bounds them all together. */
static void make_scratch(const struct launch_opts *o) {
  char opts[256], path[4096];
  fmt(opts, sizeof opts, "size=%s,mode=0755", o->disk);
  if (mount("minisandbox", o->scratch, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
    die(1, "mount tmpfs on %s: %s", o->scratch, strerror(errno));
  static const struct {
    const char *name;
    mode_t mode;
  } dirs[] = {
    {"root", 0755}, {"tmp", 01777}, {"shm", 01777}, {"home", 0755}, {"upper", 0755}, {"work", 0755},
    {"m", 0755},    {"l", 0700},    {"b", 0755},    {"r", 0700},    {"e", 0555},
  };
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    fmt(path, sizeof path, "%s/%s", o->scratch, dirs[d].name);
    mkdir_or_die(path, dirs[d].mode);
  }
  unsigned ou = 0, og = 0;
  if (sscanf(o->owner, "%u:%u", &ou, &og) != 2) die(2, "bad --owner %s", o->owner);
  fmt(path, sizeof path, "%s/home", o->scratch);
  if (chown(path, ou, og) != 0) die(1, "chown %s: %s", path, strerror(errno));
  if (o->seed < 0) write_home_files(o, path, ou, og); /* a fork's home is its parent's, copied below */
  for (int i = 0; i < o->nsrc; i++) attach_source(o, &o->sources[i]);
  if (o->seed >= 0) seed_scratch(o);
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
  fmt(upper, sizeof upper, "%s/upper/%d", o->scratch, index);
  fmt(work, sizeof work, "%s/work/%d", o->scratch, index);
  fmt(path, sizeof path, "%s/m/%d", o->scratch, index);
  mkdir_or_die(upper, 0755);
  mkdir_or_die(work, 0755);
  mkdir_or_die(path, 0755);
  fmt(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lowers, upper, work);
  if (o->force_copy || mount("overlay", path, "overlay", MS_NOSUID | MS_NODEV, opts) != 0) {
    fprintf(stderr, "minisandbox: overlayfs unavailable, copying %s\n", lowers);
    copy_layers(lowers, path);
  }
}

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
  struct launch_opts o = {.owner = "0:0", .seed = -1};
  parse_launch(argc, argv, &o);
  /* Descriptors above the launcher's pipes (3, 4) serve only to name host directories: gone at exec. */
  syscall(SYS_close_range, 5, ~0U, CLOSE_RANGE_CLOEXEC);
  oom_first(1);
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
  execv(o.bwrap[0], o.bwrap);
  die(1, "exec %s: %s", o.bwrap[0], strerror(errno));
  return 1;
}

/* ---------------------------------------------------------------- init */

static void on_signal(int sig) { (void)sig; }

/*
 * The sandbox's cgroup namespace, rooted at its own groups. The launcher moves pid 1 into them while bwrap mounts
 * (a cgroup v1 move waits for an RCU grace period: overlapped, not in line) and then writes one byte on stdin; only
 * then is the namespace made, so that nothing above the sandbox's groups is ever named inside. CAP_SYS_ADMIN, which
 * bwrap left to pid 1 for this alone, is dropped right after (commands get their capabilities from `enter`).
 */
static void own_cgroup_namespace(void) {
  char go = 0;
  /* 'L' (the launch's own move, see await_cgroups) is still there when the launch had nothing to copy. */
  for (int n = 0; n < 2 && go != 'J'; n++)
    while (read(0, &go, 1) < 0 && errno == EINTR) {
    }
  if (go != 'J') die(1, "the launcher did not confirm the cgroups");
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
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0)
    die(1, "mask %s: %s", path, strerror(errno));
  close(tree);
}

/* A directory shows as empty: a read-only tmpfs on top. */
static void mask_dir(const char *path) {
  if (mount("masked", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") != 0)
    die(1, "mask %s: %s", path, strerror(errno));
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
    else die(2, "init: unknown option %s", a);
  }
  if (i != argc - 1) die(2, "usage: msb-helper init [--no-seccomp] [--holds-id-range] [--read-only|...] LABEL");
  own_cgroup_namespace();
  fresh_keyring();
  /* The id range's lock (RANGE_LOCK_FD, see cmd_launch) is held as long as pid 1 lives; nothing else is kept. */
  if (keep_lock && fcntl(RANGE_LOCK_FD, F_GETFD) < 0) die(1, "the id range's lock is missing");
  close_from(keep_lock ? RANGE_LOCK_FD + 1 : 5);
  lock_down(seccomp, 0);
  /* fd 3: bwrap's info pipe (not ours to keep); fd 4: the launcher waits for one byte there. */
  close(3);
  if (write(4, "R", 1) != 1) return 1;
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

struct enter_opts {
  const char *cgroups[MAX_ITEMS];
  const char **envs;
  int ncg, nenv, merge, seccomp, keep_terminal, scope_abstract;
  const char *pid, *cwd, *caps;
  uid_t uid;
  gid_t gid;
  struct limits limits;
  char **cmd;
};

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
    else if (late && !strcmp(a, "--cgroup")) die(2, "--cgroup comes before the command, not with it");
    else if (!strcmp(a, "--pid")) o->pid = v, i++;
    else if (!strcmp(a, "--cgroup")) push(o->cgroups, &o->ncg, v), i++;
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

/* The rest of an `enter --args-fd` command line: NUL-separated tokens until EOF (NULL when there are none). */
#define MAX_LATE_ARGS (4 << 20)
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
  if (len == 0) return NULL;
  if (buf[len - 1] != '\0') buf[len++] = '\0'; /* the last token may omit its terminator */
  int n = 0;
  for (size_t k = 0; k < len; k++) n += buf[k] == '\0';
  char **args = calloc((size_t)n + 1, sizeof *args);
  if (!args) die(1, "out of memory");
  for (size_t k = 0, t = 0; k < len; k += strlen(buf + k) + 1) args[t++] = buf + k;
  *count = n;
  return args;
}

/* In the child, inside every namespace: become the sandbox's user with its capabilities, then exec. */
static void become_and_exec(const struct enter_opts *o) {
  limit_bounding_set(o->caps);
  fresh_keyring();
  /* An unprivileged sandbox's namespace denies setgroups (it maps one id): there are no groups to drop. */
  if (setgroups(0, NULL) != 0 && errno != EPERM) die(1, "setgroups: %s", strerror(errno));
  if (setresgid(o->gid, o->gid, o->gid) != 0 || setresuid(o->uid, o->uid, o->uid) != 0)
    die(1, "switch to %u:%u: %s", (unsigned)o->uid, (unsigned)o->gid, strerror(errno));
  /* The same messages and codes as `env -i -C DIR`, so that callers map them to errors alike. */
  if (chdir(o->cwd) != 0) die(125, "cannot change directory to '%s': %s", o->cwd, strerror(errno));
  /* One descriptor for both streams, so that the order of writes survives (subprocess's stderr=STDOUT). */
  if (o->merge && dup2(1, 2) < 0) die(1, "dup2: %s", strerror(errno));
  /* A session of its own: no controlling terminal of the host's, and kill(0) reaches only its own process group
     (process groups span pid namespaces). Only an interactive shell keeps the caller's terminal. */
  if (!o->keep_terminal && setsid() < 0) die(1, "setsid: %s", strerror(errno));
  close_from(3);
  clearenv();
  for (int e = 0; e < o->nenv; e++) putenv((char *)o->envs[e]);
  lock_down(o->seccomp, o->scope_abstract);
  execvp(o->cmd[0], o->cmd);
  die(errno == ENOENT ? 127 : 126, "'%s': %s", o->cmd[0], strerror(errno));
}

static int cmd_enter(int argc, char **argv) {
  struct enter_opts o = {.cwd = "/", .seccomp = 1};
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
    int n = 0;
    char **late = read_late_args(args_fd, &n);
    if (!late) return 0; /* not needed after all */
    parse_enter(n, late, &o, 1);
  }
  if (!o.pid || !o.caps || !o.cmd) die(2, "usage: msb-helper enter --pid PID --caps LIST [...] -- CMD...");
  /* nsenter's order: the user namespace first (it grants the rights to join the others), the mount one last. */
  static const char *const order[] = {"user", "cgroup", "ipc", "uts", "net", "pid", "mnt"};
  int fds[7];
  for (int n = 0; n < 7; n++) fds[n] = open_ns(o.pid, order[n], n != 1);
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
  /* A pid namespace applies to children only. */
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child > 0) return wait_and_mirror(child);
  become_and_exec(&o);
  return 1;
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

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "launch")) return cmd_launch(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "init")) return cmd_init(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "enter")) return cmd_enter(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "check")) return cmd_check();
  if (argc >= 2 && !strcmp(argv[1], "export-bpf")) return cmd_export_bpf();
  fprintf(stderr, "usage: msb-helper launch|init|enter|check ...\n");
  return 2;
}
