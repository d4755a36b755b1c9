/**
 * Collects a session's terminal output for one command: finds prompt sentinels in the raw stream, keeps a bounded
 * head and tail of the text before them, and a recent window for `expect` patterns.
 */
export interface PromptHit {
  id: number;
  exitCode: number;
}

const WINDOW = 64 * 1024;

export class OutputCollector {
  private head = "";
  private tail = "";
  private dropped = 0;
  /** Raw text not yet committed: may end with a partial sentinel. */
  private carry = "";
  recent = "";

  constructor(
    private readonly promptRe: RegExp,
    private readonly syntaxMarker: string,
    private readonly limitChars: number,
  ) {}

  /** Start over (the output of an older command ended here). */
  reset(): void {
    this.head = this.tail = this.recent = "";
    this.dropped = 0;
  }

  private commit(text: string): void {
    if (!text) return;
    this.recent = (this.recent + text).slice(-WINDOW);
    const headRoom = Math.ceil(this.limitChars / 2) - this.head.length;
    if (headRoom > 0) {
      this.head += text.slice(0, headRoom);
      text = text.slice(headRoom);
    }
    this.tail += text;
    const tailCap = Math.floor(this.limitChars / 2);
    if (this.tail.length > tailCap * 2) {
      this.dropped += this.tail.length - tailCap;
      this.tail = this.tail.slice(-tailCap);
    }
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
    let tail = this.tail;
    let dropped = this.dropped;
    if (tail.length > tailCap) {
      dropped += tail.length - tailCap;
      tail = tail.slice(-tailCap);
    }
    const middle = dropped
      ? `\n[... minisandbox: ${dropped} characters of output omitted (limit ${this.limitChars}) ...]\n`
      : "";
    return cleanTerminalOutput(this.head + middle + tail);
  }
}

// CSI / OSC / other escape sequences, as terminals emit them.
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\|\x1b[@-Z\\-_]/g;

/** Output as SWE-ReX returns it: ANSI escapes removed, `\r\n` turned into `\n`. */
export function cleanTerminalOutput(text: string): string {
  return text.replace(ANSI, "").replace(/\r\n/g, "\n");
}
