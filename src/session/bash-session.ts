import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { OutputCollector, type PromptHit } from "./stream.js";
import type { SessionError } from "../errors.js";
import { shellQuote } from "../util/shell.js";
import { commandTimeout, nonZeroExit, sessionDied, syntaxError } from "./errors.js";

/** The session's process, as far as the session uses it (a child of the sandbox's helper). */
export interface SessionChild {
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  on(event: "exit", listener: () => void): unknown;
}

/** What a sandbox provides to run a session inside it. */
export interface SessionProcess {
  child: SessionChild;
  /** Kill every process of this session. */
  killTree: () => Promise<void>;
  /** Kill the processes the shell started (the foreground job), keeping the shell. */
  killJobs: () => Promise<void>;
}

export interface SessionStartOptions {
  name: string;
  /** Host directory that is visible read-only inside at `controlInside`. */
  controlHost: string;
  controlInside: string;
  startupSource?: string[];
  startupTimeoutMs?: number;
  outputLimitChars?: number;
  /** Starts `argv` inside the sandbox as this session's process. */
  spawn: (argv: string[]) => Promise<SessionProcess>;
}

export type CheckMode = "raise" | "silent" | "ignore";

export interface RunOptions {
  timeoutMs?: number;
  check?: CheckMode;
  errorMsg?: string;
  expect?: string[];
  /** Send as input to the running program (no syntax check, no exit status). */
  interactive?: boolean;
  /** Leave an interactive program: wait for the shell prompt to come back. */
  interactiveQuit?: boolean;
}

export interface RunResult {
  output: string;
  /** null with check "ignore", or when an expect pattern (not the prompt) ended the wait. */
  exitCode: number | null;
  /** The expect pattern that matched, or "". */
  expectString: string;
}

export const DEFAULT_OUTPUT_LIMIT_CHARS = 1024 * 1024;

interface Waiter {
  /** Resolve when a prompt with this id (or newer) arrives; undefined: any prompt. */
  promptId?: number;
  expect: RegExp[];
  expectSources: string[];
  resolve: (r: { prompt?: PromptHit; expectString?: string; syntax?: boolean }) => void;
  reject: (e: Error) => void;
  syntax: boolean;
}

/**
 * A persistent bash on a pseudo-terminal (SWE-ReX semantics). Commands travel as files in the control directory
 * (no 4 KiB tty line limit, no quoting games); the typed line only syntax-checks and sources them. The prompt is a
 * per-session random sentinel carrying the command id and `$?`, so a late prompt from a timed-out command is never
 * mistaken for the current one.
 */
export class BashSession {
  readonly name: string;
  private proc!: SessionProcess;
  private readonly token = randomBytes(6).toString("hex");
  private readonly dirHost: string;
  private readonly dirInside: string;
  private readonly collector: OutputCollector;
  private readonly decoder = new StringDecoder("utf8");
  private nextId = 1;
  private lastSentId = 0;
  private waiter: Waiter | undefined;
  private exited = false;
  private busy: Promise<unknown> = Promise.resolve();

  private constructor(private readonly opts: SessionStartOptions) {
    this.name = opts.name;
    const safe = `${opts.name.replace(/[^A-Za-z0-9_.-]/g, "_")}-${this.token}`;
    this.dirHost = join(opts.controlHost, safe);
    this.dirInside = `${opts.controlInside}/${safe}`;
    const promptRe = new RegExp(`\\x1e${this.token}P(\\d+):(\\d+)\\x1e`, "g");
    this.collector = new OutputCollector(
      promptRe,
      `\x1e${this.token}S\x1e`,
      opts.outputLimitChars ?? DEFAULT_OUTPUT_LIMIT_CHARS,
    );
  }

  static async start(opts: SessionStartOptions): Promise<{ session: BashSession; output: string }> {
    const s = new BashSession(opts);
    const output = await s.boot();
    return { session: s, output };
  }

  get alive(): boolean {
    return !this.exited;
  }

  private async boot(): Promise<string> {
    mkdirSync(this.dirHost, { recursive: true, mode: 0o755 });
    const rc = [
      "unset HISTFILE PROMPT_COMMAND; set +o history",
      "stty -echo cols 80 rows 24 2>/dev/null",
      ...(this.opts.startupSource ?? []).map((f) => `source ${shellQuote(f)}`),
      "unset PROMPT_COMMAND",
      `PS0=''; PS2=''; __msb_id=0; PS1=$'\\x1e'${this.token}P'\${__msb_id}:$?'$'\\x1e'`,
    ].join("\n");
    writeFileSync(join(this.dirHost, "rc"), `${rc}\n`);
    const cmd = `exec /bin/bash --rcfile ${this.dirInside}/rc --noediting -i`;
    this.proc = await this.opts.spawn(["/usr/bin/script", "-qfE", "never", "-c", cmd, "/dev/null"]);
    const { child } = this.proc;
    child.stdout!.on("data", (b: Buffer) => this.onData(this.decoder.write(b)));
    child.stdin!.on("error", () => {});
    child.on("exit", () => {
      this.exited = true;
      const w = this.waiter;
      this.waiter = undefined;
      w?.reject(sessionDied(this.name, this.collector.text()));
    });
    const first = this.waitFor({ promptId: 0 }, this.opts.startupTimeoutMs ?? 10_000);
    try {
      await first;
    } catch (e) {
      await this.close();
      throw e;
    }
    const out = this.collector.text();
    this.collector.reset();
    return out;
  }

  private onData(text: string): void {
    for (const hit of this.collector.feed(text)) {
      const w = this.waiter;
      if (hit.syntax) {
        if (w) w.syntax = true;
        continue;
      }
      const p = hit.prompt!;
      if (w && (w.promptId === undefined || p.id >= w.promptId)) {
        this.waiter = undefined;
        w.resolve({ prompt: p, syntax: w.syntax });
      } else {
        // The prompt of an older (timed-out) command: its late output is not ours.
        this.collector.reset();
      }
    }
    const w = this.waiter;
    if (w?.expect.length) {
      for (let i = 0; i < w.expect.length; i++) {
        if (w.expect[i]!.test(this.collector.recent)) {
          this.waiter = undefined;
          w.resolve({ expectString: w.expectSources[i]! });
          return;
        }
      }
    }
  }

  private waitFor(
    target: { promptId?: number; expect?: string[] },
    timeoutMs: number | undefined,
    onTimeout: () => Error = () => new Error("session timed out"),
  ): Promise<{ prompt?: PromptHit; expectString?: string; syntax?: boolean }> {
    if (this.exited) return Promise.reject(sessionDied(this.name, this.collector.text()));
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const w: Waiter = {
        promptId: target.promptId,
        expect: (target.expect ?? []).map((e) => new RegExp(e, "m")),
        expectSources: target.expect ?? [],
        syntax: false,
        resolve: (r) => {
          if (timer) clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          if (timer) clearTimeout(timer);
          reject(e);
        },
      };
      this.waiter = w;
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          if (this.waiter === w) this.waiter = undefined;
          reject(onTimeout());
        }, timeoutMs);
      }
      // Data that arrived before we started waiting may already satisfy an expect pattern.
      this.onData("");
    });
  }

  /** Commands run one at a time per session, in order of arrival. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.busy.then(fn, fn);
    this.busy = next.catch(() => undefined);
    return next;
  }

  run(command: string, opts: RunOptions = {}): Promise<RunResult> {
    return this.serial(() => this.runNow(command, opts));
  }

  private async runNow(command: string, opts: RunOptions): Promise<RunResult> {
    if (this.exited) throw sessionDied(this.name, "");
    this.collector.reset();
    const timeoutMs = opts.timeoutMs;
    const onTimeout = (): SessionError => commandTimeout(timeoutMs! / 1000, command);
    if (opts.interactive || opts.interactiveQuit) {
      this.write(`${command}\n`);
      const r = await this.waitFor(
        { promptId: opts.interactiveQuit ? this.lastSentId : undefined, expect: opts.expect },
        timeoutMs,
        onTimeout,
      );
      return { output: this.collector.text(), exitCode: 0, expectString: r.expectString ?? "" };
    }
    const id = this.nextId++;
    this.lastSentId = id;
    const file = `${this.dirInside}/c${id}`;
    writeFileSync(join(this.dirHost, `c${id}`), command.endsWith("\n") ? command : `${command}\n`);
    // Bash parses a whole line before running any of it, so a one-line command with a syntax error runs nothing
    // and is recognised by bash's own message. A multi-line one is checked first with `bash -n` (inside the
    // sandbox), since bash would run the lines before the faulty one; on an error a marker says so.
    const oneLine = !command.trim().includes("\n");
    this.write(
      oneLine
        ? `__msb_id=${id}; . ${file}\n`
        : `__msb_id=${id}; if /bin/bash -n ${file}; then . ${file}; else printf '\\036${this.token}S\\036'; fi\n`,
    );
    let r: Awaited<ReturnType<typeof this.waitFor>>;
    try {
      r = await this.waitFor({ promptId: id, expect: opts.expect }, timeoutMs, onTimeout);
    } finally {
      if (!this.waiter) rmSync(join(this.dirHost, `c${id}`), { force: true });
    }
    const output = this.collector.text();
    const parseError = oneLine && r.prompt?.exitCode === 2 && isSyntaxMessage(output, file);
    if (r.syntax || parseError)
      throw syntaxError(command, output.replaceAll(`bash: ${file}: `, "bash: ").replaceAll(`${file}: `, "bash: "));
    if (!r.prompt) return { output, exitCode: null, expectString: r.expectString ?? "" };
    const check = opts.check ?? "raise";
    if (check === "ignore") return { output, exitCode: null, expectString: "" };
    if (check === "raise" && r.prompt.exitCode !== 0)
      throw nonZeroExit(command, r.prompt.exitCode, output, opts.errorMsg ?? "");
    return { output, exitCode: r.prompt.exitCode, expectString: "" };
  }

  /**
   * Ctrl-C up to `retries` times, each waiting `timeoutMs` for the prompt; then kill the foreground jobs. After
   * this the session answers again.
   */
  interrupt(opts: { timeoutMs?: number; retries?: number; expect?: string[] } = {}): Promise<RunResult> {
    // Not serialized: an interrupt must overtake the command it interrupts.
    return this.interruptNow(opts);
  }

  private async interruptNow(opts: { timeoutMs?: number; retries?: number; expect?: string[] }): Promise<RunResult> {
    const timeoutMs = opts.timeoutMs ?? 200;
    const retries = Math.max(1, opts.retries ?? 3);
    const pending = this.waiter;
    this.waiter = undefined;
    pending?.reject(new Error("interrupted"));
    this.collector.reset();
    for (let i = 0; i < retries; i++) {
      this.write("\x03");
      try {
        const r = await this.waitFor({ expect: opts.expect }, timeoutMs);
        return this.afterInterrupt(r.expectString ?? "");
      } catch {
        /* try again */
      }
    }
    await this.proc.killJobs();
    await this.waitFor({}, 2000).catch(() => undefined);
    return this.afterInterrupt("");
  }

  /** Re-synchronise: a fresh no-op command whose prompt we wait for, so later prompts line up. */
  private async afterInterrupt(expectString: string): Promise<RunResult> {
    const output = this.collector.text();
    const id = this.nextId++;
    this.lastSentId = id;
    this.write(`__msb_id=${id}\n`);
    await this.waitFor({ promptId: id }, 5000).catch(() => undefined);
    this.collector.reset();
    return { output, exitCode: 0, expectString };
  }

  private write(text: string): void {
    if (!this.exited) this.proc.child.stdin!.write(text);
  }

  async close(): Promise<void> {
    this.exited = true;
    await this.proc?.killTree();
    rmSync(this.dirHost, { recursive: true, force: true });
  }
}

/** bash's parser complaining about the sourced command file itself (not something the command printed). */
function isSyntaxMessage(output: string, file: string): boolean {
  const text = output.startsWith("bash: ") ? output.slice("bash: ".length) : output;
  return text.startsWith(`${file}: line `) && /^[^\n]*: line \d+: (syntax error|unexpected EOF)/.test(text);
}
