/**
 * Workload 10, the command line: `minisandbox --version` against node starting an empty script (the floor of any
 * Node.js command), and `minisandbox exec --dir D -- true` end to end against `podman run --rm` of the base image
 * (when podman is there). Whole processes, wall time, rounds interleaved; medians.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { BASE_IMAGE, Podman } from "./podman.js";
import type { CliStartResult, Unavailable } from "./types.js";

const CLI = fileURLToPath(new URL("../../src/cli/index.js", import.meta.url));

/** Wall time of one whole process; a non-zero exit is a failure of the measurement. */
function timed(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const t = performance.now();
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "ignore", "pipe"], env });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-2000)));
    child.once("error", reject);
    child.once("close", (code) => {
      if (code === 0) resolve(performance.now() - t);
      else reject(new Error(`${argv.slice(0, 3).join(" ")} exited ${code}: ${stderr.trim().split("\n").pop()}`));
    });
  });
}

const median = (xs: number[]): number =>
  Math.round([...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]! * 10) / 10;

export async function benchCliStart(o: {
  work: string;
  runs: number;
  podman: Podman | Unavailable;
}): Promise<CliStartResult> {
  const dir = mkdtempSync(join(o.work, "cli-start-"));
  try {
    const empty = join(dir, "empty.mjs");
    writeFileSync(empty, "");
    const env = { ...process.env, MINISANDBOX_HOME: join(dir, "home") };
    const variants: Record<string, string[]> = {
      node_empty: [process.execPath, empty],
      version: [process.execPath, CLI, "--version"],
      exec_true: [process.execPath, CLI, "exec", "--dir", dir, "--", "true"],
    };
    if (o.podman instanceof Podman)
      variants.podman_run = [o.podman.bin, ...o.podman.global, "run", "--rm", "--network", "none", BASE_IMAGE, "true"];
    const ms: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
    for (const argv of Object.values(variants)) await timed(argv, env); // warm-up: page cache, first reap
    for (let i = 0; i < o.runs; i++)
      for (const [name, argv] of Object.entries(variants)) ms[name]!.push(await timed(argv, env));
    return {
      available: true,
      runs: o.runs,
      nodeEmptyMs: median(ms.node_empty!),
      versionMs: median(ms.version!),
      execMs: median(ms.exec_true!),
      podmanRunMs: ms.podman_run?.length ? median(ms.podman_run) : null,
      podmanReason: o.podman instanceof Podman ? null : o.podman.reason,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
