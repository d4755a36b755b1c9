/** The SDK's HTTP layer: global fetch, X-API-Key, JSON in and out, typed errors, no client-side time limit. */
import { SandboxError, TimeoutError } from "../errors.js";
import { type Model, type OutOf, WireValidationError } from "../wire/index.js";
import { errorFromResponse } from "./errors.js";

let longDispatcher: object | null | undefined;

/**
 * fetch (undici) gives up on a response whose headers take more than 300 s; a test run or a long command easily
 * takes longer. Node's fetch accepts a `dispatcher`; we build one like the global one, with those timeouts off.
 * Falls back to the default when the runtime's fetch is not undici.
 */
async function patientDispatcher(): Promise<object | undefined> {
  if (longDispatcher === undefined) {
    longDispatcher = null;
    try {
      await fetch("data:,");
      const g = (globalThis as Record<symbol, unknown>)[Symbol.for("undici.globalDispatcher.1")] as
        | { constructor: new (o: object) => object }
        | undefined;
      if (g && g.constructor.name === "Agent")
        longDispatcher = new g.constructor({ headersTimeout: 0, bodyTimeout: 0 });
    } catch {
      /* keep the default */
    }
  }
  return longDispatcher ?? undefined;
}

export interface RequestOptions {
  /** Abort (TimeoutError) after this long; default: the client's requestTimeoutMs, else none. */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /** Name of the operation, for error messages. */
  what?: string;
  /** The caller's own cancellation (a background command's kill). */
  signal?: AbortSignal;
}

export class HttpClient {
  readonly base: string;
  constructor(
    base: string,
    private readonly apiKey?: string,
    private readonly requestTimeoutMs?: number,
  ) {
    this.base = base.replace(/\/+$/, "");
  }

  async fetch(method: string, path: string, body: RequestInit["body"], o: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (this.apiKey !== undefined) headers["X-API-Key"] = this.apiKey;
    const timeoutMs = o.timeoutMs ?? this.requestTimeoutMs;
    const url = this.base + path;
    const signals = [
      ...(timeoutMs !== undefined ? [AbortSignal.timeout(timeoutMs)] : []),
      ...(o.signal ? [o.signal] : []),
    ];
    const init: RequestInit = {
      method,
      headers,
      body,
      signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
    };
    const d = await patientDispatcher();
    if (d) (init as { dispatcher?: object }).dispatcher = d;
    try {
      return await fetch(url, init);
    } catch (e) {
      const err = e as Error & { cause?: Error };
      if (o.signal?.aborted) throw new SandboxError(`${o.what ?? `${method} ${path}`}: cancelled`);
      if (err.name === "TimeoutError" || err.name === "AbortError") {
        throw new TimeoutError(`${o.what ?? `${method} ${path}`}: no answer from ${this.base} within ${timeoutMs} ms`);
      }
      throw new SandboxError(
        `${o.what ?? `${method} ${path}`}: cannot reach ${this.base}: ${err.cause?.message ?? err.message}`,
      );
    }
  }

  /**
   * Send JSON (or nothing); the answer must match the `response` model of the wire contract (else a SandboxError
   * naming the fields that drifted). HTTP errors become typed errors.
   */
  // biome-ignore lint/suspicious/noExplicitAny: any model of the contract
  async call<M extends Model<any, any>>(
    method: string,
    path: string,
    response: M,
    body?: unknown,
    o: RequestOptions = {},
  ): Promise<OutOf<M>> {
    const res = await this.fetch(method, path, body === undefined ? undefined : JSON.stringify(body), {
      ...o,
      headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...(o.headers ?? {}) },
    });
    return this.read(res, response, o.what ?? `${method} ${path}`);
  }

  // biome-ignore lint/suspicious/noExplicitAny: any model of the contract
  async read<M extends Model<any, any>>(res: Response, response: M, what: string): Promise<OutOf<M>> {
    const text = await res.text();
    let data: unknown = text;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      /* not JSON */
    }
    const retry = Number(res.headers.get("retry-after"));
    if (!res.ok) throw errorFromResponse(res.status, data, what, retry > 0 ? retry * 1000 : undefined);
    try {
      return response.parse(data, ["response"]) as OutOf<M>;
    } catch (e) {
      if (!(e instanceof WireValidationError)) throw e;
      throw new SandboxError(`${what}: the server's answer does not match the wire contract (${e.message})`);
    }
  }
}
