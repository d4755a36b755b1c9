/**
 * Keeps the head and the tail of a stream within a byte budget, so a command printing gigabytes costs a bounded
 * amount of memory, and the result says clearly what was dropped. Bytes are copied into two buffers of their own
 * (the head, grown as it fills; the tail, a ring): however the stream is chunked (a byte per write is 16 million
 * chunks for 16 MiB), what is held is the kept bytes and nothing per chunk.
 */
export class CappedBuffer {
  private head: Buffer = Buffer.alloc(0);
  private headBytes = 0;
  /** The last `tailCap` bytes after the head, as a ring: `tailStart` is the oldest byte once it is full. */
  private tail: Buffer = Buffer.alloc(0);
  private tailBytes = 0;
  private tailStart = 0;
  total = 0;

  constructor(private readonly limitBytes: number) {}

  private get headCap(): number {
    return Math.ceil(this.limitBytes / 2);
  }

  private get tailCap(): number {
    return Math.floor(this.limitBytes / 2);
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const headRoom = this.headCap - this.headBytes;
    if (headRoom > 0) {
      const part = chunk.subarray(0, headRoom);
      this.head = grown(this.head, this.headBytes + part.length, this.headCap);
      part.copy(this.head, this.headBytes);
      this.headBytes += part.length;
      chunk = chunk.subarray(part.length);
    }
    if (chunk.length > 0 && this.tailCap > 0) this.pushTail(chunk);
  }

  private pushTail(chunk: Buffer): void {
    const cap = this.tailCap;
    if (chunk.length >= cap) {
      // Only its last `cap` bytes can stay: they are the whole tail now.
      this.tail = grown(this.tail, cap, cap);
      chunk.copy(this.tail, 0, chunk.length - cap);
      this.tailBytes = cap;
      this.tailStart = 0;
      return;
    }
    if (this.tailBytes + chunk.length <= cap) {
      // Not full yet (so it starts at 0): appended.
      this.tail = grown(this.tail, this.tailBytes + chunk.length, cap);
      chunk.copy(this.tail, this.tailBytes);
      this.tailBytes += chunk.length;
      return;
    }
    // Full from now on: the ring has its whole capacity; new bytes overwrite the oldest.
    this.tail = grown(this.tail, cap, cap);
    this.writeRing(chunk, (this.tailStart + this.tailBytes) % cap);
    const overflow = this.tailBytes + chunk.length - cap;
    this.tailStart = (this.tailStart + overflow) % cap;
    this.tailBytes = cap;
  }

  /** Copy `chunk` into the ring at `at`, wrapping around its end. */
  private writeRing(chunk: Buffer, at: number): void {
    const first = Math.min(chunk.length, this.tail.length - at);
    chunk.copy(this.tail, at, 0, first);
    if (first < chunk.length) chunk.copy(this.tail, 0, first);
  }

  private tailBuffer(): Buffer {
    const end = this.tailStart + this.tailBytes;
    if (end <= this.tail.length) return this.tail.subarray(this.tailStart, end);
    return Buffer.concat([this.tail.subarray(this.tailStart), this.tail.subarray(0, end - this.tail.length)]);
  }

  get truncated(): boolean {
    return this.total > this.limitBytes;
  }

  /** Bytes kept; when truncated, a marker line replaces the middle. */
  toBuffer(): Buffer {
    const head = this.head.subarray(0, this.headBytes);
    const tail = this.tailBuffer();
    if (!this.truncated) return Buffer.concat([head, tail]);
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

/** `buf` with room for `need` bytes (its content kept): doubled as it grows, never beyond `cap`. */
function grown(buf: Buffer, need: number, cap: number): Buffer {
  if (need <= buf.length) return buf;
  const next = Buffer.allocUnsafe(Math.min(cap, Math.max(need, buf.length * 2, 4096)));
  buf.copy(next);
  return next;
}
