import { existsSync } from "node:fs";
import { run } from "../util/run.js";

/**
 * The user's pip configuration, carried into build sandboxes: a sandbox has its own HOME, so config files under
 * the user's home and `file://` indexes on the host would otherwise be invisible. We ask pip itself what is in
 * force (config files of every level plus PIP_* variables) and turn it into PIP_* variables, binding every local
 * path it names read-only at the same path.
 */
export interface PipSettings {
  env: Record<string, string>;
  /** Host paths to bind read-only at the same path. */
  mounts: string[];
}

const PATH_KEYS = new Set([
  "find-links",
  "index-url",
  "extra-index-url",
  "cert",
  "client-cert",
  "constraint",
  "requirement",
  "trusted-host-file",
]);

function localPaths(value: string): string[] {
  return (
    value
      .split(/\s+/)
      .filter(Boolean)
      .map((v) => (v.startsWith("file://") ? decodeURIComponent(v.slice("file://".length)) : v))
      // A PEP 503 index directory (".../simple") usually links to files beside it: mount its parent.
      .map((v) => v.replace(/\/+$/, "").replace(/\/simple$/, ""))
      .filter((v) => v.startsWith("/") && existsSync(v))
  );
}

/** Parse `pip config list` lines: `section.key='value'`. Later sections win (env over files). */
export function parsePipConfigList(text: string, env: NodeJS.ProcessEnv = {}): PipSettings {
  const settings = new Map<string, string>();
  const order = (section: string): number =>
    section === ":env:" ? 3 : section === "install" ? 2 : section === "global" ? 1 : 0;
  const rank = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^([^.=]+|:env:)\.([A-Za-z0-9_-]+)='(.*)'$/.exec(line.trim());
    if (!m) continue;
    const [, section, key, value] = m as unknown as [string, string, string, string];
    if (order(section) === 0) continue;
    if ((rank.get(key) ?? 0) > order(section)) continue;
    rank.set(key, order(section));
    settings.set(key, value);
  }
  // Variables pip reads directly win over everything.
  for (const [k, v] of Object.entries(env)) {
    if (k.startsWith("PIP_") && v !== undefined) settings.set(k.slice(4).toLowerCase().replace(/_/g, "-"), v);
  }
  const out: PipSettings = { env: {}, mounts: [] };
  for (const [key, value] of settings) {
    out.env[`PIP_${key.toUpperCase().replace(/-/g, "_")}`] = value;
    if (PATH_KEYS.has(key)) out.mounts.push(...localPaths(value));
  }
  out.mounts = [...new Set(out.mounts)];
  return out;
}

/** Read the configuration as the given interpreter's pip sees it (falls back to PIP_* variables only). */
export async function pipSettings(python: string, env: NodeJS.ProcessEnv = process.env): Promise<PipSettings> {
  const r = await run(python, ["-m", "pip", "config", "list"], {
    env: { ...env, PIP_DISABLE_PIP_VERSION_CHECK: "1" },
  }).catch(() => undefined);
  return parsePipConfigList(r?.code === 0 ? r.stdout : "", env);
}

/** Settings that are credentials or hand them out: never given to an agent's or an evaluation's sandbox. */
const SECRET_KEYS = new Set(["client-cert", "keyring-provider", "keyring"]);
/** A URL that leaves the machine (anything but file://): its token may be anywhere in it (user, path, query). */
const REMOTE_URL = /^[a-z][a-z0-9+.-]*:\/\//i;

/**
 * The user's pip configuration as agent, rollout and evaluation sandboxes get it: local indexes and paths only.
 * A remote index, find-links page or proxy can carry a token anywhere (user:token@, a path segment, a query), so
 * no remote URL is given at all, nor client certificates or keyrings; `file://` indexes and their read-only mounts
 * stay, so eval.sh's re-install still works offline. Build steps get the settings as they are (`pipSettings`).
 */
export function withoutCredentials(settings: PipSettings): PipSettings {
  const env: Record<string, string> = {};
  const dropped = new Set<string>();
  for (const [name, value] of Object.entries(settings.env)) {
    const key = name.slice("PIP_".length).toLowerCase().replace(/_/g, "-");
    const words = value.split(/\s+/).filter(Boolean);
    const kept = words.filter((w) => !REMOTE_URL.test(w) || w.toLowerCase().startsWith("file://"));
    if (SECRET_KEYS.has(key) || (words.length > 0 && kept.length === 0)) {
      dropped.add(value);
      continue;
    }
    env[name] = kept.length === words.length ? value : kept.join(" ");
  }
  return { env, mounts: settings.mounts.filter((m) => ![...dropped].some((d) => localPaths(d).includes(m))) };
}
