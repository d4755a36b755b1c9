/**
 * Package indexes that cannot be reached, left out before pip runs. pip retries an unreachable index five times
 * per requirement with back-off, so a machine with only a local index (offline, air-gapped, a private mirror)
 * would spend about a minute per environment waiting on the default one. One quick connection per host says
 * whether it answers; the indexes that do not are dropped from the build's settings, and the build says so.
 */
import { connect } from "node:net";
import type { PipSettings } from "./pip-config.js";

/** pip's own default when no index is configured. */
export const DEFAULT_INDEX_URL = "https://pypi.org/simple";
const PROBE_TIMEOUT_MS = 3000;
/** A probe's answer is reused for this long (one per host for a whole prepare, not one per build). */
const PROBE_TTL_MS = 5 * 60_000;

/** Why a host cannot be reached, or undefined when it answers. */
export type Probe = (host: string, port: number) => Promise<string | undefined>;

export interface ReachableSettings {
  settings: PipSettings;
  /** One line for the build's log and progress when an index was left out. */
  note?: string;
}

const isRemote = (url: string): boolean => /^https?:\/\//i.test(url);
const words = (v: string | undefined): string[] => (v ?? "").split(/\s+/).filter(Boolean);
const truthy = (v: string | undefined): boolean => v !== undefined && !/^(0|false|no|off|)$/i.test(v.trim());

/**
 * `settings` without the indexes that do not answer: the first reachable one becomes the index, the others stay
 * extra indexes; with none left, pip uses its find-links alone (`PIP_NO_INDEX`). Unchanged when everything answers,
 * when no index is used at all, or when a proxy is configured (the proxy decides what is reachable, not us).
 */
export async function withReachableIndexes(
  settings: PipSettings,
  env: NodeJS.ProcessEnv = process.env,
  probe: Probe = cachedProbe,
): Promise<ReachableSettings> {
  const pip = settings.env;
  if (
    truthy(pip.PIP_NO_INDEX) ||
    pip.PIP_PROXY ||
    env.https_proxy ||
    env.HTTPS_PROXY ||
    env.http_proxy ||
    env.HTTP_PROXY
  )
    return { settings };
  const indexes = [pip.PIP_INDEX_URL ?? DEFAULT_INDEX_URL, ...words(pip.PIP_EXTRA_INDEX_URL)];
  const why = new Map<string, string>();
  for (const url of new Set(indexes.filter(isRemote))) {
    const reason = await probeUrl(url, probe);
    if (reason) why.set(url, reason);
  }
  if (why.size === 0) return { settings };
  const kept = indexes.filter((u) => !why.has(u));
  const findLinks = words(pip.PIP_FIND_LINKS);
  if (kept.length === 0 && findLinks.length === 0) return { settings, note: unreachableNote(why, []) };
  const out: Record<string, string> = { ...pip };
  delete out.PIP_INDEX_URL;
  delete out.PIP_EXTRA_INDEX_URL;
  if (kept.length === 0) out.PIP_NO_INDEX = "1";
  else {
    out.PIP_INDEX_URL = kept[0]!;
    if (kept.length > 1) out.PIP_EXTRA_INDEX_URL = kept.slice(1).join(" ");
  }
  return { settings: { ...settings, env: out }, note: unreachableNote(why, [...kept, ...findLinks]) };
}

function unreachableNote(why: Map<string, string>, used: string[]): string {
  const lost = [...why].map(([url, reason]) => `${redacted(url)} (${reason})`).join(", ");
  const plural = why.size > 1 ? "package indexes are" : "package index is";
  if (used.length === 0) return `the ${plural} unreachable from this machine: ${lost}; pip has nothing else to use`;
  return `the ${plural} unreachable from this machine: ${lost}; pip uses only ${used.map(redacted).join(", ")}`;
}

/**
 * A URL as a note shows it (progress, build logs, a build error's message): its credentials masked as pip masks
 * them, `user:****@` with a password, `****@` for a user alone (a token).
 */
function redacted(url: string): string {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^@/?#]*)@/i.exec(url);
  if (!m) return url;
  const colon = m[2]!.indexOf(":");
  const auth = colon >= 0 ? `${m[2]!.slice(0, colon)}:****` : "****";
  return `${m[1]}${auth}@${url.slice(m[0].length)}`;
}

async function probeUrl(url: string, probe: Probe): Promise<string | undefined> {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined; // pip reports a malformed URL itself
  }
  const port = u.port ? Number(u.port) : u.protocol === "https:" ? 443 : 80;
  return probe(u.hostname.replace(/^\[|\]$/g, ""), port);
}

const probes = new Map<string, { at: number; answer: Promise<string | undefined> }>();

/** `connectProbe`, asked at most once per host and port every few minutes. */
export const cachedProbe: Probe = (host, port) => {
  const key = `${host}:${port}`;
  const hit = probes.get(key);
  if (hit && Date.now() - hit.at < PROBE_TTL_MS) return hit.answer;
  const answer = connectProbe(host, port);
  probes.set(key, { at: Date.now(), answer });
  return answer;
};

/** A TCP connection to host:port (name resolution included), given up after a few seconds. */
export function connectProbe(host: string, port: number, timeoutMs = PROBE_TIMEOUT_MS): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (reason: string | undefined): void => {
      socket.destroy();
      resolve(reason);
    };
    socket.setTimeout(timeoutMs, () => done(`no answer within ${timeoutMs / 1000} s`));
    socket.once("connect", () => done(undefined));
    socket.once("error", (e: NodeJS.ErrnoException) => done(`${e.code ?? "error"} ${host}`));
  });
}

const said = new Set<string>();
/** True the first time this process sees `note` (said once in the progress; every build's log has it). */
export function firstTime(note: string): boolean {
  if (said.has(note)) return false;
  said.add(note);
  return true;
}
