/**
 * Collects a session's terminal output for one command: finds prompt sentinels in the raw stream, keeps a bounded
 * head and tail of the text before them, and a recent window for `expect` patterns.
 */
export interface PromptHit {
  id: number;
  exitCode: number;
}

const WINDOW = 64 * 1024;
/** Pieces are joined into strings of about this many characters as they come. */
const BLOCK = 16 * 1024;

/**
 * Text appended piece by piece, held as few strings whatever the pieces' size (a terminal may deliver a byte at a
 * time: a million pieces must not mean a million strings), with its length and a way to keep only its end.
 */
class Pieces {
  private blocks: string[] = [];
  private small: string[] = [];
  private smallLength = 0;
  length = 0;

  push(text: string): void {
    if (!text) return;
    this.small.push(text);
    this.smallLength += text.length;
    this.length += text.length;
    if (this.smallLength >= BLOCK) {
      this.blocks.push(this.small.join(""));
      this.small = [];
      this.smallLength = 0;
    }
  }

  toString(): string {
    return this.blocks.join("") + this.small.join("");
  }

  /** Keep the last `n` characters only; returns how many were dropped. */
  keepLast(n: number): number {
    const dropped = Math.max(0, this.length - n);
    if (dropped === 0) return 0;
    const kept = this.toString().slice(-n);
    this.blocks = [kept];
    this.small = [];
    this.smallLength = 0;
    this.length = kept.length;
    return dropped;
  }
}

export class OutputCollector {
  private head = new Pieces();
  private tail = new Pieces();
  private window = new Pieces();
  private dropped = 0;
  /** Raw text not yet committed: may end with a partial sentinel. */
  private carry = "";

  constructor(
    private readonly promptRe: RegExp,
    private readonly syntaxMarker: string,
    private readonly limitChars: number,
  ) {}

  /** The last 64 KiB of output, for `expect` patterns. */
  get recent(): string {
    this.window.keepLast(WINDOW);
    return this.window.toString();
  }

  /** Start over (the output of an older command ended here). */
  reset(): void {
    this.head = new Pieces();
    this.tail = new Pieces();
    this.window = new Pieces();
    this.dropped = 0;
  }

  private commit(text: string): void {
    if (!text) return;
    this.window.push(text);
    if (this.window.length > 2 * WINDOW) this.window.keepLast(WINDOW);
    const headRoom = Math.ceil(this.limitChars / 2) - this.head.length;
    if (headRoom > 0) {
      this.head.push(text.slice(0, headRoom));
      text = text.slice(headRoom);
    }
    this.tail.push(text);
    const tailCap = Math.floor(this.limitChars / 2);
    if (this.tail.length > tailCap * 2) this.dropped += this.tail.keepLast(tailCap);
  }

  /**
   * Feed raw text; returns the prompts and syntax markers found, in order. Text before each is committed first,
   * so the caller can decide (on each hit) whether to keep or reset what came before.
   */
  *feed(raw: string): Generator<{ prompt?: PromptHit; syntax?: true }> {
    let text = this.carry + raw;
    this.carry = "";
    for (;;) {
      this.promptRe.lastIndex = 0;
      const m = this.promptRe.exec(text);
      const s = text.indexOf(this.syntaxMarker);
      if (s >= 0 && (!m || s < m.index)) {
        this.commit(text.slice(0, s));
        text = text.slice(s + this.syntaxMarker.length);
        yield { syntax: true };
        continue;
      }
      if (m) {
        this.commit(text.slice(0, m.index));
        text = text.slice(m.index + m[0].length);
        yield { prompt: { id: Number(m[1]), exitCode: Number(m[2]) } };
        continue;
      }
      break;
    }
    // Hold back a possible partial sentinel (it starts with \x1e).
    const cut = text.lastIndexOf("\x1e");
    if (cut >= 0 && text.length - cut < 80) {
      this.commit(text.slice(0, cut));
      this.carry = text.slice(cut);
    } else {
      this.commit(text);
    }
  }

  /** Everything committed so far, cleaned, with a marker where the middle was dropped. */
  text(): string {
    const tailCap = Math.floor(this.limitChars / 2);
    let tail = this.tail.toString();
    let dropped = this.dropped;
    if (tail.length > tailCap) {
      dropped += tail.length - tailCap;
      tail = tail.slice(-tailCap);
    }
    const middle = dropped
      ? `\n[... minisandbox: ${dropped} characters of output omitted (limit ${this.limitChars}) ...]\n`
      : "";
    return cleanTerminalOutput(this.head.toString() + middle + tail);
  }
}

// CSI / OSC / other escape sequences, as terminals emit them.
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\|\x1b[@-Z\\-_]/g;

/** Output as SWE-ReX returns it: ANSI escapes removed, `\r\n` turned into `\n`. */
export function cleanTerminalOutput(text: string): string {
  return text.replace(ANSI, "").replace(/\r\n/g, "\n");
}
