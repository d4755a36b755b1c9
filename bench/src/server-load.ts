/**
 * Server load and faults, against a real `minisandbox serve` process on 127.0.0.1 (bounded in count and time):
 * N clients, each with its own token and sandbox, run M session commands (latency, errors); then K sandboxes are
 * left live and the server is killed with SIGKILL and restarted (what is left after the restart's reaping); then
 * clients disconnect mid-upload and mid-command (what is left after their sandboxes are deleted).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { summarize, type Dist } from "../../src/util/stats.js";
import { processesMentioning } from "./proc.js";

export interface ServerLoadOptions {
  sandboxes: number;
  commandsPerSandbox: number;
  /** Sandboxes live when the server is killed. */
  killWithLive: number;
  /** Where the server's home goes (a fresh directory inside, removed at the end). */
  workDir?: string;
}

export interface Leftovers {
  processes: number;
  mounts: number;
  scratchDirs: number;
  cgroups: number;
  uploadScratch: number;
}

export interface ServerLoadResult {
  available: true;
  sandboxes: number;
  commandsPerSandbox: number;
  commands: number;
  errors: number;
  errorSamples: string[];
  wallMs: number;
  commandsPerSecond: number;
  /** One `run_in_session` round trip (echo), over HTTP, all clients at once. */
  command: Dist;
  /** POST /sandboxes, all clients at once. */
  create: Dist;
  serverRssBytes: { start: number; peak: number; end: number };
  leftoversAfterLoad: Leftovers;
  kill: { liveAtKill: number; reapedAtRestart: number; leftoversAfterRestart: Leftovers };
  disconnects: { uploadsAborted: number; commandsAborted: number; leftovers: Leftovers };
}

const CLI = fileURLToPath(new URL("../../src/cli/index.js", import.meta.url));

interface Serve {
  url: string;
  child: ChildProcess;
  exited: Promise<unknown>;
  stderr: () => string;
}

/** `minisandbox serve` in a child process on a free port, once it listens. */
export async function startServe(home: string, tokensFile: string, maxSandboxes: number, more: string[] = []) {
  const args = ["--home", home, "serve", "--port", "0", "--log-level", "silent", "--tokens-file", tokensFile];
  const child = spawn(process.execPath, [CLI, ...args, "--max-sandboxes", String(maxSandboxes), ...more], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const exited = new Promise((r) => child.once("exit", r));
  let stderr = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr}`)), 60_000);
    child.stderr!.on("data", (b: Buffer) => {
      stderr += b.toString();
      const m = /serving on (http:\/\/\S+?)[ ;]/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then(() => reject(new Error(`serve exited: ${stderr}`)));
  });
  const serve: Serve = { url, child, exited, stderr: () => stderr };
  return serve;
}

/** One JSON request with a token; anything but 2xx throws. */
export async function request(url: string, key: string, method: string, body?: unknown, signal?: AbortSignal) {
  const res = await fetch(url, {
    method,
    headers: { "X-API-Key": key, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${new URL(url).pathname}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return text ? JSON.parse(text) : undefined;
}

/** What a server and its sandboxes may have left on this host (the server process itself aside). */
export function leftovers(home: string, ids: readonly string[], serverPid?: number): Leftovers {
  const count = (dir: string): number => {
    try {
      return readdirSync(dir).length;
    } catch {
      return 0;
    }
  };
  const skip = new Set([process.pid, serverPid]);
  const processes = processesMentioning(home, ...ids).filter((pid) => !skip.has(pid)).length;
  const mounts = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter((l) => (l.split(" ")[4] ?? "").startsWith(home)).length;
  let cgroups = 0;
  for (const ctl of ["memory", "pids"]) {
    const names = new Set(readdirSafe(`/sys/fs/cgroup/${ctl}/minisandbox`));
    cgroups += ids.filter((id) => names.has(id)).length;
  }
  return {
    processes,
    mounts,
    scratchDirs: count(join(home, "sandboxes")),
    cgroups,
    uploadScratch: count(join(home, "server", "uploads")),
  };
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

export function rss(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

interface Client {
  key: string;
  id?: string;
}

/** One client: create its sandbox and session, then run its commands back to back, checking every output. */
async function runClient(url: string, c: Client, commands: number, out: { cmd: number[]; create: number[] }) {
  const t0 = performance.now();
  c.id = (await request(`${url}/sandboxes`, c.key, "POST", {})).id as string;
  out.create.push(performance.now() - t0);
  const rt = `${url}/sandboxes/${c.id}`;
  await request(`${rt}/create_session`, c.key, "POST", {});
  for (let i = 0; i < commands; i++) {
    const t = performance.now();
    const r = await request(`${rt}/run_in_session`, c.key, "POST", { command: `echo ${i}` });
    out.cmd.push(performance.now() - t);
    if (r.output !== `${i}\n` || r.exit_code !== 0) throw new Error(`unexpected observation ${JSON.stringify(r)}`);
  }
}

async function loadPhase(url: string, clients: Client[], commands: number, pid: number) {
  const samples = { cmd: [] as number[], create: [] as number[] };
  const errors: string[] = [];
  const peak = { rss: rss(pid) };
  const sampler = setInterval(() => (peak.rss = Math.max(peak.rss, rss(pid))), 200);
  const t0 = performance.now();
  await Promise.all(
    clients.map((c) => runClient(url, c, commands, samples).catch((e: unknown) => errors.push((e as Error).message))),
  );
  const wallMs = performance.now() - t0;
  clearInterval(sampler);
  await Promise.all(
    clients.map((c) => (c.id ? request(`${url}/sandboxes/${c.id}`, c.key, "DELETE").catch(() => undefined) : null)),
  );
  return { samples, errors, wallMs, peakRss: peak.rss };
}

async function killPhase(home: string, tokens: string, clients: Client[], n: number, max: number) {
  const s = await startServe(home, tokens, max);
  const ids: string[] = [];
  for (const c of clients.slice(0, n)) {
    const id = (await request(`${s.url}/sandboxes`, c.key, "POST", {})).id as string;
    ids.push(id);
    await request(`${s.url}/sandboxes/${id}/create_session`, c.key, "POST", {});
    await request(`${s.url}/sandboxes/${id}/run_in_session`, c.key, "POST", {
      command: "sleep 1000 &",
      check: "ignore",
    });
  }
  s.child.kill("SIGKILL");
  await s.exited;
  const again = await startServe(home, tokens, max);
  const left = leftovers(home, ids, again.child.pid);
  const reaped = Number(/removed leftovers of an earlier server: (\d+) sandbox/.exec(again.stderr())?.[1] ?? 0);
  again.child.kill("SIGTERM");
  await again.exited;
  return { reaped, left };
}

/** Clients that go away mid-upload and mid-command; then their sandboxes are deleted. */
async function disconnectPhase(home: string, tokens: string, c: Client, max: number) {
  const s = await startServe(home, tokens, max);
  const id = (await request(`${s.url}/sandboxes`, c.key, "POST", {})).id as string;
  const rt = `${s.url}/sandboxes/${id}`;
  const aborts = [new AbortController(), new AbortController()];
  const boundary = "----msbload";
  const head = `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="f"\r\n\r\n${"x".repeat(65536)}`;
  const upload = fetch(`${rt}/upload`, {
    method: "POST",
    headers: { "X-API-Key": c.key, "content-type": `multipart/form-data; boundary=${boundary}` },
    body: new ReadableStream({ start: (ctl) => ctl.enqueue(new TextEncoder().encode(head)) }),
    signal: aborts[0]!.signal,
    duplex: "half",
  } as RequestInit).catch(() => undefined);
  const command = request(`${rt}/execute`, c.key, "POST", { command: ["sleep", "1000"] }, aborts[1]!.signal).catch(
    () => undefined,
  );
  await new Promise((r) => setTimeout(r, 1000));
  for (const a of aborts) a.abort();
  await Promise.all([upload, command]);
  await new Promise((r) => setTimeout(r, 500));
  await request(rt, c.key, "DELETE");
  const left = leftovers(home, [id], s.child.pid);
  s.child.kill("SIGTERM");
  await s.exited;
  return left;
}

export async function benchServerLoad(o: ServerLoadOptions): Promise<ServerLoadResult> {
  const root = mkdtempSync(join(o.workDir ?? tmpdir(), "msb-server-load-"));
  const home = join(root, "home");
  const clients: Client[] = Array.from({ length: Math.max(o.sandboxes, o.killWithLive, 1) }, (_, i) => ({
    key: `load-client-${i}-${"k".repeat(16)}`,
  }));
  const tokens = join(root, "tokens.json");
  writeFileSync(tokens, JSON.stringify({ tokens: clients.map((c, i) => ({ name: `client${i}`, token: c.key })) }), {
    mode: 0o600,
  });
  const max = clients.length + 8;
  try {
    const s = await startServe(home, tokens, max);
    const rssStart = rss(s.child.pid!);
    const load = await loadPhase(s.url, clients.slice(0, o.sandboxes), o.commandsPerSandbox, s.child.pid!);
    const rssEnd = rss(s.child.pid!);
    const loadIds = clients.flatMap((c) => (c.id ? [c.id] : []));
    const afterLoad = leftovers(home, loadIds, s.child.pid);
    s.child.kill("SIGTERM");
    await s.exited;
    const kill = await killPhase(home, tokens, clients, o.killWithLive, max);
    const disconnected = await disconnectPhase(home, tokens, clients[0]!, max);
    const commands = o.sandboxes * o.commandsPerSandbox;
    return {
      available: true,
      sandboxes: o.sandboxes,
      commandsPerSandbox: o.commandsPerSandbox,
      commands,
      errors: load.errors.length,
      errorSamples: load.errors.slice(0, 5),
      wallMs: Math.round(load.wallMs),
      commandsPerSecond: Math.round((load.samples.cmd.length / load.wallMs) * 1000),
      command: summarize(load.samples.cmd),
      create: summarize(load.samples.create),
      serverRssBytes: { start: rssStart, peak: load.peakRss, end: rssEnd },
      leftoversAfterLoad: afterLoad,
      kill: { liveAtKill: o.killWithLive, reapedAtRestart: kill.reaped, leftoversAfterRestart: kill.left },
      disconnects: { uploadsAborted: 1, commandsAborted: 1, leftovers: disconnected },
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
