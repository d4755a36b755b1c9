/**
 * `X-Request-ID` idempotency: the response to a request carrying an id is kept, and a repeat (same id, method, full
 * URL, principal and body: see hooks.ts) gets it replayed instead of running again. A repeat that arrives while the
 * first is still running waits for it. Bounded in entries and bytes; oldest first out.
 */
export interface StoredResponse {
  status: number;
  contentType: string | undefined;
  body: string | Buffer;
}

export class ReplayStore {
  private readonly done = new Map<string, StoredResponse>();
  private readonly pending = new Map<
    string,
    { promise: Promise<StoredResponse | undefined>; resolve: (r: StoredResponse | undefined) => void }
  >();
  private bytes = 0;

  constructor(
    private readonly maxEntries = 4096,
    private readonly maxBytes = 64 * 1024 * 1024,
  ) {}

  get(key: string): StoredResponse | undefined {
    return this.done.get(key);
  }

  /** The running request with this key, if any: resolves with its response (undefined if it was not stored). */
  inFlight(key: string): Promise<StoredResponse | undefined> | undefined {
    return this.pending.get(key)?.promise;
  }

  begin(key: string): void {
    if (this.pending.has(key)) return;
    let resolve!: (r: StoredResponse | undefined) => void;
    const promise = new Promise<StoredResponse | undefined>((r) => (resolve = r));
    this.pending.set(key, { promise, resolve });
  }

  finish(key: string, response: StoredResponse | undefined): void {
    const p = this.pending.get(key);
    this.pending.delete(key);
    if (response) {
      const size = response.body.length;
      if (size <= this.maxBytes / 4) {
        const old = this.done.get(key);
        if (old) {
          this.bytes -= old.body.length;
          this.done.delete(key);
        }
        this.done.set(key, response);
        this.bytes += size;
        while (this.done.size > this.maxEntries || this.bytes > this.maxBytes) {
          const [k, v] = this.done.entries().next().value as [string, StoredResponse];
          this.done.delete(k);
          this.bytes -= v.body.length;
        }
      }
    }
    p?.resolve(response);
  }
}
