/**
 * Keeps the head and the tail of a stream within a byte budget, so a command printing gigabytes costs a bounded
 * amount of memory, and the result says clearly what was dropped.
 */
export class CappedBuffer {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  total = 0;

  constructor(private readonly limitBytes: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const headRoom = Math.ceil(this.limitBytes / 2) - this.headBytes;
    if (headRoom > 0) {
      const part = chunk.subarray(0, headRoom);
      this.head.push(part);
      this.headBytes += part.length;
      chunk = chunk.subarray(part.length);
    }
    if (chunk.length === 0) return;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    const tailCap = Math.floor(this.limitBytes / 2);
    while (this.tailBytes - this.tail[0]!.length >= tailCap) this.tailBytes -= this.tail.shift()!.length;
  }

  get truncated(): boolean {
    return this.total > this.limitBytes;
  }

  /** Bytes kept; when truncated, a marker line replaces the middle. */
  toBuffer(): Buffer {
    const head = Buffer.concat(this.head);
    let tail = Buffer.concat(this.tail);
    if (!this.truncated) return Buffer.concat([head, tail]);
    tail = tail.subarray(tail.length - Math.floor(this.limitBytes / 2));
    const dropped = this.total - head.length - tail.length;
    const marker = Buffer.from(
      `\n[... minisandbox: ${dropped} bytes of output omitted (limit ${this.limitBytes} bytes) ...]\n`,
    );
    return Buffer.concat([head, marker, tail]);
  }

  toString(): string {
    return this.toBuffer().toString("utf8");
  }
}
