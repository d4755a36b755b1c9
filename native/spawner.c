/*
 * msb-helper spawner PARENT-PID: starts the helper's processes for one node process, so that node never forks itself
 * on a sandbox's path (a fork copies node's page tables: milliseconds per spawn, a hundred at a few hundred MB).
 *
 * It dies with its parent (PDEATHSIG) and hears only its parent: requests come on fd 0, a pipe only the parent holds,
 * as "LEN\0" then LEN bytes of NUL-terminated tokens:
 *   spawn ID FDS NENV ENV... ARGV...   FDS says, for the child's descriptors 0, 1, ...: `in` (a pipe the child reads),
 *                                      `out` (a pipe the child writes), `null` (/dev/null), `fd:N` (the parent's
 *                                      descriptor N, opened again through /proc: the very object it holds)
 *   close ID                           the parent opened its ends of the child's pipes: the spawner closes its own
 *   reap ID                            the parent saw the exit: the child is reaped (until then its pid is not reused)
 * and it answers on fd 1, one line each: "pid ID PID FD..." (the spawner's descriptors holding the parent's ends,
 * which the parent opens through /proc/<spawner>/fd/FD), "err ID message", "exit ID CODE SIGNAL".
 *
 * A child gets exactly its FDS (nothing else the spawner holds), default signal dispositions, an empty signal mask and
 * the environment it was given, then execs ARGV[0].
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_MAX_FDS 16
#define SPAWN_MAX_CHILDREN 4096
#define SPAWN_MAX_MESSAGE (4 << 20)

struct spawned {
  char id[32];
  pid_t pid;
  int pidfd;   /* -1 once its exit was reported */
  int held[SPAWN_MAX_FDS];
  int nheld;
};

static struct spawned children[SPAWN_MAX_CHILDREN];
static int nchildren;
static pid_t spawner_parent;

static void say(const char *f, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *f, ...) {
  char line[512];
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(line, sizeof line - 1, f, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  for (int off = 0; off < n;) {
    ssize_t w = write(1, line + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _exit(1); /* the parent is gone */
    off += (int)w;
  }
}

static struct spawned *find_child(const char *id) {
  for (int i = 0; i < nchildren; i++)
    if (!strcmp(children[i].id, id)) return &children[i];
  return NULL;
}

static void close_held(struct spawned *c) {
  for (int k = 0; k < c->nheld; k++) close(c->held[k]);
  c->nheld = 0;
}

/* In the child: its descriptors 0..n-1 from `mine` (moved above n first, so that none overwrites another). */
static void child_exec(const int *mine, int n, char **env, char **argv) {
  int high[SPAWN_MAX_FDS];
  for (int k = 0; k < n; k++)
    if ((high[k] = fcntl(mine[k], F_DUPFD_CLOEXEC, n)) < 0) _exit(126);
  for (int k = 0; k < n; k++)
    if (dup2(high[k], k) != k) _exit(126);
  if (syscall(SYS_close_range, (unsigned)n, ~0U, 0) != 0)
    for (int fd = n; fd < 65536; fd++) close(fd);
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  for (int s = 1; s < _NSIG; s++) sigaction(s, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(argv[0], argv, env);
  dprintf(2, "msb-helper spawner: exec %s: %s\n", argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* One of the child's descriptors as FDS says: the child's end in `mine`, the parent's (if any) kept in `c`. */
static int child_fd(struct spawned *c, const char *spec, int *mine) {
  int p[2];
  if (!strcmp(spec, "null")) return (*mine = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ? -1 : 0;
  if (!strncmp(spec, "fd:", 3)) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)spawner_parent, atoi(spec + 3));
    return (*mine = open(path, O_RDONLY | O_CLOEXEC)) < 0 ? -1 : 0;
  }
  int in = !strcmp(spec, "in");
  if (!in && strcmp(spec, "out") != 0) return errno = EINVAL, -1;
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  *mine = in ? p[0] : p[1];
  c->held[c->nheld++] = in ? p[1] : p[0];
  return 0;
}

/* "spawn ID FDS NENV ENV... ARGV...": the child started, or "err ID why". */
static void do_spawn(char **tok, int ntok) {
  if (ntok < 5 || nchildren >= SPAWN_MAX_CHILDREN || strlen(tok[1]) >= sizeof children[0].id) {
    say("err %s malformed request or too many children", ntok > 1 ? tok[1] : "?");
    return;
  }
  int nenv = atoi(tok[3]);
  if (nenv < 0 || 4 + nenv >= ntok) return say("err %s malformed environment", tok[1]);
  struct spawned *c = &children[nchildren];
  memset(c, 0, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", tok[1]);
  int mine[SPAWN_MAX_FDS], n = 0, failed = 0;
  char specs[256];
  snprintf(specs, sizeof specs, "%s", tok[2]);
  for (char *s = strtok(specs, ","); s && !failed; s = strtok(NULL, ",")) {
    if (n == SPAWN_MAX_FDS || child_fd(c, s, &mine[n]) != 0) failed = 1;
    else n++;
  }
  char **env = calloc((size_t)nenv + 1, sizeof *env);
  if (!env) failed = 1;
  for (int k = 0; env && k < nenv; k++) env[k] = tok[4 + k];
  pid_t pid = failed ? -1 : fork();
  if (pid == 0) child_exec(mine, n, env, tok + 4 + nenv);
  int err = errno;
  for (int k = 0; k < n; k++) close(mine[k]);
  free(env);
  if (pid > 0) c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pid < 0 || c->pidfd < 0) {
    close_held(c);
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    return say("err %s %s", tok[1], strerror(pid < 0 ? err : errno));
  }
  c->pid = pid;
  nchildren++;
  char line[256] = "";
  for (int k = 0, off = 0; k < c->nheld; k++) off += snprintf(line + off, sizeof line - (size_t)off, " %d", c->held[k]);
  say("pid %s %d%s", c->id, (int)pid, line);
}

static void do_request(char **tok, int ntok) {
  struct spawned *c = ntok == 2 ? find_child(tok[1]) : NULL;
  if (ntok >= 1 && !strcmp(tok[0], "spawn")) return do_spawn(tok, ntok);
  if (!c) return;
  if (!strcmp(tok[0], "close")) return close_held(c);
  if (strcmp(tok[0], "reap") != 0 || c->pidfd >= 0) return;
  waitpid(c->pid, NULL, 0);
  close_held(c);
  *c = children[--nchildren];
}

/* A child's exit, seen on its pidfd; left a zombie (WNOWAIT) until the parent says "reap". */
static void report_exit(struct spawned *c) {
  siginfo_t si = {0};
  if (syscall(SYS_waitid, P_PIDFD, c->pidfd, &si, WEXITED | WNOWAIT | WNOHANG, NULL) != 0 || si.si_pid == 0) return;
  close(c->pidfd);
  c->pidfd = -1;
  int code = si.si_code == CLD_EXITED ? si.si_status : -1;
  int sig = si.si_code == CLD_EXITED ? 0 : si.si_status;
  say("exit %s %d %d", c->id, code, sig);
}

/* Whole messages from `buf` ("LEN\0" + LEN bytes); returns how many bytes were used. */
static size_t take_messages(char *buf, size_t len) {
  size_t used = 0;
  for (;;) {
    char *head_end = memchr(buf + used, '\0', len - used);
    if (!head_end) break;
    char *end;
    unsigned long want = strtoul(buf + used, &end, 10);
    size_t head = (size_t)(head_end - (buf + used)) + 1;
    if (end != head_end || want == 0 || want > SPAWN_MAX_MESSAGE) _exit(2); /* not our parent's framing */
    if (used + head + want > len) break;
    char *msg = buf + used + head;
    if (msg[want - 1] != '\0') _exit(2);
    static char *tok[1 << 16];
    int ntok = 0;
    for (size_t k = 0; k < want && ntok < (1 << 16) - 1; k += strlen(msg + k) + 1) tok[ntok++] = msg + k;
    tok[ntok] = NULL;
    do_request(tok, ntok);
    used += head + want;
  }
  return used;
}

int cmd_spawner(int argc, char **argv) {
  if (argc != 1) {
    fprintf(stderr, "usage: msb-helper spawner PARENT-PID\n");
    return 2;
  }
  spawner_parent = (pid_t)atoi(argv[0]);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != spawner_parent) return 1; /* the parent died before the line above */
  signal(SIGPIPE, SIG_IGN);
  static char buf[SPAWN_MAX_MESSAGE + 64];
  size_t len = 0;
  static struct pollfd pfd[SPAWN_MAX_CHILDREN + 1];
  static struct spawned *who[SPAWN_MAX_CHILDREN + 1];
  for (;;) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
    for (int i = 0; i < nchildren; i++) {
      if (children[i].pidfd < 0) continue;
      who[n] = &children[i];
      pfd[n++] = (struct pollfd){.fd = children[i].pidfd, .events = POLLIN};
    }
    if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR) return 1;
    for (int k = 1; k < n; k++)
      if (pfd[k].revents) report_exit(who[k]);
    if (!pfd[0].revents) continue;
    ssize_t r = read(0, buf + len, sizeof buf - len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return 0; /* the parent closed its end: nothing more will come */
    len += (size_t)r;
    size_t used = take_messages(buf, len);
    memmove(buf, buf + used, len - used);
    len -= used;
  }
}
