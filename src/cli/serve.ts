/** `minisandbox serve`: the HTTP server (native lifecycle API + SWE-ReX runtime). Parsing and printing only. */
import type { Command } from "commander";
import { startServer, type RunningServer } from "../server/server.js";
import type { ProviderFactory, WorkspaceProvider } from "../server/provider.js";
import { parseSize } from "../util/size.js";
import { InvalidInputError } from "../util/errors.js";
import { collect, fail } from "./common.js";

interface ServeOptions {
  host: string;
  port: string;
  authToken?: string;
  dataset?: string;
  maxSandboxes?: string;
  dir?: string;
  allowDir: string[];
  ttl?: string;
  idleTimeout: string;
  memory?: string;
  pids?: string;
  cpu?: string;
  disk?: string;
  maxUpload: string;
  publicUrl?: string;
  logLevel: string;
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
  program
    .command("serve")
    .description("serve sandboxes over HTTP: lifecycle API + SWE-ReX remote runtime per sandbox")
    .option("--host <HOST>", "interface to bind (a non-loopback one needs --auth-token)", "127.0.0.1")
    .option("--port <PORT>", "port (0: any free port)", "8000")
    .option("--auth-token <TOKEN>", "required X-API-Key on every route but /healthz (or $MINISANDBOX_AUTH_TOKEN)")
    .option("--dataset <FILE>", "SWE-bench / SWE-smith dataset: create sandboxes from instance ids, evaluate, diff")
    .option("--max-sandboxes <N>", "live sandboxes at most (then HTTP 429)")
    .option("--dir <DIR>", "also serve one default sandbox of DIR at the root (like swerex-remote)")
    .option(
      "--allow-dir <DIR>",
      "restrict POST /sandboxes {dir} to directories under DIR (repeatable)",
      collect,
      [] as string[],
    )
    .option("--ttl <SECONDS>", "default lifetime of a sandbox")
    .option("--idle-timeout <SECONDS>", "close sandboxes idle this long (0: never)", "3600")
    .option("--memory <SIZE>", "maximum (and default) memory per sandbox, e.g. 4G")
    .option("--pids <N>", "maximum (and default) processes per sandbox")
    .option("--cpu <SECONDS>", "maximum (and default) CPU seconds per process")
    .option("--disk <SIZE>", "maximum (and default) writable layer per sandbox")
    .option("--max-upload <SIZE>", "largest upload", "1G")
    .option("--public-url <URL>", "base URL put in runtime_url (default: the Host the client used)")
    .option("--log-level <LEVEL>", "fatal, error, warn, info, debug, trace or silent", "info")
    .action(async (o: ServeOptions) => {
      let server: RunningServer | undefined;
      try {
        const home = getHome();
        const authToken = o.authToken ?? process.env.MINISANDBOX_AUTH_TOKEN;
        let provider: WorkspaceProvider | undefined;
        if (o.dataset) {
          if (!providerFactory)
            throw new InvalidInputError(
              "--dataset: this build has no workspace provider wired in (serve directories with --dir or POST /sandboxes {dir})",
            );
          provider = await providerFactory({ home, dataset: o.dataset });
        } else if (providerFactory) {
          provider = await providerFactory({ home });
        }
        const port = positive(o.port, "--port", true)!;
        const idle = positive(o.idleTimeout, "--idle-timeout", true);
        server = await startServer({
          host: o.host,
          port,
          authToken,
          home,
          provider,
          maxSandboxes: positive(o.maxSandboxes, "--max-sandboxes"),
          defaultDir: o.dir,
          allowDirs: o.allowDir.length ? o.allowDir : undefined,
          ttlSeconds: positive(o.ttl, "--ttl"),
          idleTimeoutSeconds: idle ? idle : undefined,
          limits: {
            memoryBytes: o.memory ? parseSize(o.memory) : undefined,
            pids: positive(o.pids, "--pids"),
            cpuSeconds: positive(o.cpu, "--cpu"),
            diskBytes: o.disk ? parseSize(o.disk) : undefined,
          },
          maxUploadBytes: parseSize(o.maxUpload),
          publicUrl: o.publicUrl,
          logger: o.logLevel === "silent" ? false : { level: o.logLevel },
        });
      } catch (e) {
        if (server) await server.close().catch(() => undefined);
        fail(e);
      }
      const s = server!;
      process.stderr.write(
        `minisandbox: serving on ${s.url}${s.defaultSandboxId ? ` (default sandbox ${s.defaultSandboxId} at the root)` : ""}` +
          `${o.authToken || process.env.MINISANDBOX_AUTH_TOKEN ? "; X-API-Key required" : "; no auth token (loopback only)"}\n`,
      );
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
    });
}
