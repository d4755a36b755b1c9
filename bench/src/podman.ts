/**
 * The container baseline: podman (runtime runc) with images built from the same environments. The bench keeps its
 * own podman storage under the work dir (`--root`), so its images never mix with the user's and their disk use can
 * be measured exactly. The base OS image comes from scripts/bench-setup.sh; the bench never installs packages.
 */
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findTool } from "../../src/sandbox/host.js";
import { DiskUsage } from "./du.js";
import { mustRun, timedRun, type TimedRun } from "./proc.js";

export const BASE_IMAGE = "localhost/minisandbox-bench-base";
export const SETUP_HINT =
  "run `sudo scripts/bench-setup.sh` (installs podman, runc, debootstrap and imports a Debian base image)";

export interface PodmanRunOptions {
  input?: string;
  interactive?: boolean;
  timeoutMs?: number;
  env?: Record<string, string>;
  readOnlyMounts?: string[];
  /** The podman process's own environment (default CLEAN_ENV), e.g. with a CONTAINERS_CONF. */
  processEnv?: Record<string, string>;
}

/** `podman <global> run --rm --network none [-i] [-e K=V] [-v M:M:ro] IMAGE COMMAND…`, timed. */
export function podmanRun(
  bin: string,
  global: string[],
  image: string,
  command: string[],
  opts: PodmanRunOptions = {},
): Promise<TimedRun> {
  const flags = ["run", "--rm", "--network", "none", ...(opts.interactive ? ["-i"] : [])];
  for (const [k, v] of Object.entries(opts.env ?? {})) flags.push("-e", `${k}=${v}`);
  for (const m of opts.readOnlyMounts ?? []) flags.push("-v", `${m}:${m}:ro`);
  return timedRun(bin, [...global, ...flags, image, ...command], {
    input: opts.input,
    timeoutMs: opts.timeoutMs ?? 600_000,
    ...(opts.processEnv ? { env: opts.processEnv } : {}),
  });
}

export type PodmanStatus = { available: true; version: string; runtime: string } | { available: false; reason: string };

export class Podman {
  readonly global: string[];
  runtime = "";
  /** Whether the base image has git (evaluation needs it; older setups made it without). */
  hasGit = false;

  private constructor(
    readonly bin: string,
    readonly root: string,
    readonly version: string,
  ) {
    this.global = [
      "--root",
      join(root, "storage"),
      "--runroot",
      join(root, "run"),
      "--storage-driver",
      "overlay",
      "--log-level",
      "error",
    ];
  }

  /**
   * podman with the bench's storage, or why not. Copies the base image into that storage on first use, and starts
   * that storage over when the base image changed (its images were built FROM the old one).
   */
  static async open(work: string, log: (m: string) => void): Promise<Podman | { available: false; reason: string }> {
    const bin = findTool("podman");
    if (!bin) return { available: false, reason: `podman is not installed: ${SETUP_HINT}` };
    const version = (await timedRun(bin, ["--version"])).stdout.trim().replace(/^podman version /, "");
    const root = join(work, "podman");
    mkdirSync(root, { recursive: true });
    const p = new Podman(bin, root, version);
    const info = await timedRun(bin, p.args("info", "--format", "{{.Host.OCIRuntime.Name}}"));
    if (info.code !== 0)
      return {
        available: false,
        reason: `podman does not work here: ${info.stderr.trim().split("\n").pop()} (${SETUP_HINT})`,
      };
    p.runtime = info.stdout.trim();
    const idOf = async (args: string[]): Promise<string | undefined> => {
      const r = await timedRun(bin, [...args, "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE]);
      return r.code === 0 ? r.stdout.trim() : undefined;
    };
    const upstream = await idOf([]);
    const ours = await idOf(p.global);
    if (!upstream && !ours) return { available: false, reason: `base image ${BASE_IMAGE} is missing: ${SETUP_HINT}` };
    if (upstream && ours !== upstream) {
      if (ours) {
        log(`${BASE_IMAGE} changed: starting the bench's podman storage over`);
        await mustRun(bin, p.args("system", "reset", "--force"), { timeoutMs: 600_000 });
      }
      log(`copying ${BASE_IMAGE} into the bench's podman storage`);
      const tar = join(root, "base.tar");
      try {
        await mustRun(bin, ["save", "-o", tar, BASE_IMAGE], { timeoutMs: 600_000 });
        await mustRun(bin, p.args("load", "-q", "-i", tar), { timeoutMs: 600_000 });
      } finally {
        rmSync(tar, { force: true });
      }
    }
    const smoke = await timedRun(
      bin,
      p.args("run", "--rm", "--network", "none", BASE_IMAGE, "sh", "-c", "command -v git || true"),
      { timeoutMs: 120_000 },
    );
    if (smoke.code !== 0)
      return {
        available: false,
        reason: `podman run fails here: ${smoke.stderr.trim().split("\n").slice(-2).join(" ")} (${SETUP_HINT})`,
      };
    p.hasGit = smoke.stdout.trim() !== "";
    return p;
  }

  args(...a: string[]): string[] {
    return [...this.global, ...a];
  }

  private tags: Set<string> | undefined;

  /** One `podman images` per run (then kept up to date by our builds): a process per check costs ~0.3 s. */
  async exists(image: string): Promise<boolean> {
    if (!this.tags) {
      const r = await mustRun(this.bin, this.args("images", "--format", "{{.Repository}}:{{.Tag}}"));
      this.tags = new Set(
        r.stdout
          .split("\n")
          .map((l) => l.trim())
          .filter(Boolean),
      );
    }
    return this.tags.has(image);
  }

  private async build(tag: string, containerfile: string, context: string): Promise<void> {
    const file = join(this.root, `Containerfile.${tag.replace(/[^\w.-]/g, "_")}`);
    writeFileSync(file, containerfile);
    try {
      await mustRun(
        this.bin,
        this.args("build", "-q", "--layers", "--network", "none", "-t", tag, "-f", file, context),
        { timeoutMs: 1_800_000 },
      );
      this.tags?.add(tag);
    } finally {
      rmSync(file, { force: true });
    }
  }

  /** Base OS + the interpreter installation at its own path (one image per toolchain, shared by every env image). */
  async ensureToolchainImage(version: string, mounts: string[]): Promise<string> {
    const tag = `localhost/msb-bench-python:${version}`;
    if (await this.exists(tag)) return tag;
    let from = BASE_IMAGE;
    for (const [i, m] of mounts.entries()) {
      const t = i === mounts.length - 1 ? tag : `localhost/msb-bench-python-part${i}:${version}`;
      await this.build(t, `FROM ${from}\nCOPY . ${m}\n`, m);
      from = t;
    }
    if (mounts.length === 0) await this.build(tag, `FROM ${BASE_IMAGE}\n`, this.root);
    return tag;
  }

  /** The environment's image: venv at /opt/venv, testbed at /testbed, same PATH and variables as a sandbox. */
  async ensureEnvImage(
    key: string,
    toolchainImage: string,
    layerDir: string,
    env: Record<string, string>,
  ): Promise<string> {
    const tag = `localhost/msb-bench-env:${key.slice(0, 24)}`;
    if (await this.exists(tag)) return tag;
    const vars = {
      PATH: "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      VIRTUAL_ENV: "/opt/venv",
      LANG: "C.UTF-8",
      ...env,
    };
    const envLine = Object.entries(vars)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(" ");
    await this.build(
      tag,
      `FROM ${toolchainImage}\nCOPY venv /opt/venv\nCOPY testbed /testbed\nENV ${envLine}\nWORKDIR /testbed\n`,
      layerDir,
    );
    return tag;
  }

  run(image: string, command: string[], opts: PodmanRunOptions = {}): Promise<TimedRun> {
    return podmanRun(this.bin, this.global, image, command, opts);
  }

  private readonly inspected = new Map<string, { dirs: string[]; size: number }>();

  /** Layer directories (bottom first) and listed size of images, one `podman image inspect` for all, cached. */
  async inspect(images: string[]): Promise<Map<string, { dirs: string[]; size: number }>> {
    const missing = [...new Set(images.filter((i) => !this.inspected.has(i)))];
    if (missing.length) {
      const r = await mustRun(this.bin, this.args("image", "inspect", ...missing));
      const data = JSON.parse(r.stdout) as {
        Size?: number;
        GraphDriver?: { Data?: { UpperDir?: string; LowerDir?: string } };
      }[];
      data.forEach((d, i) => {
        const g = d.GraphDriver?.Data ?? {};
        const dirs = [...(g.LowerDir ? g.LowerDir.split(":").reverse() : []), ...(g.UpperDir ? [g.UpperDir] : [])];
        // .../overlay/<id>/diff -> .../overlay/<id> (diff, link, lower, work: everything podman keeps for the layer).
        this.inspected.set(missing[i]!, {
          dirs: dirs.map((x) => x.replace(/\/diff$/, "")).filter((x) => existsSync(x)),
          size: d.Size ?? 0,
        });
      });
    }
    return new Map(images.map((i) => [i, this.inspected.get(i)!]));
  }

  /**
   * Disk use of a set of images: every layer counted once. `exclude` are layers not charged to the environments
   * (the base OS and the toolchain, which a sandbox takes from the host).
   */
  async diskUse(
    images: string[],
    excludeImages: string[],
  ): Promise<{ envBytes: number; totalBytes: number; listedBytes: number }> {
    const info = await this.inspect([...images, ...excludeImages]);
    const excluded = new Set(excludeImages.flatMap((i) => info.get(i)!.dirs));
    const all = new Set(images.flatMap((i) => info.get(i)!.dirs));
    const listed = images.reduce((n, i) => n + info.get(i)!.size, 0);
    let envBytes = 0;
    let totalBytes = 0;
    for (const d of all) {
      const bytes = await this.layerBytes(d);
      totalBytes += bytes;
      if (!excluded.has(d)) envBytes += bytes;
    }
    return { envBytes, totalBytes, listedBytes: listed };
  }

  private readonly layerSizes = new Map<string, number>();

  /** Allocated bytes of one layer directory (layers are immutable: measured once per run). */
  private async layerBytes(dir: string): Promise<number> {
    let n = this.layerSizes.get(dir);
    if (n === undefined) {
      const du = new DiskUsage();
      await du.add(dir);
      n = du.allocated;
      this.layerSizes.set(dir, n);
    }
    return n;
  }
}
