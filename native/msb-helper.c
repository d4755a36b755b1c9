/*
 * msb-helper: the three small jobs on a sandbox's hot path, done in one static binary instead of a chain of
 * shell, unshare, prlimit, nsenter, setpriv and env processes (each exec of a dynamic binary costs milliseconds).
 *
 *   msb-helper launch [options] -- BWRAP ARGS...   new mount (and user) namespace, cgroups, tmpfs scratch and
 *                                                  overlays, rlimits, then exec bwrap
 *   msb-helper init [LABEL]                        pid 1 of a sandbox: signals readiness on fd 4, reaps orphans
 *   msb-helper enter [options] -- CMD ARGS...      join cgroups, rlimits, enter pid 1's namespaces and root, fork,
 *                                                  drop capabilities and user, clean environment, cwd, (stderr onto
 *                                                  stdout), exec CMD
 *
 * Every input comes from minisandbox itself (src/sandbox/launcher.ts and enter.ts); errors go to stderr with the
 * step that failed. The shell-chain fallback in those files does exactly the same when this binary is missing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#define MAX_ITEMS 64

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

/* prlimit's syntax, as minisandbox passes it: --cpu=SOFT:HARD, --nofile=N, --as=N, --nproc=N. */
static int parse_rlimit(const char *arg, struct rlimit *rl, int *resource) {
  static const struct { const char *flag; int resource; } names[] = {
    {"--cpu=", RLIMIT_CPU}, {"--nofile=", RLIMIT_NOFILE}, {"--as=", RLIMIT_AS}, {"--nproc=", RLIMIT_NPROC},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    size_t len = strlen(names[i].flag);
    if (strncmp(arg, names[i].flag, len) != 0) continue;
    char *end;
    unsigned long long soft = strtoull(arg + len, &end, 10), hard = soft;
    if (*end == ':') hard = strtoull(end + 1, &end, 10);
    if (*end != '\0') die(2, "bad limit %s", arg);
    rl->rlim_cur = soft;
    rl->rlim_max = hard;
    *resource = names[i].resource;
    return 1;
  }
  return 0;
}

struct limits {
  struct rlimit values[MAX_ITEMS];
  int resources[MAX_ITEMS];
  int n;
};

static int take_rlimit(struct limits *l, const char *arg) {
  if (l->n >= MAX_ITEMS) die(2, "too many limits");
  if (!parse_rlimit(arg, &l->values[l->n], &l->resources[l->n])) return 0;
  l->n++;
  return 1;
}

static void apply_rlimits(const struct limits *l) {
  for (int i = 0; i < l->n; i++)
    if (setrlimit(l->resources[i], &l->values[i]) != 0) die(1, "setrlimit: %s", strerror(errno));
}

static void push(const char **list, int *n, const char *item) {
  if (*n >= MAX_ITEMS) die(2, "too many arguments");
  list[(*n)++] = item;
}

static void mkdir_or_die(const char *path, mode_t mode) {
  if (mkdir(path, mode) != 0 && errno != EEXIST) die(1, "mkdir %s: %s", path, strerror(errno));
}

/* ---------------------------------------------------------------- launch */

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
  for (int i = n - 1; i >= 0; i--)
    if (run_cp(parts[i], target) != 0) die(1, "copying %s failed", parts[i]);
}

static int cmd_launch(int argc, char **argv) {
  prog = "minisandbox-launch";
  const char *cgroups[MAX_ITEMS], *overlays[MAX_ITEMS];
  int ncg = 0, nov = 0, userns = 0, force_copy = 0;
  const char *scratch = NULL, *disk = NULL, *owner = "0:0", *ovl_opts = "";
  struct limits limits = {.n = 0};
  int i = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (take_rlimit(&limits, a)) continue;
    if (!strcmp(a, "--userns")) userns = 1;
    else if (!strcmp(a, "--force-copy")) force_copy = 1;
    else if (!v) die(2, "%s needs a value", a);
    else if (!strcmp(a, "--cgroup")) push(cgroups, &ncg, v), i++;
    else if (!strcmp(a, "--overlay")) push(overlays, &nov, v), i++;
    else if (!strcmp(a, "--scratch")) scratch = v, i++;
    else if (!strcmp(a, "--disk")) disk = v, i++;
    else if (!strcmp(a, "--owner")) owner = v, i++;
    else if (!strcmp(a, "--overlay-opts")) ovl_opts = v, i++;
    else die(2, "unknown option %s", a);
  }
  if (i >= argc - 1 || !scratch || !disk) die(2, "usage: msb-helper launch --scratch DIR --disk BYTES [...] -- BWRAP ARGS...");
  char **bwrap = argv + i + 1;

  // Cgroups first: everything the sandbox ever forks is accounted from its first instruction.
  for (int c = 0; c < ncg; c++) join_cgroup(cgroups[c]);
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWNS | (userns ? CLONE_NEWUSER : 0)) != 0) die(1, "unshare: %s", strerror(errno));
  if (userns) {
    // Map only ourselves, to root (unshare --map-root-user).
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    fmt(map, sizeof map, "0 %u 1\n", (unsigned)uid);
    write_file("/proc/self/uid_map", map);
    fmt(map, sizeof map, "0 %u 1\n", (unsigned)gid);
    write_file("/proc/self/gid_map", map);
  }
  // Nothing mounted from here on propagates to the host, and all of it vanishes with the namespace.
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die(1, "make / private: %s", strerror(errno));
  char opts[8192], path[4096], upper[4096], work[4096];
  fmt(opts, sizeof opts, "size=%s,mode=0755", disk);
  if (mount("minisandbox", scratch, "tmpfs", 0, opts) != 0) die(1, "mount tmpfs on %s: %s", scratch, strerror(errno));
  const char *dirs[] = {"tmp", "home", "upper", "work", "m"};
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    fmt(path, sizeof path, "%s/%s", scratch, dirs[d]);
    mkdir_or_die(path, 0755);
  }
  fmt(path, sizeof path, "%s/tmp", scratch);
  if (chmod(path, 01777) != 0) die(1, "chmod %s: %s", path, strerror(errno));
  unsigned ou = 0, og = 0;
  if (sscanf(owner, "%u:%u", &ou, &og) != 2) die(2, "bad --owner %s", owner);
  fmt(path, sizeof path, "%s/home", scratch);
  if (chown(path, ou, og) != 0) die(1, "chown %s: %s", path, strerror(errno));
  for (int o = 0; o < nov; o++) {
    fmt(upper, sizeof upper, "%s/upper/%d", scratch, o);
    fmt(work, sizeof work, "%s/work/%d", scratch, o);
    fmt(path, sizeof path, "%s/m/%d", scratch, o);
    mkdir_or_die(upper, 0755);
    mkdir_or_die(work, 0755);
    mkdir_or_die(path, 0755);
    fmt(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s%s", overlays[o], upper, work, ovl_opts);
    if (force_copy || mount("overlay", path, "overlay", 0, opts) != 0) {
      fprintf(stderr, "minisandbox: overlayfs unavailable, copying %s\n", overlays[o]);
      copy_layers(overlays[o], path);
    }
  }
  apply_rlimits(&limits);
  execv(bwrap[0], bwrap);
  die(1, "exec %s: %s", bwrap[0], strerror(errno));
  return 1;
}

/* ---------------------------------------------------------------- init */

static void on_signal(int sig) { (void)sig; }

static int cmd_init(void) {
  // fd 3: bwrap's info pipe (not ours to keep); fd 4: the launcher waits for one byte there.
  close(3);
  if (write(4, "R", 1) != 1) return 1;
  close(4);
  signal(SIGHUP, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  // SIGCHLD blocked except while suspended: an exit between waitpid and sigsuspend stays pending, none is missed.
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
  "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
  "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
  "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
  "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
  "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
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
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) die(1, "drop capability %d: %s", c, strerror(errno));
  }
}

static int open_ns(const char *pid, const char *name, int required) {
  char path[128];
  fmt(path, sizeof path, "/proc/%s/ns/%s", pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && (required || errno != ENOENT)) die(1, "open %s: %s", path, strerror(errno));
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

static int cmd_enter(int argc, char **argv) {
  const char *cgroups[MAX_ITEMS];
  const char **envs = calloc((size_t)argc + 1, sizeof *envs);
  int ncg = 0, nenv = 0, userns = 0, set_ids = 0, merge = 0;
  const char *pid = NULL, *cwd = "/", *caps = NULL;
  uid_t uid = 0;
  gid_t gid = 0;
  struct limits limits = {.n = 0};
  int i = 0;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (take_rlimit(&limits, a)) continue;
    if (!strcmp(a, "--userns")) userns = 1;
    else if (!strcmp(a, "--merge-stderr")) merge = 1;
    else if (!v) die(2, "%s needs a value", a);
    else if (!strcmp(a, "--pid")) pid = v, i++;
    else if (!strcmp(a, "--cgroup")) push(cgroups, &ncg, v), i++;
    else if (!strcmp(a, "--caps")) caps = v, i++;
    else if (!strcmp(a, "--uid")) uid = (uid_t)strtoul(v, NULL, 10), set_ids = 1, i++;
    else if (!strcmp(a, "--gid")) gid = (gid_t)strtoul(v, NULL, 10), set_ids = 1, i++;
    else if (!strcmp(a, "--cwd")) cwd = v, i++;
    else if (!strcmp(a, "--env")) envs[nenv++] = v, i++;
    else die(2, "unknown option %s", a);
  }
  if (!pid || i >= argc - 1) die(2, "usage: msb-helper enter --pid PID [...] -- CMD ARGS...");
  char **cmd = argv + i + 1;

  // Cgroups first, so that nothing this command forks escapes its accounting (or its kill).
  for (int c = 0; c < ncg; c++) join_cgroup(cgroups[c]);
  apply_rlimits(&limits);
  // nsenter's order: the user namespace first (it grants the rights to join the others), the mount one last.
  static const char *const order[] = {"user", "cgroup", "ipc", "uts", "net", "pid", "mnt"};
  int fds[7];
  for (int n = 0; n < 7; n++) fds[n] = n == 0 && !userns ? -1 : open_ns(pid, order[n], n != 1);
  char rootpath[128];
  fmt(rootpath, sizeof rootpath, "/proc/%s/root", pid);
  int root = open(rootpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die(1, "open %s: %s", rootpath, strerror(errno));
  for (int n = 0; n < 7; n++)
    if (fds[n] >= 0 && setns(fds[n], 0) != 0) die(1, "enter %s namespace: %s", order[n], strerror(errno));
  if (fchdir(root) != 0 || chroot(".") != 0) die(1, "enter root: %s", strerror(errno));
  // A pid namespace applies to children only.
  pid_t child = fork();
  if (child < 0) die(1, "fork: %s", strerror(errno));
  if (child > 0) return wait_and_mirror(child);

  if (caps) limit_bounding_set(caps);
  if (set_ids && (uid != 0 || gid != 0)) {
    if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
      die(1, "switch to %u:%u: %s", (unsigned)uid, (unsigned)gid, strerror(errno));
  }
  // The same messages and codes as `env -i -C DIR`, so that callers map them to errors alike.
  if (chdir(cwd) != 0) die(125, "cannot change directory to '%s': %s", cwd, strerror(errno));
  // One descriptor for both streams, so that the order of writes survives (subprocess's stderr=STDOUT).
  if (merge && dup2(1, 2) < 0) die(1, "dup2: %s", strerror(errno));
  clearenv();
  for (int e = 0; e < nenv; e++) putenv((char *)envs[e]);
  execvp(cmd[0], cmd);
  die(errno == ENOENT ? 127 : 126, "'%s': %s", cmd[0], strerror(errno));
  return 1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "launch")) return cmd_launch(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "init")) return cmd_init();
  if (argc >= 2 && !strcmp(argv[1], "enter")) return cmd_enter(argc - 2, argv + 2);
  fprintf(stderr, "usage: msb-helper launch|init|enter ...\n");
  return 2;
}
