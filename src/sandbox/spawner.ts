import { type ChildProcess, spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { constants, openSync } from "node:fs";
import { Socket } from "node:net";
import { constants as osConstants } from "node:os";
import { type Readable, Writable } from "node:stream";
import { InvalidInputError, SandboxError } from "../errors.js";
import { helperPath } from "./host.js";

/** A process of the helper's as its callers use it: node's own ChildProcess, or one the spawner started. */
export interface HelperProcess extends EventEmitter {
  readonly pid?: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: readonly (Readable | Writable | null | undefined)[];
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals | number): boolean;
  /** As ChildProcess's: while unref'd, the child (and its pipes) does not keep node running. */
  ref(): void;
  unref(): void;
}

/**
 * What a child's descriptor 0, 1, ... is: a pipe it reads (`in`, written by us), a pipe it writes (`out`, read by
 * us), /dev/null, or a descriptor of ours (the very object we hold, reopened through /proc by the spawner).
 */
export type ChildFd = "in" | "out" | "null" | number;

const SIGNAL_NAMES: Record<number, NodeJS.Signals> = Object.fromEntries(
  Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]),
);

/** A writable that refuses every write as a pipe with no reader does (the child closed its end already). */
function brokenPipe(): Writable {
  const epipe = (): Error => Object.assign(new Error("write EPIPE"), { code: "EPIPE" });
  return new Writable({ write: (_c, _e, cb) => cb(epipe()) });
}

/** Our end of a child's pipe, held by the spawner as its descriptor `fd`, opened through /proc. */
function openEnd(spawnerPid: number, fd: number, kind: "in" | "out"): Socket | Writable {
  const path = `/proc/${spawnerPid}/fd/${fd}`;
  if (kind === "out")
    return new Socket({ fd: openSync(path, constants.O_RDONLY | constants.O_NONBLOCK), writable: false });
  try {
    return new Socket({ fd: openSync(path, constants.O_WRONLY | constants.O_NONBLOCK), readable: false });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENXIO") return brokenPipe();
    throw e;
  }
}

/** A child of the spawner: node's ChildProcess events ("exit", then "close" once its output ended) and kill. */
class SpawnedProcess extends EventEmitter implements HelperProcess {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private exited = false;
  private openOutputs: number;

  /** Counted by its spawner among the children that keep node running (see ref). */
  keepsNodeRunning = true;

  constructor(
    readonly pid: number,
    readonly stdio: readonly (Readable | Writable | null)[],
    private readonly refChanged: (keepsNodeRunning: boolean) => void,
  ) {
    super();
    const outputs = stdio.filter((s): s is Socket => s instanceof Socket && s.readable);
    this.openOutputs = outputs.length;
    for (const s of outputs) s.once("close", () => this.outputClosed());
  }

  get stdin(): Writable | null {
    return (this.stdio[0] as Writable | null) ?? null;
  }

  get stdout(): Readable | null {
    return (this.stdio[1] as Readable | null) ?? null;
  }

  get stderr(): Readable | null {
    return (this.stdio[2] as Readable | null) ?? null;
  }

  /** Signals go by pid only until the exit was seen: the spawner keeps the child unreaped until then. */
  kill(signal: NodeJS.Signals | number = "SIGTERM"): boolean {
    if (this.exited) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  ref(): void {
    this.setRef(true);
  }

  unref(): void {
    this.setRef(false);
  }

  private setRef(on: boolean): void {
    const changed = on !== this.keepsNodeRunning;
    this.keepsNodeRunning = on;
    for (const s of this.stdio) {
      if (!(s instanceof Socket)) continue;
      if (on) s.ref();
      else s.unref();
    }
    if (changed) this.refChanged(on);
  }

  ended(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit("exit", code, signal);
    // As node does for its own children: output nobody reads is drained, so that "close" comes all the same; after
    // this turn of the loop, so that a reader woken by the same poll (a helper's last words) gets it first.
    setImmediate(() => {
      for (const s of this.stdio)
        if (s instanceof Socket && s.readable && s.readableFlowing === null && s.listenerCount("data") === 0)
          s.resume();
    });
    this.outputClosed(0);
  }

  /** Its spawner is gone: its exit will never be told, and its pid is no longer ours to signal. */
  abandon(): void {
    for (const s of this.stdio) s?.destroy();
    this.ended(null, "SIGKILL");
  }

  private outputClosed(by = 1): void {
    this.openOutputs -= by;
    if (this.exited && this.openOutputs === 0) this.emit("close", this.exitCode, this.signalCode);
  }
}

interface Pending {
  fds: readonly ChildFd[];
  resolve: (p: SpawnedProcess) => void;
  reject: (e: Error) => void;
}

/**
 * `msb-helper spawner`, one per node process (see native/spawner.c): it forks and execs the helper for us, so that
 * node's own fork (its page tables copied: milliseconds, more as it grows) is on no sandbox's path.
 */
class Spawner {
  private readonly child: ChildProcess;
  private readonly pending = new Map<string, Pending>();
  private readonly live = new Map<string, SpawnedProcess>();
  /** How many of the live children are unref'd (do not keep node running). */
  private unrefd = 0;
  private nextId = 1;
  private text = "";
  private gone = false;
  private deferred = false;

  constructor(onGone: () => void) {
    this.child = spawn(helperPath(), ["spawner", String(process.pid)], { stdio: ["pipe", "pipe", "ignore"], env: {} });
    this.child.stdin!.on("error", () => {});
    this.child.stdout!.setEncoding("utf8");
    this.child.stdout!.on("data", (s: string) => this.heard(s));
    const end = (): void => {
      onGone();
      this.ended();
    };
    this.child.once("exit", end);
    this.child.once("error", end);
    this.refresh();
  }

  start(argv: readonly string[], env: Record<string, string>, fds: readonly ChildFd[]): Promise<SpawnedProcess> {
    if (this.gone) return Promise.reject(new SandboxError("the helper's spawner ended"));
    const id = String(this.nextId++);
    const envList = Object.entries(env).map(([k, v]) => `${k}=${v}`);
    const spec = fds.map((f) => (typeof f === "number" ? `fd:${f}` : f)).join(",");
    const tokens = ["spawn", id, spec, String(envList.length), ...envList, ...argv];
    // Tokens are NUL-separated on the wire (an exec's arguments cannot hold one anyway).
    if (tokens.some((t) => t.includes("\0")))
      throw new InvalidInputError("a helper's arguments cannot contain NUL bytes");
    return new Promise((resolve, reject) => {
      this.pending.set(id, { fds, resolve, reject });
      this.send(tokens);
      this.refresh();
    });
  }

  private send(tokens: readonly string[]): void {
    const payload = Buffer.from(`${tokens.join("\0")}\0`);
    this.child.stdin!.write(Buffer.concat([Buffer.from(`${payload.length}\0`), payload]));
  }

  /**
   * While a child lives (one not unref'd) or a start is pending, the spawner keeps node running, as node's own
   * children would.
   */
  private refresh(): void {
    const busy = this.pending.size > 0 || this.live.size > this.unrefd;
    const handles = [this.child, this.child.stdout as Socket, this.child.stdin as Socket];
    for (const h of handles) {
      if (busy) h.ref();
      else h.unref();
    }
  }

  /**
   * Lines in order. After a start, the rest waits for the next turn of the loop: whoever awaited the start attaches
   * its listeners first (microtasks), so that a child's exit told in the same read is never emitted to nobody.
   */
  private heard(s: string): void {
    this.text += s;
    if (this.deferred) return;
    let nl = this.text.indexOf("\n");
    while (nl >= 0) {
      const line = this.text.slice(0, nl).split(" ");
      this.text = this.text.slice(nl + 1);
      this.answer(line);
      nl = this.text.indexOf("\n");
      if (line[0] === "pid" && nl >= 0) {
        this.deferred = true;
        setImmediate(() => {
          this.deferred = false;
          this.heard("");
        });
        return;
      }
    }
  }

  private answer([what, id, ...rest]: string[]): void {
    if (what === "pid") this.started(id!, Number(rest[0]), rest.slice(1).map(Number));
    else if (what === "err") {
      const p = this.pending.get(id!);
      this.pending.delete(id!);
      p?.reject(new SandboxError(`the helper could not be started: ${rest.join(" ")}`));
    } else if (what === "exit") {
      const c = this.live.get(id!);
      this.live.delete(id!);
      if (c && !c.keepsNodeRunning) this.unrefd--;
      const code = Number(rest[0]);
      c?.ended(code >= 0 ? code : null, code >= 0 ? null : (SIGNAL_NAMES[Number(rest[1])] ?? "SIGKILL"));
      this.send(["reap", id!]);
    }
    this.refresh();
  }

  private started(id: string, pid: number, held: number[]): void {
    const p = this.pending.get(id);
    this.pending.delete(id);
    if (!p) return;
    const stdio: (Socket | Writable | null)[] = [];
    try {
      let k = 0;
      for (const f of p.fds) stdio.push(f === "in" || f === "out" ? openEnd(this.child.pid!, held[k++]!, f) : null);
      const proc = new SpawnedProcess(pid, stdio, (keeps) => {
        if (this.live.get(id) !== proc) return; // ended: counted no more
        this.unrefd += keeps ? -1 : 1;
        this.refresh();
      });
      this.live.set(id, proc);
      p.resolve(proc);
    } catch (e) {
      for (const s of stdio) s?.destroy();
      process.kill(pid, "SIGKILL"); // not reaped before we say so: the pid is still this child's
      p.reject(new SandboxError(`the helper's pipes could not be opened: ${(e as Error).message}`));
    }
    this.send(["close", id]);
  }

  /**
   * The spawner died (killed by someone): nothing it started can be followed. None is signalled by pid (init may
   * have reaped it, its pid reused); their pipes are closed instead (a waiting helper then leaves), and a sandbox
   * ends with its bwrap, which dies with its parent.
   */
  private ended(): void {
    if (this.gone) return;
    this.gone = true;
    for (const p of this.pending.values()) p.reject(new SandboxError("the helper's spawner ended"));
    for (const c of this.live.values()) c.abandon();
    this.pending.clear();
    this.live.clear();
    this.unrefd = 0;
  }
}

let spawner: Spawner | undefined;

/**
 * `argv` (the helper) started by the spawner with descriptors `fds` and exactly the environment `env`; a spawner
 * that died is replaced at the next start.
 */
export function startHelper(
  argv: readonly string[],
  env: Record<string, string>,
  fds: readonly ChildFd[],
): Promise<HelperProcess> {
  spawner ??= new Spawner(() => {
    spawner = undefined;
  });
  return spawner.start(argv, env, fds);
}

/**
 * A helper's late arguments (`enter --args-fd`, `launch --args-fd`) on its pipe: their length, then each ended by a
 * NUL. A message cut short (or none at all) is an error the helper reports, never "not needed" (which only
 * sendDrop says). A NUL inside an argument would smuggle in one of its own: refused before anything is sent.
 */
export function sendArgs(pipe: NodeJS.WritableStream, args: readonly string[]): void {
  if (args.some((a) => a.includes("\0")))
    throw new InvalidInputError("a command, its environment and its directory cannot contain NUL bytes");
  const payload = Buffer.from(`${args.join("\0")}\0`);
  pipe.write(`${payload.length}\0`);
  pipe.end(payload);
}

/** Tells a helper waiting for its arguments that it is not needed: it leaves, having made or run nothing. */
export function sendDrop(pipe: NodeJS.WritableStream): void {
  pipe.end("drop\0");
}

/** Resolves once a helper told to leave is gone: one that does not leave within 2 s is killed (it ran nothing). */
export function untilGone(child: HelperProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const stuck = setTimeout(() => child.kill("SIGKILL"), 2000);
    child.once("exit", () => {
      clearTimeout(stuck);
      resolve();
    });
  });
}
