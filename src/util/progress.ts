import { formatBytes } from "./size.js";

export interface ProgressOptions {
  /** Where lines go (default stderr); a terminal gets one line rewritten in place. */
  out?: NodeJS.WritableStream;
  /** Items worked on at once (default 1). */
  workers?: number;
  /** Milliseconds (default performance.now). */
  now?: () => number;
}

/**
 * A one-line progress bar with ETA on a terminal; one plain line per step otherwise (logs, CI). Items named when
 * they start (`begin(key)` or `step(detail, key)`) and end (`tick(outcome, detail, key)`) give an ETA from their own
 * durations, `workers` at a time: the items still running count for what they have left, the waiting ones for
 * whole items.
 */
export class Progress {
  private done = 0;
  private readonly started: number;
  private readonly tty: boolean;
  private readonly out: NodeJS.WritableStream;
  private readonly workers: number;
  private readonly now: () => number;
  private readonly counts = new Map<string, number>();
  private readonly running = new Map<string, number>();
  private readonly durations: number[] = [];
  private note = "";

  constructor(
    private readonly total: number,
    private readonly label: string,
    o: ProgressOptions = {},
  ) {
    this.out = o.out ?? process.stderr;
    this.workers = o.workers ?? 1;
    this.now = o.now ?? (() => performance.now());
    this.started = this.now();
    this.tty = Boolean((this.out as NodeJS.WriteStream).isTTY);
    if (this.tty) this.render();
  }

  /** One item finished with this outcome (e.g. "built", "cached", "failed"). */
  tick(outcome: string, detail = "", key?: string): void {
    this.done++;
    this.counts.set(outcome, (this.counts.get(outcome) ?? 0) + 1);
    const began = key === undefined ? undefined : this.running.get(key);
    if (began !== undefined) {
      this.durations.push(this.now() - began);
      this.running.delete(key!);
    }
    if (this.tty) this.render();
    else this.out.write(`[${this.done}/${this.total}] ${outcome}${detail ? ` ${detail}` : ""} (ETA ${this.eta()})\n`);
  }

  /** Item `key` started (said nothing: its duration counts for the ETA once it ends). */
  begin(key: string): void {
    if (!this.running.has(key)) this.running.set(key, this.now());
  }

  /** Work in progress on an item (e.g. a build step): a line of its own off a terminal, the bar's tail on one. */
  step(detail: string, key?: string): void {
    if (key !== undefined) this.begin(key);
    this.note = detail;
    if (this.tty) this.render();
    else this.out.write(`[${this.done}/${this.total}] ${detail} (ETA ${this.eta()})\n`);
  }

  /** Seconds left, as text; "?" until an item has finished. */
  private eta(): string {
    if (this.done === 0) return "?";
    return formatSeconds(this.secondsLeft());
  }

  private secondsLeft(): number {
    const now = this.now();
    if (this.durations.length === 0) return (((now - this.started) / this.done) * (this.total - this.done)) / 1000;
    const mean = this.durations.reduce((a, b) => a + b, 0) / this.durations.length;
    let work = 0;
    for (const began of this.running.values()) work += Math.max(0, mean - (now - began));
    work += Math.max(0, this.total - this.done - this.running.size) * mean;
    return work / Math.max(1, Math.min(this.workers, this.total - this.done)) / 1000;
  }

  private render(): void {
    const width = 30;
    const filled = this.total ? Math.round((this.done / this.total) * width) : width;
    const counts = [...this.counts].map(([k, v]) => `${k} ${v}`).join(", ");
    const bar = `${"#".repeat(filled)}${"-".repeat(width - filled)}`;
    const note = this.note ? ` | ${this.note}` : "";
    this.out.write(`\r${this.label} [${bar}] ${this.done}/${this.total} ${counts} ETA ${this.eta()}${note}\x1b[K`);
  }

  finish(): void {
    if (this.tty) this.out.write("\n");
  }
}

function formatSeconds(seconds: number): string {
  const s = Math.round(seconds);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

/**
 * A transfer measured in bytes and items (an image's layers): on a terminal a bar with both counts and an ETA from
 * the byte rate, redrawn at most 10 times a second; otherwise one plain line per finished item and per note.
 */
export class TransferProgress {
  private bytes = 0;
  private totalBytes = 0;
  private items = 0;
  private totalItems = 0;
  private readonly started = performance.now();
  private readonly tty: boolean;
  private lastDraw = 0;

  constructor(
    private readonly label: string,
    private readonly unit: string,
    private readonly out: NodeJS.WriteStream = process.stderr,
  ) {
    this.tty = Boolean(out.isTTY);
  }

  setTotals(bytes: number, items: number): void {
    this.totalBytes = bytes;
    this.totalItems = items;
    this.draw(true);
  }

  addBytes(n: number): void {
    this.bytes += n;
    this.draw(false);
  }

  itemDone(detail: string): void {
    this.items++;
    if (this.tty) this.draw(true);
    else this.out.write(`${this.label}: ${this.items}/${this.totalItems} ${this.unit} ${detail} (${this.counts()})\n`);
  }

  /** Something worth a line of its own (a retry, a resume). */
  note(text: string): void {
    if (this.tty) this.out.write(`\r\x1b[K${this.label}: ${text}\n`);
    else this.out.write(`${this.label}: ${text}\n`);
    this.draw(true);
  }

  private counts(): string {
    const elapsed = (performance.now() - this.started) / 1000;
    const rate = elapsed > 0 ? this.bytes / elapsed : 0;
    const eta = rate > 0 ? formatSeconds((this.totalBytes - this.bytes) / rate) : "?";
    return `${formatBytes(this.bytes)}/${formatBytes(this.totalBytes)}, ETA ${eta}`;
  }

  private draw(force: boolean): void {
    if (!this.tty) return;
    const now = performance.now();
    if (!force && now - this.lastDraw < 100) return;
    this.lastDraw = now;
    const width = 30;
    const filled = this.totalBytes ? Math.min(width, Math.round((this.bytes / this.totalBytes) * width)) : 0;
    const bar = `${"#".repeat(filled)}${"-".repeat(width - filled)}`;
    const items = `${this.items}/${this.totalItems} ${this.unit}`;
    this.out.write(`\r${this.label} [${bar}] ${items}, ${this.counts()}\x1b[K`);
  }

  finish(): void {
    if (this.tty) this.out.write("\n");
  }
}

/** Run `fn` over items with at most `workers` at once, in order of arrival. */
export async function pool<T, R>(
  items: readonly T[],
  workers: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(workers, items.length)) }, worker));
  return results;
}

/** Fixed-width text table. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return `${[line(headers), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n")}\n`;
}
