import { readFileSync } from "node:fs";
import { run } from "../util/run.js";
import { defaultAdmitted, derivedMaxima, hostBudget } from "./capacity.js";
import {
  DEFAULT_ID_POOL,
  findTool,
  helperFacts,
  helperPath,
  ID_LOCKS_DIR,
  idPool,
  launchMode,
  SUBID_USER,
} from "./host.js";
import { enforcement } from "./limits.js";
import { Sandbox } from "./sandbox.js";

export type CheckStatus = "ok" | "warn" | "fail";

export interface DoctorCheck {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about it, when not ok. */
  fix?: string;
}

export interface DoctorReport {
  ok: boolean;
  mode: string;
  checks: DoctorCheck[];
}

function readTrim(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

async function toolCheck(name: string, pkg: string, versionArg = "--version"): Promise<DoctorCheck> {
  const p = findTool(name);
  if (!p) return { name, status: "fail", detail: "not found", fix: `apt-get install ${pkg}` };
  const r = await run(p, [versionArg]).catch(() => undefined);
  return { name, status: "ok", detail: `${p} ${(r?.stdout || r?.stderr || "").split("\n")[0]!.trim()}` };
}

async function userNamespaces(): Promise<DoctorCheck> {
  const max = readTrim("/proc/sys/user/max_user_namespaces");
  const apparmor = readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  const debian = readTrim("/proc/sys/kernel/unprivileged_userns_clone");
  const fixAppArmor =
    "Ubuntu 23.10+ restricts unprivileged user namespaces through AppArmor: either run as root, or allow them with " +
    "`sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0` (persist it in /etc/sysctl.d/), or add an AppArmor " +
    "profile granting `userns` to bwrap";
  if (max === "0")
    return {
      name: "user namespaces",
      status: launchMode() === "root" ? "warn" : "fail",
      detail: "user.max_user_namespaces=0",
      fix: "sysctl user.max_user_namespaces=15000",
    };
  if (debian === "0")
    return {
      name: "user namespaces",
      status: launchMode() === "root" ? "warn" : "fail",
      detail: "kernel.unprivileged_userns_clone=0",
      fix: "sysctl kernel.unprivileged_userns_clone=1",
    };
  const probe = await run("/usr/bin/unshare", ["--user", "--map-root-user", "/bin/true"]).catch(() => undefined);
  if (probe?.code !== 0) {
    return {
      name: "user namespaces",
      status: launchMode() === "root" ? "warn" : "fail",
      detail: `cannot create one: ${(probe?.stderr ?? "").trim()}`,
      fix: apparmor === "1" ? fixAppArmor : "enable unprivileged user namespaces (sysctl) or run as root",
    };
  }
  return {
    name: "user namespaces",
    status: "ok",
    detail: apparmor === "1" ? "allowed (AppArmor restriction present but not blocking)" : "allowed",
  };
}

/** Root mode: whom root inside is on the host, whether each sandbox has a range of its own, and what is reserved. */
function idRangeCheck(): DoctorCheck {
  if (launchMode() !== "root") {
    return { name: "user ids", status: "ok", detail: "root inside is you (one id mapped: unprivileged mode)" };
  }
  try {
    const p = idPool();
    const end = p.base + p.size * p.slots - 1;
    const reserved = `${p.base}-${end}, from ${p.source}`;
    const reserve = `"${SUBID_USER}:${DEFAULT_ID_POOL.base}:${DEFAULT_ID_POOL.size * DEFAULT_ID_POOL.slots}"`;
    const fix = `reserve ${reserve} in /etc/subuid and /etc/subgid (scripts/install-system-deps.sh does)`;
    if (p.slots === 1)
      return {
        name: "user ids",
        status: "warn",
        detail:
          `root inside is host uid ${p.base}, never 0, but every sandbox shares that one range (ids ${reserved}): ` +
          "their per-user kernel quotas (inotify, message queues, pipe buffers) are shared",
        fix,
      };
    const detail =
      `every sandbox (and fork) gets a range of its own: ${p.slots} ranges of ${p.size} ids reserved ` +
      `(${reserved}), taken with a lock under ${ID_LOCKS_DIR} and freed when the sandbox ends; root inside is never 0`;
    if (p.source !== "default") return { name: "user ids", status: "ok", detail };
    return {
      name: "user ids",
      status: "warn",
      detail: `${detail}; the ids are not reserved in /etc/subuid, so another tool could hand them out`,
      fix,
    };
  } catch (e) {
    return { name: "user ids", status: "fail", detail: (e as Error).message, fix: "set MINISANDBOX_IDMAP=BASE:COUNT" };
  }
}

/** The helper's own report: the seccomp profile compiled in, Landlock's scopes, the OOM score floor. */
async function helperCheck(): Promise<DoctorCheck[]> {
  let helper: string;
  try {
    helper = helperPath();
  } catch (e) {
    return [{ name: "native helper", status: "fail", detail: (e as Error).message }];
  }
  const r = await run(helper, ["check"]);
  const facts = helperFacts();
  const abi = Number(facts.landlock_abi ?? 0);
  return [
    { name: "native helper", status: r.code === 0 ? "ok" : "fail", detail: helper },
    {
      name: "seccomp",
      status: facts.seccomp_embedded === "yes" ? "ok" : "warn",
      detail:
        `${facts.seccomp_allowed} syscalls allowed, ${facts.seccomp_refused} refused (EPERM), the rest ENOSYS; ` +
        "no_new_privs; off only for sandboxes created with `seccomp: false` (reported by their security())",
    },
    abi >= 6
      ? {
          name: "abstract sockets",
          status: "ok",
          detail: `a sandbox with network: true cannot reach the host's abstract unix sockets (Landlock ABI ${abi})`,
        }
      : {
          name: "abstract sockets",
          status: "warn",
          detail: `Landlock ABI ${abi}: a sandbox with network: true can reach the host's abstract unix sockets`,
          fix: "Linux 6.12 or later (Landlock ABI 6), with Landlock enabled (lsm=...,landlock)",
        },
    facts.oom_floor === "yes"
      ? { name: "OOM scores", status: "ok", detail: "sandbox processes score 1000, a floor nothing inside can lower" }
      : {
          name: "OOM scores",
          status: "warn",
          detail:
            "sandbox commands score 1000 but may lower themselves (no CAP_SYS_RESOURCE here); pid 1 keeps " +
            "the caller's score, below any command's, and the server cannot lower its own",
          fix: "run as root with CAP_SYS_RESOURCE",
        },
  ];
}

/** What sandboxes share read-only, how it is shown, and what a server here admits by default. */
function sharingChecks(): DoctorCheck[] {
  const budget = hostBudget();
  const admitted = defaultAdmitted(budget);
  const m = derivedMaxima(admitted, budget);
  const gib = (n: number): string => `${(n / 1024 ** 3).toFixed(1)} GiB`;
  return [
    {
      name: "shared trees",
      status: "ok",
      detail:
        "/usr, /etc, toolchains and read-only binds are shown through an overlay of each sandbox's own: " +
        "flock and inotify inside never meet the host's or a neighbour's (device nodes in /dev are the host's)",
    },
    {
      name: "host capacity",
      status: "ok",
      detail:
        `a server here admits ${admitted} sandboxes by default, each up to ${gib(m.memoryBytes)} of memory and ` +
        `${m.pids} processes (together within ${gib(budget.memoryBytes)} and ${budget.pids} pids, what the host ` +
        "keeps aside excluded); requests above a maximum are refused",
    },
  ];
}

function cgroupCheck(): DoctorCheck {
  const e = enforcement();
  if (e.memory && e.pids) {
    const cpu = e.cpuShare
      ? ", a fair CPU share each (and an optional `cpus` quota)"
      : "; no cpu controller: no CPU share";
    return {
      name: "cgroups",
      status: e.cpuShare ? "ok" : "warn",
      detail: `memory and processes limited per sandbox${cpu}`,
    };
  }
  const uid = process.getuid?.() ?? 0;
  const fix =
    launchMode() === "root"
      ? "mount the cgroup v1 memory and pids controllers"
      : "delegate a cgroup to this user: sudo sh -c 'for c in memory pids; do " +
        `mkdir -p /sys/fs/cgroup/$c/minisandbox-${uid}; ` +
        `chown -R ${uid} /sys/fs/cgroup/$c/minisandbox-${uid}; done'`;
  const missing = [...(e.memory ? [] : ["memory"]), ...(e.pids ? [] : ["process-count"])].join(" and ");
  return {
    name: "cgroups",
    status: "warn",
    detail: `${missing} limits are NOT enforced per sandbox (disk, CPU seconds and open files are)`,
    fix,
  };
}

/** A real sandbox, started and asked who it is; whether its workspaces are copy-on-write or copied. */
async function sandboxChecks(home: string): Promise<DoctorCheck[]> {
  try {
    const t0 = performance.now();
    const sb = await Sandbox.create({ home });
    const r = await sb.exec(["/bin/sh", "-c", "cat /proc/self/uid_map; grep ^Seccomp: /proc/self/status"]);
    const ms = performance.now() - t0;
    const copied = sb.notices.some((n) => /copying/.test(n));
    await sb.close();
    if (r.exitCode !== 0) return [{ name: "sandbox", status: "fail", detail: `${r.stderr.trim() || r.stdout}` }];
    const [map, seccomp] = r.stdout.trim().split("\n");
    const inside = `uid_map ${map?.trim().replace(/\s+/g, " ")}, ${seccomp?.replace(/\s+/g, " ")}`;
    return [
      {
        name: "sandbox",
        status: "ok",
        detail: `created, ran a command and closed in ${ms.toFixed(0)} ms (${launchMode()} mode; inside: ${inside})`,
      },
      copied
        ? { name: "overlayfs", status: "warn", detail: "cannot be mounted here: workspaces are copied (slower)" }
        : { name: "overlayfs", status: "ok", detail: "copy-on-write workspaces" },
    ];
  } catch (e) {
    return [{ name: "sandbox", status: "fail", detail: (e as Error).message, fix: "see the checks above" }];
  }
}

/** Every check `minisandbox doctor` runs. Extra checks (toolchains...) are appended by the caller. */
export async function runDoctor(
  home: string,
  extra: () => Promise<DoctorCheck[]> = async () => [],
): Promise<DoctorReport> {
  const checks: DoctorCheck[] = [
    await toolCheck("bwrap", "bubblewrap"),
    ...(await helperCheck()),
    await toolCheck("script", "bsdutils"),
    await userNamespaces(),
    idRangeCheck(),
    cgroupCheck(),
    ...sharingChecks(),
    await toolCheck("git", "git"),
    await toolCheck("tar", "tar"),
    await toolCheck("zstd", "zstd", "-V"),
  ];
  checks.push(...(await sandboxChecks(home)));
  checks.push(...(await extra()));
  const basics = new Set(["bwrap", "native helper", "script", "sandbox", "user ids"]);
  const ok = !checks.some((c) => c.status === "fail" && (basics.has(c.name) || c.name === "user namespaces"));
  return { ok, mode: launchMode(), checks };
}
