/** `startServer`'s options and their defaults: safe ones (authenticated, bounded, no host directories). */
import type { FastifyServerOptions } from "fastify";
import type { RolloutEngineOptions } from "../rollout/index.js";
import { defaultAdmitted, derivedMaxima, hostBudget } from "../sandbox/capacity.js";
import type { Limits } from "../sandbox/limits.js";
import type { BindMount } from "../sandbox/plan.js";
import { InvalidInputError } from "../errors.js";
import { Authenticator, ensureTokenFile, type TokenEntry } from "./auth.js";
import type { WorkspaceProvider } from "./provider.js";
import type { RequestLimits } from "./route-context.js";
import { DEFAULT_ZIP_LIMITS, type ZipLimits } from "./upload.js";

export interface ServerOptions {
  /** Interface to bind (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: any free port). */
  port?: number;
  /** minisandbox data directory (default: MINISANDBOX_HOME or the per-user default). */
  home?: string;
  provider?: WorkspaceProvider;
  /** Serve the rollout API (`/rollouts/...`) over a rollout engine on the server's home (its dataset, pool...). */
  rollouts?: Omit<RolloutEngineOptions, "home">;
  /** An admin token (`X-API-Key`). Without it, `tokens` or `noAuth`: a token generated into the home's token file. */
  authToken?: string;
  /** More principals, each owning the sandboxes it creates (see auth.ts `loadTokensFile`). */
  tokens?: TokenEntry[];
  /** No authentication at all: loopback hosts only. */
  noAuth?: boolean;
  /**
   * Live sandboxes at most (default: as many as get 1 GiB and 512 processes each of what the host has, see
   * src/sandbox/capacity.ts); over it POST /sandboxes answers 429.
   */
  maxSandboxes?: number;
  /** Requests per second per principal, bursts of twice that (default 200; 0: no limit); over it: 429. */
  rateLimit?: number;
  /** Serve one default sandbox of this directory; the SWE-ReX routes then also answer at the root. */
  defaultDir?: string;
  /** The default sandbox's host Python (e.g. "3.11": `python`, `pip` first on PATH) and host binds. */
  defaultPython?: string;
  defaultBinds?: BindMount[];
  /** Host directories `POST /sandboxes {dir}` may mount, with everything below them (default: none). */
  allowDirs?: string[];
  /** Files never mounted, nor any directory holding them (the tokens file); the home always is one. */
  secretPaths?: string[];
  /** Defaults for sandboxes that do not give their own. */
  ttlSeconds?: number;
  idleTimeoutSeconds?: number;
  /**
   * Server-wide maximum resource limits (also the defaults); a request above one is a 422 naming it. What is not
   * given is derived from the machine: memory and processes split between the sandboxes it admits (live sandboxes
   * and rollouts together), so that all of them at their maxima fit MemAvailable and pid_max; disk 8 GiB; CPUs, the
   * host's.
   */
  limits?: Limits;
  /** Largest JSON body (default 16 MiB). */
  maxBodyBytes?: number;
  /** Largest upload (default 1 GiB), time to send it (default 10 min), uploads at once (default 4). */
  maxUploadBytes?: number;
  uploadTimeoutMs?: number;
  maxConcurrentUploads?: number;
  /** What an archive may unpack to (default: 1 GiB, 10 000 entries, 100 times its size above 16 MiB). */
  zipLimits?: Partial<ZipLimits>;
  /** Largest file `read_file` / `GET /sandboxes/:id/files` return (default 64 MiB), reads at once (default 8). */
  maxReadBytes?: number;
  maxConcurrentReads?: number;
  /** Deadline of one file read or write inside a sandbox (default 60 s). */
  fileTimeoutMs?: number;
  /** Open connections at most (default 1024). */
  maxConnections?: number;
  /** Base URL put in `runtime_url` (default: from each request's Host header). */
  publicUrl?: string;
  /** Fastify logger option (default: off). `true` logs JSON lines at info to stdout. */
  logger?: FastifyServerOptions["logger"];
  /** Servers this one may fetch layers from (`sources`): hosts, `host:port` or CIDR networks (default: none). */
  peerAllow?: string[];
  /** Floor for SWE-ReX's `startup_timeout` (seconds, default 10). */
  minStartupTimeoutSeconds?: number;
}

export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host) || host === "::ffff:127.0.0.1";
}

/** As many sandboxes as get 1 GiB of memory and 512 process ids each of what the host has for them. */
export function defaultMaxSandboxes(): number {
  return defaultAdmitted();
}

/** The per-sandbox maxima of a server admitting `admitted` sandboxes: the operator's, else derived from the machine. */
export function serverMaxima(o: ServerOptions, admitted: number): Limits {
  const given = Object.fromEntries(Object.entries(o.limits ?? {}).filter(([, v]) => v !== undefined));
  return { ...derivedMaxima(admitted), ...given };
}

/** Plain words for maxima the operator chose that let `admitted` sandboxes together overcommit the host. */
export function overcommitWarnings(maxima: Limits, admitted: number): string[] {
  const budget = hostBudget();
  const out: string[] = [];
  const gib = (n: number): string => `${(n / 1024 ** 3).toFixed(1)} GiB`;
  if (maxima.memoryBytes && maxima.memoryBytes * admitted > budget.memoryBytes)
    out.push(
      `${admitted} sandboxes of up to ${gib(maxima.memoryBytes)} each can take more than the ` +
        `${gib(budget.memoryBytes)} this host has for them (lower --memory or --max-sandboxes)`,
    );
  if (maxima.pids && maxima.pids * admitted > budget.pids)
    out.push(
      `${admitted} sandboxes of up to ${maxima.pids} processes each can take more than the ${budget.pids} ` +
        "process ids this host has for them (lower --pids or --max-sandboxes, or raise kernel.pid_max)",
    );
  return out;
}

export interface ResolvedAuth {
  auth: Authenticator;
  /** Set when the token was generated into (or read from) the home's token file. */
  tokenFile?: string;
}

export function resolveAuth(o: ServerOptions, host: string, home: string): ResolvedAuth {
  if (o.noAuth) {
    if (o.authToken || o.tokens?.length) throw new InvalidInputError("--no-auth cannot be combined with tokens");
    if (!isLoopback(host))
      throw new InvalidInputError(`refusing to serve ${host} without authentication: --no-auth is for loopback only`);
    return { auth: new Authenticator([]) };
  }
  const entries: TokenEntry[] = [...(o.tokens ?? [])];
  if (o.authToken !== undefined) {
    if (o.authToken === "") throw new InvalidInputError("--auth-token: the token is empty");
    if (entries.some((e) => e.principal.name === "admin"))
      throw new InvalidInputError('the tokens file names a principal "admin", which --auth-token stands for');
    entries.push({ token: o.authToken, principal: { name: "admin", admin: true } });
  }
  if (entries.length > 0) return { auth: new Authenticator(entries) };
  const file = ensureTokenFile(home);
  return {
    auth: new Authenticator([{ token: file.token, principal: { name: "admin", admin: true } }]),
    tokenFile: file.path,
  };
}

export function requestLimits(o: ServerOptions): RequestLimits {
  return {
    maxUploadBytes: o.maxUploadBytes ?? 1024 ** 3,
    zipLimits: { ...DEFAULT_ZIP_LIMITS, ...(o.zipLimits ?? {}) },
    uploadTimeoutMs: o.uploadTimeoutMs ?? 600_000,
    maxReadBytes: o.maxReadBytes ?? 64 * 1024 ** 2,
    fileTimeoutMs: o.fileTimeoutMs ?? 60_000,
    minStartupTimeoutS: o.minStartupTimeoutSeconds ?? 10,
  };
}
