/** `minisandbox serve`: the HTTP server (native lifecycle API + SWE-ReX runtime). Parsing and printing only. */
import type { Command } from "commander";
import type { RunningServer, ServerOptions } from "../server/server.js";
import type { ProviderFactory, WorkspaceProvider } from "../server/provider.js";
import type { ImagePolicy } from "../env/instance-image.js";
import { parseSize } from "../util/size.js";
import { InvalidInputError } from "../errors.js";
import { collect, fail, parseBind } from "./common.js";
import { addBaseOption, baseFrom, imagePolicyFrom, type BaseFlag, type ImageFlags } from "./workspace.js";
import { addNodeServeOptions, stopWhenStdinEnds, writeReadyFile, type NodeServeOptions } from "./serve-node.js";

interface ServeOptions extends NodeServeOptions, ImageFlags, BaseFlag {
  host: string;
  port: string;
  authToken?: string;
  tokensFile?: string;
  auth: boolean;
  rateLimit?: string;
  maxBody?: string;
  maxRead?: string;
  fileTimeout: string;
  dataset?: string;
  specs?: string;
  maxSandboxes?: string;
  dir?: string;
  python?: string;
  bind: string[];
  allowDir: string[];
  ttl?: string;
  idleTimeout: string;
  memory?: string;
  pids?: string;
  cpu?: string;
  cpus?: string;
  disk?: string;
  maxUpload: string;
  publicUrl?: string;
  logLevel: string;
  warmPool?: string;
  maxRollouts?: string;
  rewardMode: string;
}

function integer(v: string | undefined, name: string, allowZero = false): number | undefined {
  const n = positive(v, name, allowZero);
  if (n !== undefined && !Number.isInteger(n)) throw new InvalidInputError(`${name} expects a whole number, got ${v}`);
  return n;
}

function positive(v: string | undefined, name: string, allowZero = false): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || (!allowZero && n === 0))
    throw new InvalidInputError(`${name} expects a positive number, got ${v}`);
  return n;
}

/**
 * Registers `serve`. `providerFactory` builds the workspace provider for `--dataset` (instance sandboxes,
 * evaluate, diff); without it, the server serves directories only.
 */
export function registerServeCommand(program: Command, getHome: () => string, providerFactory?: ProviderFactory): void {
  addBaseOption(addNodeServeOptions(program.command("serve")))
    .description("serve sandboxes over HTTP: lifecycle API + SWE-ReX remote runtime per sandbox")
    .option("--host <HOST>", "interface to bind", "127.0.0.1")
    .option("--port <PORT>", "port (0: any free port)", "8000")
    .option(
      "--auth-token <TOKEN>",
      "admin X-API-Key (or $MINISANDBOX_AUTH_TOKEN); default: a generated one in <home>/server/token",
    )
    .option(
      "--tokens-file <FILE>",
      'more clients: {"tokens": [{"name", "token", "admin"?, "max_sandboxes"?, "network"?, "limits"?}]}',
    )
    .option("--no-auth", "no authentication at all (loopback only; anyone on this host can then use the server)")
    .option("--rate-limit <N>", "requests per second per token, bursts of 2N (0: none)", "200")
    .option("--dataset <FILE>", "SWE-bench / SWE-smith dataset: create sandboxes from instance ids, evaluate, diff")
    .option("--specs <FILE>", "environment spec overrides (JSON), as given to prepare and evaluate")
    .option("--images <auto|row|swebench|none>", "with --dataset: rows on Docker/OCI images of the store (as evaluate)")
    .option("--image-template <TEMPLATE>", "with --dataset: each row's image from a template (as evaluate)")
    .option("--max-sandboxes <N>", "live sandboxes at most, then HTTP 429 (default: 1 GiB and 512 processes each)")
    .option("--dir <DIR>", "also serve one default sandbox of DIR at the root (like swerex-remote)")
    .option("--python <VERSION>", "the default sandbox gets this host Python first on PATH (python, python3, pip)")
    .option("--bind <HOST[:PATH][:ro]>", "share a host directory with the default sandbox (repeatable)", collect, [])
    .option(
      "--allow-dir <DIR>",
      "let POST /sandboxes {dir} mount directories under DIR (repeatable; default: no host directories)",
      collect,
      [] as string[],
    )
    .option("--ttl <SECONDS>", "default lifetime of a sandbox")
    .option("--idle-timeout <SECONDS>", "close sandboxes idle this long (0: never)", "3600")
    .option("--memory <SIZE>", "maximum (and default) memory per sandbox, e.g. 4G (default: the host's share)")
    .option("--pids <N>", "maximum (and default) processes per sandbox (default: the host's share of pid_max)")
    .option("--cpu <SECONDS>", "maximum (and default) CPU seconds per process")
    .option("--cpus <N>", "maximum (and default) CPUs per sandbox, a quota (default: none, a fair share each)")
    .option("--disk <SIZE>", "maximum (and default) writable layer per sandbox")
    .option("--max-upload <SIZE>", "largest upload", "1G")
    .option("--max-body <SIZE>", "largest JSON request body", "16M")
    .option("--max-read <SIZE>", "largest file read_file returns", "64M")
    .option("--file-timeout <SECONDS>", "deadline of one file read or write in a sandbox", "60")
    .option("--public-url <URL>", "base URL put in runtime_url (default: the Host the client used)")
    .option("--warm-pool <N>", "rollouts (with --dataset): sandboxes prewarm may hold ready (default: no pool)")
    .option("--max-rollouts <N>", "rollouts (with --dataset): live rollouts at most (default: --max-sandboxes)")
    .option("--reward-mode <MODE>", "rollouts (with --dataset): where rewards are graded, fresh or in_place", "fresh")
    .option("--log-level <LEVEL>", "fatal, error, warn, info, debug, trace or silent", "info")
    .action(async (o: ServeOptions) => {
      let server: RunningServer | undefined;
      try {
        const { startServer } = await import("../server/server.js");
        server = await startServer(await serverOptions(o, getHome(), providerFactory));
      } catch (e) {
        if (server) await server.close().catch(() => undefined);
        fail(e);
      }
      announce(server!);
      const stop = handleSignals(server!);
      if (o.readyFile) writeReadyFile(o.readyFile, server!);
      if (o.exitWithStdin) stopWhenStdinEnds(stop);
    });
}

async function serverOptions(o: ServeOptions, home: string, providerFactory?: ProviderFactory) {
  const authToken = o.authToken ?? (process.env.MINISANDBOX_AUTH_TOKEN || undefined);
  const images = await imagePolicyFrom(o);
  if (images && !o.dataset)
    throw new InvalidInputError("--images and --image-template apply to the rows of --dataset: give --dataset FILE");
  const base = await baseFrom(o);
  if (base && !o.dataset)
    throw new InvalidInputError("--base applies to the instances of --dataset: give --dataset FILE");
  // Its flags checked before any work; sandboxes, rollouts and rewards of a row run on the same image.
  const rollouts = o.dataset ? rolloutOptions({ ...o, base }, o.dataset, images) : noRollouts(o);
  let provider: WorkspaceProvider | undefined;
  if (o.specs && !o.dataset)
    throw new InvalidInputError("--specs applies to the instances of --dataset: give --dataset FILE too");
  if (o.specs) (await import("../env/spec.js")).loadSpecOverrides(o.specs); // refused at start, not at a request
  if (o.dataset) {
    if (!providerFactory)
      throw new InvalidInputError(
        "--dataset: this build has no workspace provider wired in " +
          "(serve directories with --dir or POST /sandboxes {dir})",
      );
    const specs = { specsFile: o.specs, base };
    provider = await providerFactory({ home, dataset: o.dataset, reposDir: o.repos, ...specs, images });
  } else if (providerFactory) {
    provider = await providerFactory({ home, reposDir: o.repos });
  }
  const idle = positive(o.idleTimeout, "--idle-timeout", true);
  const { loadTokensFile } = await import("../server/auth.js");
  return {
    host: o.host,
    port: positive(o.port, "--port", true)!,
    authToken: o.auth ? authToken : undefined,
    tokens: o.tokensFile ? loadTokensFile(o.tokensFile) : undefined,
    secretPaths: o.tokensFile ? [o.tokensFile] : undefined,
    noAuth: !o.auth,
    rateLimit: positive(o.rateLimit, "--rate-limit", true),
    home,
    provider,
    maxSandboxes: integer(o.maxSandboxes, "--max-sandboxes"),
    defaultDir: o.dir,
    ...defaultSandboxExtras(o),
    allowDirs: o.allowDir,
    ttlSeconds: positive(o.ttl, "--ttl"),
    idleTimeoutSeconds: idle ? idle : undefined,
    limits: {
      memoryBytes: o.memory ? parseSize(o.memory) : undefined,
      pids: integer(o.pids, "--pids"),
      cpuSeconds: integer(o.cpu, "--cpu"),
      cpus: positive(o.cpus, "--cpus"),
      diskBytes: o.disk ? parseSize(o.disk) : undefined,
    },
    maxUploadBytes: parseSize(o.maxUpload),
    maxBodyBytes: o.maxBody ? parseSize(o.maxBody) : undefined,
    maxReadBytes: o.maxRead ? parseSize(o.maxRead) : undefined,
    fileTimeoutMs: positive(o.fileTimeout, "--file-timeout")! * 1000,
    publicUrl: o.publicUrl,
    peerAllow: o.peerAllow,
    logger: o.logLevel === "silent" ? false : { level: o.logLevel },
    rollouts,
  };
}

/** Without --dataset there is no rollout API: a warm pool asked for would hold nothing, so it is refused. */
function noRollouts(o: ServeOptions): undefined {
  if (o.warmPool !== undefined)
    throw new InvalidInputError("--warm-pool needs --dataset (the rollout API whose groups take from the pool)");
  return undefined;
}

function rolloutOptions(o: ServeOptions, dataset: string, images: ImagePolicy | undefined): ServerOptions["rollouts"] {
  const mode = o.rewardMode;
  if (mode !== "fresh" && mode !== "in_place")
    throw new InvalidInputError(`--reward-mode expects fresh or in_place, got ${mode}`);
  const max = integer(o.maxRollouts, "--max-rollouts");
  return {
    dataset,
    ...(o.specs ? { specsFile: o.specs } : {}),
    ...(o.base ? { base: o.base } : {}),
    build: true,
    ...(images ? { images } : {}),
    rewardMode: mode,
    ...(o.warmPool === undefined ? {} : { warmPool: { max: integer(o.warmPool, "--warm-pool")! } }),
    ...(max !== undefined ? { maxRollouts: max } : {}),
  };
}

/** `--python` and `--bind` shape the default sandbox (`--dir`) only: the operator's explicit choice. */
function defaultSandboxExtras(o: ServeOptions) {
  if ((o.python !== undefined || o.bind.length > 0) && !o.dir)
    throw new InvalidInputError("--python and --bind apply to the default sandbox: give --dir DIR too");
  return { defaultPython: o.python, defaultBinds: o.bind.map(parseBind) };
}

function announce(s: RunningServer): void {
  const root = s.defaultSandboxId ? ` (default sandbox ${s.defaultSandboxId} at the root)` : "";
  let auth = "; X-API-Key required";
  if (s.tokenFile) auth += ` (token in ${s.tokenFile}, readable by its owner only)`;
  if (!s.authenticated)
    auth = "; WARNING: no authentication (--no-auth): every local user and sandbox with network can use it";
  // Leftovers first: whoever waits for the "serving on" line has everything said before it.
  const { sandboxes, cgroups, snapshots } = s.reaped;
  if (sandboxes.length || cgroups.length || snapshots.length)
    process.stderr.write(
      `minisandbox: removed leftovers of an earlier server: ${sandboxes.length} sandbox(es), ` +
        `${cgroups.length} cgroup(s), ${snapshots.length} fork snapshot(s)\n`,
    );
  for (const w of s.warnings) process.stderr.write(`minisandbox: warning: ${w}\n`);
  process.stderr.write(`minisandbox: serving on ${s.url}${root}${auth}\n`);
}

function handleSignals(s: RunningServer): (why: string) => void {
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) {
      process.stderr.write(`minisandbox: ${signal} again, exiting now\n`);
      process.exit(1);
    }
    stopping = true;
    process.stderr.write(`minisandbox: ${signal}: closing ${s.registry.size} sandbox(es)\n`);
    s.close().then(
      () => process.exit(0),
      (e) => {
        process.stderr.write(`minisandbox: shutdown failed: ${(e as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  return stop;
}
