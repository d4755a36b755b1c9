/** What every route group gets: the registry, metrics, limits and budgets of one server. */
import type { FastifyReply, FastifyRequest } from "fastify";
import "./fastify-types.js";
import type { Principal } from "./auth.js";
import type { ServerMetrics } from "./metrics.js";
import type { PeerPolicy } from "./peers.js";
import type { Budget } from "./rate-limit.js";
import type { Entry, SandboxRegistry } from "./registry.js";
import type { UploadScratch } from "./scratch.js";
import type { ZipLimits } from "./upload.js";

export interface RequestLimits {
  /** Largest upload, and what an archive may unpack to. */
  maxUploadBytes: number;
  zipLimits: ZipLimits;
  /** Time a client has to send an upload. */
  uploadTimeoutMs: number;
  /** Largest file (or command output) returned; how long reading or writing one file may take. */
  maxReadBytes: number;
  fileTimeoutMs: number;
  /** Seconds; SWE-ReX's default startup_timeout of 1 s is too tight on a loaded host, so this is the floor. */
  minStartupTimeoutS: number;
}

export interface RouteContext {
  registry: SandboxRegistry;
  metrics: ServerMetrics;
  limits: RequestLimits;
  /** Concurrent uploads and file reads of the whole server. */
  uploads: Budget;
  reads: Budget;
  scratch: UploadScratch;
  /** Base URL clients should use (e.g. "http://node1:8080"); derived from the request when absent. */
  publicUrl?: string;
  /** The server's minisandbox home (its store, node cache and scratch). */
  home: string;
  /** Servers this one may fetch layers from. */
  peers: PeerPolicy;
}

/** Finds the sandbox a request is about (its `:id`, or the default sandbox at the root). */
export type EntryResolver = (req: FastifyRequest) => Entry;

/** The authenticated principal (set by the auth hook before any route runs). */
export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new Error("request reached a route without authentication");
  return req.principal;
}

export const byId =
  (registry: SandboxRegistry): EntryResolver =>
  (req) =>
    registry.get((req.params as { id: string }).id, principalOf(req));

/**
 * Run `fn` with the sandbox marked busy until the response is sent or the client goes away (then idle reaping may
 * close a sandbox whose abandoned command never ends).
 */
export async function withBusy<T>(
  registry: SandboxRegistry,
  e: Entry,
  reply: FastifyReply,
  fn: () => Promise<T>,
): Promise<T> {
  registry.begin(e);
  let ended = false;
  const end = (): void => {
    if (!ended) registry.end(e);
    ended = true;
  };
  reply.raw.once("close", end);
  try {
    return await fn();
  } finally {
    end();
  }
}

/** A route handler working on one sandbox, marked busy while it runs. */
/** Aborted when the client goes away before its answer was sent: a command it started is then killed. */
export function clientGone(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  reply.raw.once("close", () => {
    if (!reply.raw.writableFinished) ac.abort();
  });
  return ac.signal;
}

export function onEntry<T>(
  ctx: RouteContext,
  resolve: EntryResolver,
  fn: (e: Entry, req: FastifyRequest, reply: FastifyReply) => Promise<T>,
): (req: FastifyRequest, reply: FastifyReply) => Promise<T> {
  return async (req, reply) => {
    const e = resolve(req);
    return withBusy(ctx.registry, e, reply, () => fn(e, req, reply));
  };
}
