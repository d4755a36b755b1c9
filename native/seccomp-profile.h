/*
 * The seccomp profile every process inside a sandbox runs under: an allow-list (syscalls not named here fail with
 * ENOSYS, so that libc falls back as it does on an older kernel) plus an explicit refusal list (EPERM), stricter
 * than Docker's default profile. x86_64 only; other architectures (32-bit int 0x80, x32) kill the process.
 *
 * Refused: the kernel keyring, every mount and namespace call (clone with namespace flags included), module and
 * kexec loading, bpf, perf_event_open, userfaultfd, io_uring, open_by_handle_at, reading or writing another
 * process's memory, NUMA policy, clock and hostname setting, swap, quota, accounting, reboot, raw I/O ports,
 * syslog, vsock sockets (they ignore network namespaces) and TIOCSTI (typing into a terminal). personality values
 * other than the usual ones are not allowed (ENOSYS).
 */
#ifndef MSB_SECCOMP_PROFILE_H
#define MSB_SECCOMP_PROFILE_H

static const char *const SECCOMP_ALLOWED[] = {
  /* files and descriptors */
  "read", "write", "open", "close", "stat", "fstat", "lstat", "poll", "lseek", "pread64", "pwrite64", "readv",
  "writev", "access", "pipe", "select", "dup", "dup2", "dup3", "pipe2", "sendfile", "fcntl", "flock", "fsync",
  "fdatasync", "truncate", "ftruncate", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename",
  "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink",
  "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat",
  "umask", "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat", "statfs", "fstatfs", "openat",
  "openat2", "newfstatat", "statx", "faccessat", "faccessat2", "pselect6", "ppoll", "readahead", "setxattr",
  "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
  "removexattr", "lremovexattr", "fremovexattr", "fadvise64", "fallocate", "splice", "tee", "sync_file_range",
  "vmsplice", "preadv", "pwritev", "preadv2", "pwritev2", "copy_file_range", "close_range", "sync", "syncfs",
  "chroot", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "memfd_create",
  /* memory */
  "mmap", "mprotect", "munmap", "brk", "mremap", "msync", "mincore", "madvise", "mlock", "mlock2", "munlock",
  "mlockall", "munlockall", "remap_file_pages", "pkey_mprotect", "pkey_alloc", "pkey_free", "membarrier",
  /* processes, threads, signals */
  "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
  "rt_sigsuspend", "rt_tgsigqueueinfo", "sigaltstack", "pause", "nanosleep", "clock_nanosleep", "getitimer",
  "setitimer", "alarm", "getpid", "getppid", "gettid", "fork", "vfork", "execve", "execveat", "exit", "exit_group",
  "wait4", "waitid", "kill", "tkill", "tgkill", "set_tid_address", "set_robust_list", "get_robust_list", "futex",
  "futex_waitv", "restart_syscall", "arch_prctl", "prctl", "set_thread_area", "get_thread_area", "rseq",
  "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "ptrace", "seccomp", "capget", "capset", "getrandom",
  "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
  /* identity and limits */
  "getuid", "getgid", "geteuid", "getegid", "setuid", "setgid", "setreuid", "setregid", "setresuid", "getresuid",
  "setresgid", "getresgid", "setfsuid", "setfsgid", "getgroups", "setgroups", "setpgid", "getpgrp", "getpgid",
  "setsid", "getsid", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "uname", "sysinfo",
  "getpriority", "setpriority", "ioprio_get", "ioprio_set", "sched_yield", "sched_setparam", "sched_getparam",
  "sched_setscheduler", "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
  "sched_rr_get_interval", "sched_setaffinity", "sched_getaffinity", "sched_setattr", "sched_getattr", "getcpu",
  /* time */
  "gettimeofday", "time", "clock_gettime", "clock_getres", "adjtimex", "timer_create", "timer_settime",
  "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
  /* events and asynchronous I/O */
  "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
  "eventfd2", "signalfd", "signalfd4", "io_setup", "io_destroy", "io_getevents", "io_pgetevents", "io_submit",
  "io_cancel",
  /* System V and POSIX IPC (private to the sandbox's ipc namespace) */
  "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv",
  "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
  /* sockets */
  "socket", "connect", "accept", "accept4", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
  "shutdown", "bind", "listen", "getsockname", "getpeername", "socketpair", "setsockopt", "getsockopt",
};

static const char *const SECCOMP_REFUSED[] = {
  "add_key", "request_key", "keyctl",
  "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
  "mount_setattr", "unshare", "setns",
  "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module",
  "kexec_load", "kexec_file_load", "reboot",
  "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
  "name_to_handle_at", "open_by_handle_at", "fanotify_init", "fanotify_mark",
  "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease", "kcmp",
  "mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages", "set_mempolicy_home_node",
  "settimeofday", "clock_settime", "clock_adjtime", "sethostname", "setdomainname",
  "swapon", "swapoff", "quotactl", "quotactl_fd", "acct", "syslog", "iopl", "ioperm", "modify_ldt",
  "lookup_dcookie", "uselib", "ustat", "sysfs", "_sysctl", "vhangup", "nfsservctl", "memfd_secret",
};

/* `personality` values a program may set (Docker's: linux, linux32, uname26 and the query). */
static const unsigned long SECCOMP_PERSONALITIES[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

#endif
