/** At most `max` holders at once; the others wait their turn, first come first served. */
export class Slots {
  private held = 0;
  private readonly queue: (() => void)[] = [];

  constructor(readonly max: number) {}

  /** Runs `f` holding a slot, waiting for one first. */
  async run<T>(f: () => Promise<T>): Promise<T> {
    if (this.held < this.max) this.held++;
    else await new Promise<void>((resolve) => this.queue.push(resolve));
    try {
      return await f();
    } finally {
      const next = this.queue.shift();
      // The slot passes to the next caller as it is; only the last one gives it back.
      if (next) next();
      else this.held--;
    }
  }

  /** Holders now, and callers waiting for a slot. */
  get state(): { held: number; waiting: number } {
    return { held: this.held, waiting: this.queue.length };
  }
}
