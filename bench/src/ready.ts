/**
 * Workload 1, workspace ready: create -> first command output, for every variant, rounds interleaved so that machine
 * noise hits all variants alike. Each round runs, per variant, the trivial first command (`echo`) in a fresh
 * workspace and the real first command (`python -c "import <pkg>"`) in another fresh workspace.
 */
import { Sandbox } from "../../src/index.js";
import { systemEntries, requireTool } from "../../src/sandbox/host.js";
import { nodeCacheFor } from "../../src/env/environments.js";
import { resolveWorkspace, Workspace } from "../../src/env/workspace.js";
import { parseImageLower } from "../../src/sandbox/plan.js";
import { TESTBED_PATH, VENV_PATH } from "../../src/env/types.js";
import { ensureTarballs, extractRun, type Tarballs } from "./extract.js";
import { Podman } from "./podman.js";
import { parsePycProbe, pycNewerCommand, pycProbe } from "./pyc.js";
import { timedRun } from "./proc.js";
import type { BenchEnvironment } from "./setup.js";
import { summarize } from "./stats.js";
import type { ReadyVariant, ReadyVariantName, Unavailable } from "./types.js";

const ECHO = "echo ready";

/** One way of getting a workspace, measured in interleaved rounds (`measureRounds`). */
export interface Variant<N extends string = ReadyVariantName> {
  name: N;
  label: string;
  method: string;
  /** Untimed preparation before each timed workspace (e.g. evicting the layer). */
  before?: () => Promise<void>;
  /** One fresh workspace running `command`; returns ms to its output and, where observable, .pyc files written. */
  once: (command: string, startedEpochSec: number) => Promise<{ ms: number; output: string; pycNewer: number | null }>;
  /** Untimed: the `python -v` probe's merged output in a fresh workspace. */
  probe: () => Promise<string>;
}

/** The environment of every command in every variant: the same clean set (never the bench's own). */
export function workspaceEnv(env: BenchEnvironment): Record<string, string> {
  return {
    PATH: `${VENV_PATH}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    VIRTUAL_ENV: VENV_PATH,
    HOME: "/root",
    LANG: "C.UTF-8",
    ...env.primarySpec.env,
  };
}

/** Waits until no lease holds the layer (sandboxes release theirs asynchronously on close), then evicts it. */
export async function evictLayer(home: string, key: string): Promise<void> {
  const cache = nodeCacheFor(home);
  for (let i = 0; i < 500; i++) {
    const layer = (await cache.list()).find((l) => l.key === key);
    if (!layer) return;
    if (layer.leases === 0) {
      await cache.evict({ maxBytes: 0 });
      if (!(await cache.has(key))) return;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`could not evict layer ${key.slice(0, 12)} from the node cache (still leased)`);
}

function minisandboxVariant(env: BenchEnvironment, cold: boolean): Variant {
  const create = (): Promise<Sandbox> =>
    Sandbox.create({ instance: env.primary, home: env.home, specsFile: env.specsFile });
  return {
    name: cold ? "minisandbox_cold" : "minisandbox_warm",
    label: cold ? "minisandbox cold" : "minisandbox warm",
    method: cold
      ? "layer evicted from the node cache first; Sandbox.create({instance}) brings it back in the cache's form " +
        "(its metadata image where the host mounts one, else hard links from the store), then exec"
      : "layer in the node cache; Sandbox.create({instance}) + exec (bwrap + overlayfs, clean environment)",
    before: cold
      ? () => evictLayer(env.home, env.primaryKey)
      : async () => void (await nodeCacheFor(env.home).acquire(env.primaryKey)).release(),
    once: (command, started) => sandboxOnce(create, command, started),
    probe: async () => {
      if (cold) await evictLayer(env.home, env.primaryKey);
      return sandboxProbe(create, env.importModule);
    },
  };
}

/** One timed minisandbox workspace: create → `command`'s output; then, untimed, the .pyc files it wrote. */
export async function sandboxOnce(
  create: () => Promise<Sandbox>,
  command: string,
  started: number,
): ReturnType<Variant["once"]> {
  const t = performance.now();
  const sb = await create();
  try {
    const r = await sb.exec(command);
    const ms = performance.now() - t;
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${r.stderr.trim().slice(-300)}`);
    let pycNewer: number | null = null;
    if (command !== ECHO)
      pycNewer = Number((await sb.exec(pycNewerCommand([TESTBED_PATH, VENV_PATH], started))).stdout.trim()) || 0;
    return { ms, output: r.stdout, pycNewer };
  } finally {
    await sb.close();
  }
}

/** The `python -v` probe in a fresh minisandbox workspace. */
export async function sandboxProbe(create: () => Promise<Sandbox>, importModule: string): Promise<string> {
  const sb = await create();
  try {
    return (await sb.exec(`${pycProbe(importModule)} 2>&1`)).stdout;
  } finally {
    await sb.close();
  }
}

/**
 * Sandbox.create(options) with the environment resolved once (spec, toolchain, lease), as a long-running server or a
 * pool does: the sandbox's own cost without the per-call environment lookup of the instance API.
 */
async function resolvedVariant(env: BenchEnvironment): Promise<Variant> {
  const ws = await resolveWorkspace({
    home: env.home,
    instance: env.primary,
    environment: { spec: env.primarySpec, key: env.primaryKey },
  });
  // The same options on a workspace that holds no lease, held for the whole bench: the paths stay valid across
  // evictions (layers/<key>/…), and `before` re-materializes after the cold variant's runs.
  const pinned = new Workspace({ kind: ws.kind, options: ws.options });
  pinned.hold();
  ws.release();
  // Brought back in the form its options name: the cold variant's eviction may leave the host's other form next.
  const lowers = (ws.options.overlays ?? []).flatMap((o) => o.lower);
  const form = lowers.some((l) => parseImageLower(l) !== undefined) ? "image" : "tree";
  return {
    name: "minisandbox_warm_resolved",
    label: "minisandbox warm, env resolved once",
    method:
      "resolveWorkspace() once (toolchain lookup, lease) then per run workspace.start() + exec: " +
      "what a server or pool pays",
    once: (command, started) => sandboxOnce(() => pinned.start(), command, started),
    probe: () => sandboxProbe(() => pinned.start(), env.importModule),
    before: async () => void (await nodeCacheFor(env.home).acquire(env.primaryKey, { form })).release(),
  };
}

async function bwrapVariant(env: BenchEnvironment): Promise<Variant> {
  const bwrap = requireTool("bwrap", "bubblewrap");
  const lease = await nodeCacheFor(env.home).acquire(env.primaryKey, { form: "tree" });
  const trees = { ...lease.trees };
  await lease.release();
  const args = (command: string): string[] => {
    const a = ["--die-with-parent", "--unshare-all"];
    for (const e of systemEntries())
      a.push(...(e.symlinkTo ? ["--symlink", e.symlinkTo, e.path] : ["--ro-bind", e.path, e.path]));
    for (const t of env.toolchain.mounts) a.push("--ro-bind", t, t);
    // Read-only: the node cache's files are hard links into the store and must never be written.
    a.push("--ro-bind", trees["testbed"]!, TESTBED_PATH, "--ro-bind", trees["venv"]!, VENV_PATH);
    a.push("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", TESTBED_PATH, "--clearenv");
    for (const [k, v] of Object.entries(workspaceEnv(env))) a.push("--setenv", k, v);
    return [...a, "/bin/sh", "-c", command];
  };
  return {
    name: "bwrap_raw",
    label: "raw bwrap",
    method:
      "bwrap --unshare-all with read-only binds of the materialized trees (no overlay, no session machinery): " +
      "the floor",
    before: async () => void (await nodeCacheFor(env.home).acquire(env.primaryKey, { form: "tree" })).release(),
    once: async (command) => {
      const r = await timedRun(bwrap, args(command));
      if (r.code !== 0) throw new Error(`bwrap exit ${r.code}: ${r.stderr.trim().slice(-300)}`);
      return { ms: r.exitMs, output: r.stdout, pycNewer: null };
    },
    // Leased while it runs: the cold variant may have evicted the trees since (its sandboxes mount a layer image).
    probe: async () => {
      const held = await nodeCacheFor(env.home).acquire(env.primaryKey, { form: "tree" });
      try {
        return (await timedRun(bwrap, args(`${pycProbe(env.importModule)} 2>&1`))).stdout;
      } finally {
        await held.release();
      }
    },
  };
}

async function extractVariant(env: BenchEnvironment, work: string): Promise<Variant> {
  const lease = await nodeCacheFor(env.home).acquire(env.primaryKey, { form: "tree" });
  let tarballs: Tarballs;
  try {
    tarballs = await ensureTarballs(work, env.primaryKey, {
      testbed: lease.trees["testbed"]!,
      venv: lease.trees["venv"]!,
    });
  } finally {
    await lease.release();
  }
  const base = { work, tarballs, toolchainMounts: env.toolchain.mounts, env: workspaceEnv(env) };
  return {
    name: "extract_per_task",
    label: "extract-per-task",
    method:
      "per-task venv.tar.gz + testbed.tar.gz extracted (gzip, both at once) into a private dir, " +
      "unshare --mount + bind mounts + chroot",
    once: async (command, started) => {
      const { run, pycWritten } = await extractRun({
        ...base,
        command,
        countPycNewerThan: command === ECHO ? undefined : started,
      });
      if (run.code !== 0) throw new Error(`extract exit ${run.code}: ${run.stderr.trim().slice(-300)}`);
      return { ms: run.exitMs, output: run.stdout, pycNewer: pycWritten };
    },
    probe: async () => (await extractRun({ ...base, command: `${pycProbe(env.importModule)} 2>&1` })).run.stdout,
  };
}

async function podmanVariant(env: BenchEnvironment, podman: Podman): Promise<Variant> {
  const image = await ensureEnvImageFor(env, podman, env.primaryKey);
  return {
    name: "podman",
    label: `podman (${podman.runtime})`,
    method:
      "podman run --rm --network none <image with the same venv, testbed and toolchain> " +
      `(podman ${podman.version}, ${podman.runtime})`,
    once: async (command) => {
      const r = await podman.run(image, ["/bin/sh", "-c", command]);
      if (r.code !== 0) throw new Error(`podman exit ${r.code}: ${r.stderr.trim().slice(-300)}`);
      return { ms: r.exitMs, output: r.stdout, pycNewer: null };
    },
    probe: async () => (await podman.run(image, ["/bin/sh", "-c", `${pycProbe(env.importModule)} 2>&1`])).stdout,
  };
}

/** The podman image of one of the environment's layers (built once, kept in the bench's podman storage). */
export async function ensureEnvImageFor(env: BenchEnvironment, podman: Podman, key: string): Promise<string> {
  const toolchainImage = await podman.ensureToolchainImage(env.toolchain.version, env.toolchain.mounts);
  const lease = await nodeCacheFor(env.home).acquire(key, { form: "tree" });
  try {
    const spec = [...env.keys].find(([, k]) => k === key)?.[0];
    const extra = spec ? env.specs.get(spec)!.env : {};
    return await podman.ensureEnvImage(key, toolchainImage, lease.path, extra);
  } finally {
    await lease.release();
  }
}

export interface ReadyOptions {
  env: BenchEnvironment;
  work: string;
  runs: number;
  podman: Podman | Unavailable;
  log: (m: string) => void;
}

type ReadyOut = Record<ReadyVariantName, ReadyVariant | Unavailable>;

export interface Samples {
  echo: number[];
  import: number[];
  failures: number;
  pycNewer: number | null;
  errors: string[];
}

export async function benchReady(opts: ReadyOptions): Promise<ReadyOut> {
  const out = {} as ReadyOut;
  const variants = await readyVariants(opts, out);
  const samples = await measureRounds(variants, { ...opts, importModule: opts.env.importModule });
  for (const v of variants) out[v.name] = await summarizeVariant(v, samples.get(v.name)!, opts.log);
  return out;
}

/** Every variant that can run here; the others are recorded in `out` as not available, with the reason. */
async function readyVariants(opts: ReadyOptions, out: ReadyOut): Promise<Variant[]> {
  const { env } = opts;
  const variants: Variant[] = [
    minisandboxVariant(env, false),
    await resolvedVariant(env),
    minisandboxVariant(env, true),
  ];
  const tryAdd = async (name: ReadyVariantName, make: () => Promise<Variant>): Promise<void> => {
    try {
      variants.push(await make());
    } catch (e) {
      out[name] = { available: false, reason: (e as Error).message.split("\n")[0]! };
    }
  };
  await tryAdd("bwrap_raw", () => bwrapVariant(env));
  await tryAdd("extract_per_task", () => extractVariant(env, opts.work));
  if (opts.podman instanceof Podman) {
    const p = opts.podman;
    await tryAdd("podman", () => podmanVariant(env, p));
  } else out.podman = opts.podman;
  return variants;
}

/**
 * Writes back the previous measurement's dirty pages (an extracted 280 MiB tree, a removed container) before the next
 * one starts, so that no variant is timed while another's writes still occupy the disk.
 */
async function settle(): Promise<void> {
  await timedRun("sync", []);
}

/**
 * One warm-up each, then `runs` rounds: in each, every variant runs `echo` and the import in fresh workspaces, in an
 * order rotated from round to round, each after the previous one's writes reached the disk.
 */
export async function measureRounds<N extends string>(
  variants: Variant<N>[],
  opts: { runs: number; importModule: string; log: (m: string) => void },
): Promise<Map<N, Samples>> {
  const importCmd = `python -c "import ${opts.importModule}"`;
  const samples = new Map<N, Samples>();
  for (const v of variants) samples.set(v.name, { echo: [], import: [], failures: 0, pycNewer: null, errors: [] });
  const started = Date.now() / 1000 - 1;
  // One warm-up each (page cache, first podman/bwrap start), not counted.
  for (const v of variants) {
    await v.before?.();
    await v.once(ECHO, started).catch(() => undefined);
  }
  for (let round = 0; round < opts.runs; round++) {
    // Each round starts with another variant, so none always runs right after the heaviest one.
    const order = variants.map((_, i) => variants[(i + round) % variants.length]!);
    for (const v of order) {
      const s = samples.get(v.name)!;
      for (const [kind, cmd] of [
        ["echo", ECHO],
        ["import", importCmd],
      ] as const) {
        try {
          await v.before?.();
          await settle();
          const r = await v.once(cmd, started);
          if (kind === "echo" && r.output.trim() !== "ready")
            throw new Error(`unexpected output ${JSON.stringify(r.output.slice(0, 100))}`);
          s[kind].push(r.ms);
          if (r.pycNewer !== null) s.pycNewer = (s.pycNewer ?? 0) + r.pycNewer;
        } catch (e) {
          s.failures++;
          if (s.errors.length < 3) s.errors.push((e as Error).message.split("\n")[0]!);
        }
      }
    }
    if ((round + 1) % 5 === 0 || round + 1 === opts.runs) opts.log(`ready: round ${round + 1}/${opts.runs}`);
  }
  return samples;
}

/** The variant's distributions, and its bytecode check (the `python -v` probe, untimed). */
export async function summarizeVariant(
  v: Variant<string>,
  s: Samples,
  log: (m: string) => void,
): Promise<ReadyVariant | Unavailable> {
  let pyc = null;
  try {
    pyc = parsePycProbe(await v.probe(), s.pycNewer);
  } catch (e) {
    log(`pyc probe for ${v.name} failed: ${(e as Error).message}`);
  }
  if (s.echo.length === 0) return { available: false, reason: `every run failed: ${s.errors.join("; ")}` };
  return {
    available: true,
    label: v.label,
    method: v.method,
    echo: summarize(s.echo),
    import: s.import.length ? summarize(s.import) : null,
    pyc,
    failures: s.failures,
    ...(s.errors.length ? { errors: s.errors } : {}),
  } as ReadyVariant;
}
