/** A real `minisandbox serve` child process for tests, and small HTTP helpers to talk to it. */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { after } from "node:test";
import { CLI } from "./helpers.js";

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  pid: number;
  /** Everything the server printed on stderr so far. */
  stderr: () => string;
  /** SIGTERM (default) or SIGKILL, and wait for the exit; returns its code. */
  stop: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/** Servers still running when the test process exits are killed then (one exit listener for all of them). */
const live = new Set<ChildProcess>();
function killAtExit(child: ChildProcess): void {
  if (!process.listeners("exit").includes(killAll)) process.once("exit", killAll);
  live.add(child);
  child.once("exit", () => live.delete(child));
}
function killAll(): void {
  for (const c of live) c.kill("SIGKILL");
}

/** Start `minisandbox --home HOME serve --port 0 ARGS...` and wait until it listens. */
export async function startServe(home: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const child = spawn(
    process.execPath,
    [CLI, "--home", home, "serve", "--port", "0", "--log-level", "silent", ...args],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, MINISANDBOX_AUTH_TOKEN: "", ...env } },
  );
  let stderr = "";
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (b: Buffer) => {
      stderr += b.toString();
      const m = /serving on (http:\/\/\S+?)[ ;]/.exec(stderr);
      if (m) resolve(m[1]!);
    });
    void exited.then((c) => reject(new Error(`serve exited early (${c}): ${stderr}`)));
  });
  const stop = async (signal: NodeJS.Signals = "SIGTERM"): Promise<number | null> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    return exited;
  };
  // Stopped as a user would (its sandboxes closed, nothing left on the host); killed if that does not end it.
  after(async () => {
    const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await stop("SIGTERM");
    clearTimeout(killer);
  });
  killAtExit(child);
  return { url, child, pid: child.pid!, stderr: () => stderr, stop };
}

/** Run `minisandbox --home HOME ARGS...` to completion (in the environment `env`, default this process's). */
export function runCli(
  home: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, "--home", home, ...args], { stdio: ["ignore", "pipe", "pipe"], env });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Resident memory of a process (VmRSS), in bytes. */
export function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}

// biome-ignore lint/suspicious/noExplicitAny: test bodies are read loosely
export type Json = any;

export interface Res {
  status: number;
  json: Json;
  text: string;
  headers: Headers;
}

/** One HTTP request; `key` null sends no X-API-Key. */
export async function call(
  base: string,
  method: string,
  path: string,
  o: { key?: string | null; body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<Res> {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.key) headers["X-API-Key"] = o.key;
  let body: FormData | string | undefined;
  if (o.body instanceof FormData) body = o.body;
  else if (o.body !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(o.body);
  }
  const res = await fetch(base + path, { method, headers, body, signal: o.signal });
  const text = await res.text();
  let json: Json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}
