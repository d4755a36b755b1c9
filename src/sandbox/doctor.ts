import { existsSync, readFileSync } from "node:fs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../util/run.js";
import { findTool, helperPath, launchMode } from "./host.js";
import { cgroupSupport } from "./limits.js";
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

async function overlayCheck(): Promise<DoctorCheck> {
  const fs = readTrim("/proc/filesystems") ?? "";
  if (!/\toverlay$/m.test(fs)) {
    return {
      name: "overlayfs",
      status: "warn",
      detail: "not in /proc/filesystems: workspaces are copied (slower)",
      fix: "modprobe overlay",
    };
  }
  const dir = mkdtempSync(join(tmpdir(), "msb-doctor-"));
  try {
    const ns = launchMode() === "root" ? ["--mount"] : ["--user", "--map-root-user", "--mount"];
    const opts = launchMode() === "root" ? "" : ",userxattr";
    const script = `mount -t tmpfs t "$1" && mkdir "$1/l" "$1/u" "$1/w" "$1/m" && mount -t overlay overlay -o "lowerdir=$1/l,upperdir=$1/u,workdir=$1/w${opts}" "$1/m"`;
    const r = await run("/usr/bin/unshare", [...ns, "/bin/sh", "-c", script, "sh", dir]);
    if (r.code !== 0)
      return {
        name: "overlayfs",
        status: "warn",
        detail: `cannot mount: ${r.stderr.trim()}; workspaces are copied (slower)`,
      };
    return { name: "overlayfs", status: "ok", detail: "copy-on-write workspaces" };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function cgroupCheck(): DoctorCheck {
  const s = cgroupSupport();
  const v2only = existsSync("/sys/fs/cgroup/cgroup.controllers") && !existsSync("/sys/fs/cgroup/memory");
  if (s.memory && s.pids)
    return {
      name: "cgroups",
      status: "ok",
      detail: "v1 memory + pids controllers: memory and process limits enforced per sandbox",
    };
  const what = v2only
    ? "cgroup v2 only (not yet supported)"
    : launchMode() === "root"
      ? "memory/pids controllers not mounted"
      : "not writable as this user";
  return {
    name: "cgroups",
    status: "warn",
    detail: `${what}: falling back to rlimits (RLIMIT_AS per process, RLIMIT_NPROC per user)`,
    fix: "run as root on a host with cgroup v1 memory and pids controllers for per-sandbox limits",
  };
}

async function sandboxCheck(home: string): Promise<DoctorCheck> {
  try {
    const t0 = performance.now();
    const sb = await Sandbox.create({ home });
    const r = await sb.exec(["/bin/echo", "ok"]);
    const ms = performance.now() - t0;
    await sb.close();
    if (r.stdout.trim() !== "ok")
      return { name: "sandbox", status: "fail", detail: `unexpected output ${JSON.stringify(r.stdout)}` };
    return {
      name: "sandbox",
      status: "ok",
      detail: `created, ran a command and closed in ${ms.toFixed(0)} ms (${launchMode()} mode)`,
    };
  } catch (e) {
    return { name: "sandbox", status: "fail", detail: (e as Error).message, fix: "see the checks above" };
  }
}

function helperCheck(): DoctorCheck {
  const path = helperPath();
  if (path) return { name: "native helper", status: "ok", detail: `${path}: one exec to launch or enter a sandbox` };
  return {
    name: "native helper",
    status: "warn",
    detail:
      "missing: sandboxes start and run commands through unshare/nsenter/setpriv/env (each step an extra exec, slower)",
    fix: "install a C compiler with static libc (apt-get install gcc libc6-dev), then npm run build",
  };
}

/** Every check `minisandbox doctor` runs. Extra checks (toolchains...) are appended by the caller. */
export async function runDoctor(
  home: string,
  extra: () => Promise<DoctorCheck[]> = async () => [],
): Promise<DoctorReport> {
  const checks: DoctorCheck[] = [
    await toolCheck("bwrap", "bubblewrap"),
    helperCheck(),
    await toolCheck("unshare", "util-linux"),
    await toolCheck("nsenter", "util-linux"),
    await toolCheck("setpriv", "util-linux"),
    await toolCheck("script", "bsdutils"),
    await userNamespaces(),
    await overlayCheck(),
    cgroupCheck(),
    {
      name: "limits",
      status: "ok",
      detail: "CPU time and open files via rlimits; writable layer via tmpfs size; output via capture caps",
    },
    await toolCheck("git", "git"),
    await toolCheck("tar", "tar"),
    await toolCheck("zstd", "zstd", "-V"),
  ];
  checks.push(await sandboxCheck(home));
  checks.push(...(await extra()));
  const basics = new Set(["bwrap", "unshare", "nsenter", "setpriv", "script", "sandbox"]);
  const ok = !checks.some((c) => c.status === "fail" && (basics.has(c.name) || c.name === "user namespaces"));
  return { ok, mode: launchMode(), checks };
}
