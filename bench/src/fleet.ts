/**
 * Workload 8, many nodes. Layer transfer between two nodes (a real `minisandbox serve` holding the layer, a fresh
 * store fetching it over loopback): missing objects over HTTP, one pack over HTTP, a shared directory, and a plain
 * copy of the materialized tree; plus what a second layer of the same repository moves. Then, with Ray, the fleet on
 * a 3-node cluster simulated on this host (fleet-driver.py): placement overhead per sandbox and evaluation
 * throughput on 1 vs 3 nodes. Simulated nodes share this machine's CPUs: on few cores the 3-node figure shows the
 * fleet's overhead, not a speed-up.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { NodeCache } from "../../src/env/cache/index.js";
import {
  fetchPackHttp,
  openStore,
  pullLayer,
  pullLayerHttp,
  readManifest,
  summarizeManifest,
  type Store,
} from "../../src/env/store/index.js";
import { homeLayout } from "../../src/util/home.js";
import { run, runOk } from "../../src/util/run.js";
import type { BenchEnvironment } from "./setup.js";
import type { FleetResult, LayerTransfer, Unavailable } from "./types.js";

const CLI = fileURLToPath(new URL("../../src/cli/index.js", import.meta.url));
const here = dirname(fileURLToPath(import.meta.url));
/** The driver is source next to this module's source: bench/src, from dist/bench/src. */
const DRIVER = [join(here, "fleet-driver.py"), join(here, "..", "..", "..", "bench", "src", "fleet-driver.py")].find(
  existsSync,
);
const PYTHON_PACKAGE = join(here, "..", "..", "..", "integrations", "python");

export interface FleetBenchOptions {
  env: BenchEnvironment;
  work: string;
  /** Instances of the throughput run (their layers also travel in the transfer measurement). */
  instances: number;
  /** Rounds of each transfer method. */
  rounds: number;
  /** Python with Ray (default: $MINISANDBOX_RAY_PYTHON, else python3); without Ray the cluster part is n/a. */
  rayPython?: string;
  sandboxRounds: number;
  /** false: the layer transfer only. */
  cluster?: boolean;
  log: (msg: string) => void;
}

const mbPerS = (bytes: number, ms: number): number => Math.round((bytes / 1024 ** 2 / (ms / 1000)) * 10) / 10;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** A `minisandbox serve` child holding `home`'s layers, ready when its ready file appears. */
async function serve(home: string, token: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const ready = join(home, "serve.json");
  const child = spawn(
    process.execPath,
    [CLI, "--home", home, "serve", "--port", "0", "--log-level", "silent", "--ready-file", ready],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, MINISANDBOX_AUTH_TOKEN: token } },
  );
  let stderr = "";
  child.stderr!.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-4000)));
  const exited = new Promise((r) => child.once("exit", r));
  const deadline = Date.now() + 60_000;
  while (!existsSync(ready)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`serve did not start: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const { url } = JSON.parse(readFileSync(ready, "utf8")) as { url: string };
  return {
    url,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** Time one way of bringing a layer into a fresh destination, `rounds` times; the median. */
async function timeMethod(
  root: string,
  rounds: number,
  fn: (dest: string, store: Store) => Promise<void>,
): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const dest = mkdtempSync(join(root, "dest-"));
    try {
      const store = openStore(join(dest, "store"));
      const t = performance.now();
      await fn(dest, store);
      ms.push(performance.now() - t);
    } finally {
      await runOk("rm", ["-rf", dest]);
    }
  }
  return median(ms);
}

export async function benchLayerTransfer(o: FleetBenchOptions): Promise<LayerTransfer | Unavailable> {
  const keys = [...new Set(o.env.instances.map((i) => o.env.keys.get(i.instance_id)!))];
  const [key, second] = keys;
  if (!key) return { available: false, reason: "no built environment" };
  const root = mkdtempSync(join(o.work, "fleet-transfer-"));
  const token = randomBytes(16).toString("hex");
  const sourceHome = join(root, "source");
  let server: Awaited<ReturnType<typeof serve>> | undefined;
  try {
    const from = openStore(homeLayout(o.env.home).store);
    const sourceStore = openStore(homeLayout(sourceHome).store);
    for (const k of [key, second].filter(Boolean) as string[]) await pullLayer(sourceStore, from.root, k);
    const lease = await NodeCache.forHome(sourceHome).acquire(key);
    await lease.release();
    const summary = summarizeManifest(await readManifest(sourceStore, key));
    server = await serve(sourceHome, token);
    const src = { url: server.url, token };
    o.log(`fleet: layer transfer, ${(summary.logicalBytes / 1024 ** 2).toFixed(0)} MiB, ${o.rounds} round(s) each`);
    let packBytes = 0;
    const methods: LayerTransfer["methods"] = {
      http_objects: { ms: 0, mbPerS: 0 },
      http_pack: { ms: 0, mbPerS: 0 },
      shared_dir: { ms: 0, mbPerS: 0 },
      plain_copy: { ms: 0, mbPerS: 0 },
    };
    const ways: [keyof LayerTransfer["methods"], (dest: string, store: Store) => Promise<void>][] = [
      ["http_objects", async (_d, s) => void (await pullLayerHttp(s, src, key))],
      [
        "http_pack",
        async (_d, s) => {
          packBytes = (await fetchPackHttp(s, src, key)).packBytes;
        },
      ],
      ["shared_dir", async (_d, s) => void (await pullLayer(s, sourceStore.root, key))],
      ["plain_copy", (d) => runOk("cp", ["-a", join(homeLayout(sourceHome).cache, "layers", key), d]).then(() => {})],
    ];
    for (const [name, fn] of ways) {
      const ms = await timeMethod(root, o.rounds, fn);
      methods[name] = { ms: Math.round(ms), mbPerS: mbPerS(summary.logicalBytes, ms) };
    }
    let incremental: LayerTransfer["incremental"] = null;
    if (second) {
      const dest = mkdtempSync(join(root, "dest-"));
      const store = openStore(join(dest, "store"));
      await pullLayerHttp(store, src, key);
      const t = performance.now();
      const r = await pullLayerHttp(store, src, second);
      const full = summarizeManifest(await readManifest(sourceStore, second)).logicalBytes;
      incremental = {
        ms: Math.round(performance.now() - t),
        objectsMoved: r.objectsFetched,
        bytesMoved: r.bytesFetched,
        objectsPresent: r.objectsPresent,
        layerBytes: full,
      };
    }
    return {
      available: true,
      layerBytes: summary.logicalBytes,
      files: summary.files,
      packBytes,
      rounds: o.rounds,
      methods,
      incremental,
    };
  } finally {
    await server?.stop();
    await run("rm", ["-rf", root]);
  }
}

async function hasRay(python: string): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "the simulated cluster needs root (network and pid namespaces of its own)";
  if (!DRIVER) return "fleet-driver.py not found next to the bench (run from a checkout)";
  const r = await run(python, ["-c", "import ray"]).catch(() => undefined);
  if (r?.code !== 0)
    return `no Ray in ${python} (give a Python with Ray: --ray-python PATH or $MINISANDBOX_RAY_PYTHON)`;
  return undefined;
}

/** The cluster part: placement overhead and 1-vs-3-node throughput, run by fleet-driver.py in namespaces. */
export async function benchFleetCluster(o: FleetBenchOptions): Promise<FleetResult["cluster"]> {
  const python = o.rayPython ?? process.env.MINISANDBOX_RAY_PYTHON ?? "python3";
  const missing = await hasRay(python);
  if (missing) return { available: false, reason: missing };
  const instances = o.env.instances.slice(0, o.instances);
  const keys = [...new Set(instances.map((i) => o.env.keys.get(i.instance_id)!))];
  // Ray's socket paths live under the cluster's directory: keep it short (AF_UNIX paths end at 107 bytes).
  const base = mkdtempSync(join(tmpdir().length <= 20 ? tmpdir() : "/tmp", "msbb-"));
  try {
    const n0 = openStore(homeLayout(join(base, "n0", "home")).store);
    for (const k of keys) await pullLayer(n0, homeLayout(o.env.home).store, k);
    mkdirSync(join(base, "out"), { recursive: true });
    const settings = join(base, "settings.json");
    writeFileSync(
      settings,
      JSON.stringify({
        base,
        cli: [process.execPath, CLI],
        repos: o.env.reposDir,
        dataset: o.env.datasetPath,
        instanceIds: instances.map((i) => i.instance_id),
        keys,
        slots: 2,
        sandboxRounds: o.sandboxRounds,
        sandboxBurst: 12,
        outDir: join(base, "out"),
      }),
    );
    o.log(`fleet: a 3-node Ray cluster on this host, ${instances.length} instance(s)`);
    const args = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", "sh", "-c"];
    const r = await run("unshare", [...args, 'ip link set lo up && "$@"', "sh", python, DRIVER!, settings], {
      env: { ...process.env, TMPDIR: base, PYTHONPATH: PYTHON_PACKAGE, PIP_RETRIES: "0", NO_PROXY: "*" },
      timeoutMs: 1_800_000,
    });
    const line = r.stdout.split("\n").find((l) => l.startsWith('{"result"'));
    if (r.code !== 0 || !line) {
      const tail = r.stderr.split("\n").filter((l) => !/network_util\.cc|^\s*$/.test(l));
      return { available: false, reason: `the cluster run failed (${r.code}): ${tail.slice(-5).join(" | ")}` };
    }
    return { available: true, ...(JSON.parse(line) as { result: object }).result } as FleetResult["cluster"];
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

export async function benchFleet(o: FleetBenchOptions): Promise<FleetResult> {
  const transfer = await benchLayerTransfer(o).catch(
    (e: unknown): Unavailable => ({ available: false, reason: `layer transfer failed: ${(e as Error).message}` }),
  );
  const cluster = await (o.cluster === false
    ? Promise.resolve<Unavailable>({ available: false, reason: "disabled for this run" })
    : benchFleetCluster(o)
  ).catch((e: unknown): Unavailable => ({ available: false, reason: `cluster run failed: ${(e as Error).message}` }));
  return { available: true, cpus: cpus().length, transfer, cluster };
}
