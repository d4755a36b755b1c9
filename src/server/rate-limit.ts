/** Per-principal request rate: a token bucket each (`rate` per second, bursts up to `burst`). */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  /** `rate` 0: no limit. */
  constructor(
    private readonly rate: number,
    private readonly burst = Math.max(1, rate * 2),
  ) {}

  /** 0 when the request may go now; otherwise the seconds to wait (for Retry-After). */
  take(who: string, now = performance.now()): number {
    if (this.rate <= 0) return 0;
    const b = this.buckets.get(who) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.rate);
    b.at = now;
    this.buckets.set(who, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.rate));
  }
}

/**
 * A bounded number of concurrent heavy operations (uploads, file reads): `tryAcquire` never waits, so a client
 * over the budget gets a 429 at once instead of holding memory or disk while queued.
 */
export class Budget {
  private used = 0;
  constructor(readonly capacity: number) {}

  get inUse(): number {
    return this.used;
  }

  /** A release function (call it exactly once), or undefined when the budget is spent. */
  tryAcquire(): (() => void) | undefined {
    if (this.used >= this.capacity) return undefined;
    this.used++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.used--;
    };
  }
}
