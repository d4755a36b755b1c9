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
 * A bounded number of concurrent heavy operations (uploads, file reads): `tryAcquire` never waits; `acquire` waits
 * a bounded time for a slot (before anything of the request is read, so waiting holds no memory or disk). SWE-ReX
 * clients do not retry a 429: SWE-agent uploads its tool bundles all at once, several instances in parallel.
 */
export class Budget {
  private used = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(readonly capacity: number) {}

  /** A release function, waiting up to `maxWaitMs` for a slot; undefined when none came free in time. */
  async acquire(maxWaitMs: number): Promise<(() => void) | undefined> {
    const now = this.tryAcquire();
    if (now || maxWaitMs <= 0) return now;
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve(this.tryAcquire());
      };
      const timer = setTimeout(() => {
        const i = this.waiting.indexOf(wake);
        if (i >= 0) this.waiting.splice(i, 1);
        resolve(undefined);
      }, maxWaitMs);
      this.waiting.push(wake);
    });
  }

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
      this.waiting.shift()?.();
    };
  }
}
