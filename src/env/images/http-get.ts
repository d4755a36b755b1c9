/**
 * One HTTP(S) request with node:http, its body as a Node stream of Buffers. Registries send layers of hundreds of
 * megabytes: read through node:http they cost a quarter of the CPU and half the time of fetch()'s web streams.
 * Nothing here follows redirects or adds credentials: the registry client decides both.
 */
import { request as httpRequest, Agent as HttpAgent, type IncomingMessage } from "node:http";
import { request as httpsRequest, Agent as HttpsAgent } from "node:https";

export interface HttpAnswer {
  status: number;
  ok: boolean;
  headers: { get(name: string): string | null };
  /** The body's chunks; iterating it again is not possible. A cut connection throws while iterating. */
  body: AsyncIterable<Buffer>;
  /** Stop reading the body (its connection is closed). */
  cancel(): void;
  text(): Promise<string>;
}

export interface HttpRequest {
  method: "GET" | "HEAD";
  headers: Record<string, string>;
  signal?: AbortSignal;
}

/** Idle connections are kept for the next request to the same registry (unreferenced: they never hold a process). */
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

/** A network failure as fetch() reports one (`cause.code`), so callers tell the reason the same way. */
function requestError(e: Error): Error {
  if (e.name === "AbortError") return e; // our own timers: the caller tells which
  return new Error(`request failed: ${e.message}`, { cause: e });
}

export function httpGet(url: URL, r: HttpRequest): Promise<HttpAnswer> {
  const https = url.protocol === "https:";
  const send = https ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, {
      method: r.method,
      headers: r.headers,
      agent: https ? agents.https : agents.http,
      ...(r.signal ? { signal: r.signal } : {}),
    });
    req.once("error", (e) => reject(requestError(e)));
    req.once("response", (res) => resolve(answerOf(res)));
    req.end();
  });
}

function answerOf(res: IncomingMessage): HttpAnswer {
  const status = res.statusCode ?? 0;
  return {
    status,
    ok: status >= 200 && status < 300,
    headers: { get: (name) => headerValue(res, name) },
    body: res,
    cancel: () => void res.destroy(),
    text: async () => {
      const parts: Buffer[] = [];
      for await (const chunk of res as AsyncIterable<Buffer>) parts.push(chunk);
      return Buffer.concat(parts).toString("utf8");
    },
  };
}

function headerValue(res: IncomingMessage, name: string): string | null {
  const v = res.headers[name.toLowerCase()];
  if (v === undefined) return null;
  return Array.isArray(v) ? v.join(", ") : v;
}
