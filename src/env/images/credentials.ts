/**
 * Registry credentials where podman and Docker keep them: `$REGISTRY_AUTH_FILE`, then
 * `$XDG_RUNTIME_DIR/containers/auth.json`, `~/.config/containers/auth.json`, then `$DOCKER_CONFIG/config.json`
 * (default `~/.docker/config.json`). Each holds `{"auths": {"<registry>[/<ns>]": {"auth": base64("user:pass")}}}`;
 * the first file with an entry for the registry wins, and within it the longest matching namespace (as podman does).
 * Credential helpers (`credsStore`, `credHelpers`) are not run.
 */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { InvalidInputError } from "../../errors.js";
import { DOCKER_HUB } from "./reference.js";

export interface Credentials {
  username: string;
  password: string;
  /** The file they came from, for messages (never the secret). */
  file: string;
}

type Env = Record<string, string | undefined>;

export function authFiles(env: Env = process.env): string[] {
  const home = env.HOME ?? homedir();
  const files: string[] = [];
  if (env.REGISTRY_AUTH_FILE) files.push(env.REGISTRY_AUTH_FILE);
  if (env.XDG_RUNTIME_DIR) files.push(join(env.XDG_RUNTIME_DIR, "containers", "auth.json"));
  files.push(join(env.XDG_CONFIG_HOME ?? join(home, ".config"), "containers", "auth.json"));
  files.push(join(env.DOCKER_CONFIG ?? join(home, ".docker"), "config.json"));
  return files;
}

const HUB_HOSTS = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

/** `https://index.docker.io/v1/` -> `docker.io`; `https://host:5000/v2/` -> `host:5000`; `host/ns` stays. */
function normalizeKey(key: string): string {
  const bare = key
    .replace(/^https?:\/\//, "")
    .replace(/\/+(v1|v2)\/?$/, "")
    .replace(/\/+$/, "");
  const slash = bare.indexOf("/");
  const host = slash < 0 ? bare : bare.slice(0, slash);
  return (HUB_HOSTS.has(host) ? DOCKER_HUB : host) + (slash < 0 ? "" : bare.slice(slash));
}

function decodeEntry(entry: unknown, file: string): Credentials | undefined {
  if (typeof entry !== "object" || entry === null) return undefined;
  const e = entry as { auth?: unknown; username?: unknown; password?: unknown };
  if (typeof e.auth === "string" && e.auth !== "") {
    const text = Buffer.from(e.auth, "base64").toString("utf8");
    const colon = text.indexOf(":");
    if (colon <= 0) throw new InvalidInputError(`${file}: an "auth" entry is not base64 of user:password`);
    return { username: text.slice(0, colon), password: text.slice(colon + 1), file };
  }
  if (typeof e.username === "string" && typeof e.password === "string")
    return { username: e.username, password: e.password, file };
  return undefined;
}

function readAuths(file: string): Record<string, unknown> | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
  try {
    const auths = (JSON.parse(text) as { auths?: unknown }).auths;
    return typeof auths === "object" && auths !== null ? (auths as Record<string, unknown>) : undefined;
  } catch (e) {
    throw new InvalidInputError(`${file} is not valid JSON (${(e as Error).message}); fix or remove it`);
  }
}

/** Credentials for `registry/repository`, or undefined (anonymous). */
export function findCredentials(registry: string, repository: string, env: Env = process.env): Credentials | undefined {
  const scopes: string[] = [];
  const parts = repository.split("/");
  for (let n = parts.length; n >= 1; n--) scopes.push(`${registry}/${parts.slice(0, n).join("/")}`);
  scopes.push(registry);
  for (const file of authFiles(env)) {
    const auths = readAuths(file);
    if (!auths) continue;
    const byKey = new Map(Object.entries(auths).map(([k, v]) => [normalizeKey(k), v]));
    for (const scope of scopes) {
      const found = decodeEntry(byKey.get(scope), file);
      if (found) return found;
    }
  }
  return undefined;
}
