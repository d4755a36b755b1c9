/**
 * HTTP to one repository of an OCI distribution registry (v2 API): authentication as registries ask for it
 * (`WWW-Authenticate: Bearer realm=…,service=…,scope=…` -> a token from the realm, anonymously or with the user's
 * credentials; `Basic` -> the credentials themselves), retries (429 after its `Retry-After`, 5xx and cut connections
 * with backoff), redirects (followed, but credentials never go to another origin) and one clear error per failure,
 * cause first. `http://` only where `allowHttp` says (loopback, or registries the user marked insecure).
 */
import { ImageNotFoundError, MinisandboxError, RegistryDeniedError, RegistryError } from "../../errors.js";
import { sleep } from "../store/fsutil.js";
import type { Credentials } from "./credentials.js";
import { httpGet, type HttpAnswer, type HttpRequest } from "./http-get.js";

export interface Endpoint {
  /** The registry name credentials are looked up by (`docker.io`, `127.0.0.1:5000`, a mirror's host). */
  name: string;
  /** Origin of its v2 API (`https://registry-1.docker.io`, `http://127.0.0.1:5000`). */
  base: URL;
}

export interface RetryInfo {
  what: string;
  attempt: number;
  waitMs: number;
  reason: string;
}

export interface ClientOptions {
  credentials?: Credentials;
  /** Attempts for one request before a 429, 5xx or cut connection becomes an error (default 5). */
  attempts?: number;
  /** A `Retry-After` longer than this fails at once instead of waiting (default 5 minutes). */
  maxRetryAfterMs?: number;
  /** Until the response headers arrive (default 30 s); bodies are timed by their readers. */
  timeoutMs?: number;
  allowHttp: (host: string) => boolean;
  onRetry?: (info: RetryInfo) => void;
}

export interface GetOptions {
  what: string;
  accept?: string;
  range?: string;
  method?: "GET" | "HEAD";
  /** Aborts the request and its body (a reader's idle timer). */
  signal?: AbortSignal;
}

const USER_AGENT = "minisandbox (OCI distribution client)";
const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 5;

export class RegistryClient {
  private authorization?: string;

  constructor(
    readonly endpoint: Endpoint,
    readonly repository: string,
    private readonly opts: ClientOptions,
  ) {}

  get host(): string {
    return this.endpoint.base.host;
  }

  /** A 2xx answer to GET (or HEAD) `/v2/<repository>/<path>`; anything else becomes the matching error. */
  async get(path: string, o: GetOptions): Promise<HttpAnswer> {
    const url = new URL(`/v2/${this.repository}/${path}`, this.endpoint.base);
    const attempts = this.opts.attempts ?? 5;
    let authenticated = false;
    for (let attempt = 1; ; attempt++) {
      let res: HttpAnswer;
      try {
        res = await this.follow(url, o);
      } catch (e) {
        if (e instanceof MinisandboxError) throw e; // a refused redirect, too many redirects: not the network
        if (o.signal?.aborted || attempt >= attempts) throw this.unreachable(o.what, e);
        await this.pause(o.what, attempt, backoffMs(attempt), networkReason(e));
        continue;
      }
      if (res.ok) return res;
      if (res.status === 401 && !authenticated) {
        authenticated = true;
        res.cancel();
        await this.authenticate(res, o.what);
        attempt--;
        continue;
      }
      const wait = res.status === 429 || res.status >= 500 ? retryAfterMs(res) : undefined;
      const detail = await errorDetail(res);
      if (res.status === 429 || res.status >= 500) {
        const waitMs = wait ?? backoffMs(attempt);
        if (attempt >= attempts || waitMs > (this.opts.maxRetryAfterMs ?? 300_000))
          throw this.gaveUp(o.what, res.status, detail, attempt, wait);
        await this.pause(o.what, attempt, waitMs, `${res.status}${detail ? ` ${detail}` : ""}`);
        continue;
      }
      throw this.refusal(o.what, res.status, detail);
    }
  }

  private async pause(what: string, attempt: number, waitMs: number, reason: string): Promise<void> {
    this.opts.onRetry?.({ what, attempt, waitMs, reason });
    await sleep(waitMs);
  }

  /** One request, following redirects; the registry's credentials only ever go to its own origin. */
  private async follow(url: URL, o: GetOptions): Promise<HttpAnswer> {
    let current = url;
    for (let hop = 0; ; hop++) {
      this.checkScheme(current, o.what);
      const headers: Record<string, string> = { "user-agent": USER_AGENT };
      if (o.accept) headers.accept = o.accept;
      if (o.range) headers.range = o.range;
      if (this.authorization && current.origin === this.endpoint.base.origin)
        headers.authorization = this.authorization;
      const res = await this.fetchWithTimeout(current, { method: o.method ?? "GET", headers }, o.signal);
      const location = res.headers.get("location");
      if (!REDIRECTS.has(res.status) || !location) return res;
      res.cancel();
      if (hop >= MAX_REDIRECTS) throw new RegistryError(`${o.what}: more than ${MAX_REDIRECTS} redirects`);
      current = new URL(location, current);
    }
  }

  private async fetchWithTimeout(
    url: URL,
    init: Omit<HttpRequest, "signal">,
    signal?: AbortSignal,
  ): Promise<HttpAnswer> {
    const headersDue = new AbortController();
    const timer = setTimeout(() => headersDue.abort(), this.opts.timeoutMs ?? 30_000);
    try {
      const signals = signal ? [signal, headersDue.signal] : [headersDue.signal];
      return await httpGet(url, { ...init, signal: AbortSignal.any(signals) });
    } finally {
      clearTimeout(timer);
    }
  }

  private checkScheme(url: URL, what: string): void {
    if (url.protocol === "https:") return;
    if (url.protocol === "http:" && this.opts.allowHttp(url.hostname)) return;
    throw new RegistryDeniedError(
      `${what}: refusing ${url.protocol}//${url.host} (plain http only for loopback or registries marked insecure)`,
    );
  }

  /** Answer a 401's challenge: a bearer token from the realm, or the user's credentials for basic auth. */
  private async authenticate(res: HttpAnswer, what: string): Promise<void> {
    const challenge = parseChallenge(res.headers.get("www-authenticate") ?? "");
    const creds = this.opts.credentials;
    if (challenge?.scheme === "basic") {
      if (!creds) throw this.needCredentials(what);
      this.authorization = `Basic ${basic(creds)}`;
      return;
    }
    if (challenge?.scheme !== "bearer" || !challenge.params.realm)
      throw new RegistryDeniedError(
        `${what}: ${this.host} asks for authentication (401) in a way this client cannot answer`,
      );
    const realm = new URL(challenge.params.realm);
    if (challenge.params.service) realm.searchParams.set("service", challenge.params.service);
    realm.searchParams.set("scope", challenge.params.scope ?? `repository:${this.repository}:pull`);
    this.checkScheme(realm, what);
    const headers: Record<string, string> = { "user-agent": USER_AGENT };
    if (creds) headers.authorization = `Basic ${basic(creds)}`;
    let answer: HttpAnswer;
    try {
      answer = await this.fetchWithTimeout(realm, { method: "GET", headers });
    } catch (e) {
      throw new RegistryError(`${what}: cannot reach the token service ${realm.host}: ${networkReason(e)}`);
    }
    if (answer.status === 401 || answer.status === 403) {
      answer.cancel();
      const whose = creds ? `the credentials from ${creds.file}` : "anonymous access";
      throw new RegistryDeniedError(
        `${what}: the token service ${realm.host} refused ${whose} (${answer.status}); ` +
          "log in (podman login / docker login) or set REGISTRY_AUTH_FILE",
      );
    }
    this.authorization = `Bearer ${await tokenOf(answer, what, realm.host)}`;
  }

  private needCredentials(what: string): RegistryDeniedError {
    return new RegistryDeniedError(
      `${what}: ${this.host} needs credentials (401) and none were found for ${this.endpoint.name}; ` +
        "log in (podman login / docker login) or set REGISTRY_AUTH_FILE",
    );
  }

  private refusal(what: string, status: number, detail: string): Error {
    const said = `${status}${detail ? ` ${detail}` : ""}`;
    if (status === 404) return new ImageNotFoundError(`${what}: not found on ${this.host} (${said})`);
    if (status === 401) {
      const creds = this.opts.credentials;
      if (!creds) return this.needCredentials(what);
      return new RegistryDeniedError(`${what}: ${this.host} refused the credentials from ${creds.file} (${said})`);
    }
    if (status === 403) return new RegistryDeniedError(`${what}: ${this.host} denies access (${said})`);
    return new RegistryError(`${what}: ${this.host} answered ${said}`);
  }

  private gaveUp(what: string, status: number, detail: string, attempts: number, wait?: number): RegistryError {
    const why = status === 429 ? "rate limit (429)" : `server error (${status}${detail ? ` ${detail}` : ""})`;
    const when = wait !== undefined ? `; it asks to retry after ${Math.ceil(wait / 1000)} s` : "";
    return new RegistryError(`${what}: ${this.host} ${why} after ${attempts} attempt(s)${when}`, {
      ...(wait !== undefined ? { retryAfterMs: wait } : {}),
    });
  }

  private unreachable(what: string, e: unknown): RegistryError {
    return new RegistryError(`${what}: cannot reach ${this.host}: ${networkReason(e)}`);
  }
}

function basic(c: Credentials): string {
  return Buffer.from(`${c.username}:${c.password}`).toString("base64");
}

export function backoffMs(attempt: number): number {
  return Math.min(500 * 2 ** (attempt - 1), 8000);
}

/** `Retry-After` in seconds or as an HTTP date; undefined when absent or unreadable. */
function retryAfterMs(res: HttpAnswer): number | undefined {
  const v = res.headers.get("retry-after");
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** A registry's error body (`{"errors":[{"code":"MANIFEST_UNKNOWN","message":…}]}`), shortened. */
async function errorDetail(res: HttpAnswer): Promise<string> {
  let text = "";
  try {
    text = (await res.text()).slice(0, 4096);
  } catch {
    return "";
  }
  try {
    const first = (JSON.parse(text) as { errors?: { code?: string; message?: string }[] }).errors?.[0];
    if (first) return [first.code, first.message].filter(Boolean).join(": ").slice(0, 200);
  } catch {
    /* not JSON */
  }
  return text.replace(/\s+/g, " ").trim().slice(0, 120);
}

async function tokenOf(answer: HttpAnswer, what: string, host: string): Promise<string> {
  if (!answer.ok) throw new RegistryError(`${what}: the token service ${host} answered ${answer.status}`);
  const text = await answer.text();
  let token: unknown;
  try {
    const body = JSON.parse(text) as { token?: unknown; access_token?: unknown };
    token = body.token ?? body.access_token;
  } catch {
    /* reported below */
  }
  if (typeof token !== "string" || token === "" || token.length > 64 * 1024 || /[\r\n]/.test(token))
    throw new RegistryError(`${what}: the token service ${host} gave no usable token`);
  return token;
}

export interface Challenge {
  scheme: "bearer" | "basic" | string;
  params: Record<string, string>;
}

/** `Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:x:pull"`. */
export function parseChallenge(header: string): Challenge | undefined {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  for (const p of m[2]!.matchAll(/([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g))
    params[p[1]!.toLowerCase()] = (p[2] ?? p[3] ?? "").replace(/\\(.)/g, "$1");
  return { scheme: m[1]!.toLowerCase(), params };
}

function networkReason(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code) return `${cause.code}${cause.message ? ` (${cause.message})` : ""}`;
  if ((e as Error).name === "AbortError" || (e as Error).name === "TimeoutError") return "timed out";
  return (e as Error).message ?? String(e);
}
