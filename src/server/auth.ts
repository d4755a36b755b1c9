/**
 * Who is calling: tokens, the principals they stand for, and the token file `serve` writes when no token is given.
 * Tokens are compared as SHA-256 digests in constant time; a token never appears in logs or errors.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import type { Limits } from "../sandbox/limits.js";
import { native } from "../wire/index.js";
import { tokenFilePath } from "../wire/token-file.js";
import { InvalidInputError } from "../errors.js";

/** A client identity. Sandboxes belong to the principal that created them; an admin sees all of them. */
export interface Principal {
  name: string;
  admin: boolean;
  /** Live sandboxes this principal may hold at once (undefined: only the server-wide cap). */
  maxSandboxes?: number;
  /** May ask for `network: true` (the host's network). Admins may. */
  network?: boolean;
  /** This principal's maxima (and defaults) per sandbox, under the server's. */
  limits?: Limits;
}

export interface TokenEntry {
  token: string;
  principal: Principal;
}

/** The principal of an open server (`--no-auth`): everyone is it. */
export const ANONYMOUS: Principal = { name: "anonymous", admin: true };

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();

export type AuthResult = { ok: true; principal: Principal } | { ok: false; status: 401 | 403; detail: string };

/** Maps an `X-API-Key` header to a principal, with SWE-ReX's answers for a missing (403) or wrong (401) key. */
export class Authenticator {
  private readonly entries: { digest: Buffer; principal: Principal }[];

  /** `tokens` empty: an open server (every request is `ANONYMOUS`). */
  constructor(tokens: readonly TokenEntry[]) {
    this.entries = tokens.map((t) => ({ digest: digest(t.token), principal: t.principal }));
  }

  get open(): boolean {
    return this.entries.length === 0;
  }

  identify(key: string | string[] | undefined): AuthResult {
    if (this.open) return { ok: true, principal: ANONYMOUS };
    if (key === undefined) return { ok: false, status: 403, detail: "Not authenticated" };
    if (typeof key !== "string") return { ok: false, status: 401, detail: "Invalid API Key" };
    const d = digest(key);
    let found: Principal | undefined;
    // Compare with every entry, so the time taken does not tell which one matched.
    for (const e of this.entries) if (timingSafeEqual(d, e.digest)) found ??= e.principal;
    return found ? { ok: true, principal: found } : { ok: false, status: 401, detail: "Invalid API Key" };
  }
}

/** A fresh token: 32 random bytes, URL-safe base64. */
export function generateToken(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * The token of `<home>/server/token`, created (mode 0600, atomically) when missing. A file that others could read
 * or that is not a regular file owned by us is not trusted: a new token replaces it.
 */
export function ensureTokenFile(home: string): { token: string; path: string; created: boolean } {
  const path = tokenFilePath(home);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  try {
    const st = lstatSync(path);
    const ours = st.isFile() && st.uid === process.getuid!() && (st.mode & 0o077) === 0;
    const token = ours ? readFileSync(path, "utf8").trim() : "";
    if (token.length >= 32) return { token, path, created: false };
  } catch {
    /* missing: create it */
  }
  const token = generateToken();
  const partial = `${path}.${process.pid}.partial`;
  const fd = openSync(partial, "wx", 0o600);
  try {
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
  chmodSync(partial, 0o600);
  renameSync(partial, path);
  return { token, path, created: true };
}

/**
 * A tokens file: JSON `{"tokens": [{"name": "alice", "token": "...", "admin": false, "max_sandboxes": 8,
 * "network": true, "limits": {"memory_bytes": 2147483648, "pids": 512, "disk_bytes": ..., "cpus": 1}}]}`: `network`
 * lets a non-admin ask for the host's network, `limits` are that principal's maxima (under the server's).
 * It must be readable by its owner only; names and tokens must be unique, tokens at least 16 characters.
 */
export function loadTokensFile(path: string): TokenEntry[] {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(path);
  } catch {
    throw new InvalidInputError(`tokens file ${path} not found`);
  }
  if (!st.isFile()) throw new InvalidInputError(`tokens file ${path} is not a regular file`);
  if ((st.mode & 0o077) !== 0)
    throw new InvalidInputError(
      `tokens file ${path} is readable by others (mode ${(st.mode & 0o777).toString(8)}); chmod 600 it`,
    );
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InvalidInputError(`tokens file ${path}: not valid JSON (${(e as Error).message})`);
  }
  const list = (parsed as { tokens?: unknown })?.tokens;
  if (!Array.isArray(list) || list.length === 0)
    throw new InvalidInputError(`tokens file ${path}: expected {"tokens": [{"name", "token", "admin"?}, ...]}`);
  return checkEntries(
    list.map((raw, i) => tokenEntry(raw, `${path}: tokens[${i}]`)),
    path,
  );
}

function tokenEntry(raw: unknown, where: string): TokenEntry {
  const o = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  if (typeof o.name !== "string" || !/^[A-Za-z0-9._@-]{1,64}$/.test(o.name))
    throw new InvalidInputError(`${where}: "name" must be 1-64 characters of letters, digits, . _ @ -`);
  if (typeof o.token !== "string" || o.token.length < 16)
    throw new InvalidInputError(`${where}: "token" must be a string of at least 16 characters`);
  if (o.admin !== undefined && typeof o.admin !== "boolean")
    throw new InvalidInputError(`${where}: "admin" must be true or false`);
  const max = o.max_sandboxes;
  if (max !== undefined && !(typeof max === "number" && Number.isInteger(max) && max > 0))
    throw new InvalidInputError(`${where}: "max_sandboxes" must be a positive integer`);
  if (o.network !== undefined && typeof o.network !== "boolean")
    throw new InvalidInputError(`${where}: "network" must be true or false`);
  const principal: Principal = { name: o.name, admin: o.admin === true, maxSandboxes: max };
  if (o.network === true) principal.network = true;
  if (o.limits !== undefined) principal.limits = principalLimits(o.limits, where);
  return { token: o.token, principal };
}

/** A principal's `limits`: the wire's LimitsRequest (snake_case), as maxima. */
function principalLimits(raw: unknown, where: string): Limits {
  let l: ReturnType<typeof native.LimitsRequest.parse>;
  try {
    l = native.LimitsRequest.parse(raw);
  } catch (e) {
    const detail = (e as { detail?: { loc: (string | number)[]; msg: string }[] }).detail?.[0];
    const why = detail ? `${detail.loc.join(".")}: ${detail.msg}` : (e as Error).message;
    throw new InvalidInputError(`${where}: "limits" ${why}`);
  }
  return {
    memoryBytes: l.memory_bytes,
    pids: l.pids,
    cpuSeconds: l.cpu_seconds,
    diskBytes: l.disk_bytes,
    cpus: l.cpus,
  };
}

function checkEntries(entries: TokenEntry[], path: string): TokenEntry[] {
  const names = new Set<string>();
  const tokens = new Set<string>();
  for (const e of entries) {
    if (names.has(e.principal.name)) throw new InvalidInputError(`${path}: name ${e.principal.name} appears twice`);
    if (tokens.has(e.token)) throw new InvalidInputError(`${path}: two entries share a token`);
    names.add(e.principal.name);
    tokens.add(e.token);
  }
  return entries;
}
