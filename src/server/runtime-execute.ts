/** SWE-ReX `/execute`: one fresh process, with Python's subprocess semantics for argv, env, cwd and errors. */
import { constants as osConstants } from "node:os";
import type { FastifyInstance } from "fastify";
import { swerex } from "../wire/index.js";
import {
  decodeBackslashReplace,
  osErrorFrom,
  PyError,
  pyFloat,
  pyRepr,
  pyReprValue,
  ShlexError,
  shlexSplit,
} from "./pycompat.js";
import { RUNTIME, secondsToMs } from "./runtime-common.js";
import { clientGone, onEntry, type EntryResolver, type RouteContext } from "./route-context.js";
import type { Entry } from "./registry.js";

const SIGNUMS = osConstants.signals as Record<string, number>;

/** Errors `/usr/bin/env` (which starts every command inside) reports, as Python's subprocess would raise them. */
function spawnError(
  r: { exitCode: number; stdout: string; stderr: string },
  merged: boolean,
  cwd: string | null,
): PyError | undefined {
  if (r.exitCode !== 125 && r.exitCode !== 126 && r.exitCode !== 127) return undefined;
  const text = merged ? r.stdout : r.stderr;
  if ((merged ? "" : r.stdout) !== "") return undefined;
  let m = /^(?:(?:\/usr\/bin\/)?env|minisandbox): cannot change directory to ['‘](.*)['’]: (.+)\n$/.exec(text);
  if (m && cwd !== null) return osErrorFrom(m[2]!, cwd);
  m = /^(?:(?:\/usr\/bin\/)?env|minisandbox): ['‘](.*)['’]: (No such file or directory|Permission denied)\n$/.exec(
    text,
  );
  if (m) return osErrorFrom(m[2]!, m[1]!);
  // The fallback's merging wrapper (sh) reports a program it cannot start.
  m = /^sh: \d+: exec: (.*): (not found|Permission denied)\n$/.exec(text);
  if (m && merged) return osErrorFrom(m[2] === "not found" ? "No such file or directory" : m[2]!, m[1]!);
  return undefined;
}

/** argv as subprocess would build it: `shell` runs sh -c, a string is shlex-split, `env` replaces the environment. */
function argvFor(c: swerex.Command): string[] {
  let argv: string[];
  if (c.shell) argv = ["/bin/sh", "-c", ...(typeof c.command === "string" ? [c.command] : c.command)];
  else if (typeof c.command === "string") {
    try {
      argv = shlexSplit(c.command);
    } catch (err) {
      if (err instanceof ShlexError) throw new PyError("builtins.ValueError", err.message);
      throw err;
    }
  } else argv = c.command;
  if (argv.length === 0) throw new PyError("builtins.IndexError", "list index out of range");
  if (!c.env) return argv;
  for (const k of Object.keys(c.env))
    if (k === "" || k.includes("=")) throw new PyError("builtins.ValueError", "illegal environment variable name");
  return ["/usr/bin/env", "-i", ...Object.entries(c.env).map(([k, v]) => `${k}=${v}`), ...argv];
}

async function execute(ctx: RouteContext, e: Entry, body: unknown, gone: AbortSignal): Promise<swerex.CommandResponse> {
  const c = swerex.Command.parse(body);
  const argv = argvFor(c);
  const started = performance.now();
  const r = await e.sandbox.exec(argv, {
    timeoutMs: secondsToMs(c.timeout),
    cwd: c.cwd ?? undefined,
    mergeOutput: c.merge_output_streams,
    signal: gone,
  });
  ctx.metrics.commands.observe({ kind: "execute" }, (performance.now() - started) / 1000);
  if (r.timedOut)
    throw new PyError(
      "swerex.exceptions.CommandTimeoutError",
      `Timeout (${pyFloat(c.timeout!)}s) exceeded while running command`,
      {},
      "timeout",
    );
  const spawnErr = spawnError(r, c.merge_output_streams, c.cwd);
  if (spawnErr) throw spawnErr;
  const exitCode = r.signal && SIGNUMS[r.signal] ? -SIGNUMS[r.signal]! : r.exitCode;
  const stdout = decodeBackslashReplace(r.stdoutBytes);
  const stderr = c.merge_output_streams ? "" : decodeBackslashReplace(r.stderrBytes);
  if (c.check && exitCode !== 0) {
    const msg =
      `Command ${pyReprValue(c.command)} failed with exit code ${exitCode}. ` +
      `Stdout:\n${pyRepr(stdout)}\nStderr:\n${pyRepr(stderr)}`;
    throw new PyError("swerex.exceptions.NonZeroExitCodeError", c.error_msg ? `${c.error_msg}: ${msg}` : msg);
  }
  return { stdout, stderr, exit_code: exitCode };
}

export function registerExecuteRoute(app: FastifyInstance, prefix: string, resolve: EntryResolver, ctx: RouteContext) {
  app.post(
    `${prefix}/execute`,
    { config: RUNTIME },
    onEntry(ctx, resolve, (e, req, reply) => execute(ctx, e, req.body, clientGone(reply))),
  );
}
