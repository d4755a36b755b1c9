/**
 * The SWE-ReX remote runtime, served for one sandbox under a prefix (`/sandboxes/<id>` or the root). Field names,
 * defaults, response shapes, messages and exception class paths follow swe-rex 1.4 (see
 * /work/shared/docs/swerex-protocol.md); failures other than validation errors are HTTP 511 `swerexception` bodies.
 */
import { createWriteStream, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { constants as osConstants, tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { MultipartFile, MultipartValue } from "@fastify/multipart";
import { SessionError } from "../session/errors.js";
import { MinisandboxError, NotFoundError } from "../util/errors.js";
import "./fastify-types.js";
import { HttpError } from "./errors.js";
import type { Entry, SandboxRegistry } from "./registry.js";
import type { ServerMetrics } from "./metrics.js";
import {
  parseAction,
  parseCloseSession,
  parseCommand,
  parseCreateSession,
  parseReadFile,
  parseUploadForm,
  parseWriteFile,
  RequestValidationError,
} from "./models.js";
import {
  decodeBackslashReplace,
  osErrorFrom,
  PyError,
  pyFloat,
  pyRepr,
  pyReadText,
  pyReprValue,
  ShlexError,
  shlexSplit,
} from "./pycompat.js";
import { extractZipChecked, type ZipLimits } from "./upload.js";

export interface RuntimeDeps {
  registry: SandboxRegistry;
  metrics: ServerMetrics;
  maxUploadBytes: number;
  zipLimits: ZipLimits;
  /** Seconds; SWE-ReX's default startup_timeout of 1 s is too tight on a loaded host, so this is the floor. */
  minStartupTimeoutS: number;
  /** Largest file read_file returns. */
  maxReadBytes: number;
}

/** Route config marker: errors of these routes are answered as 511 swerexceptions. */
export const RUNTIME = { kind: "runtime" } as const;

const SIGNUMS = osConstants.signals as Record<string, number>;

function timeoutMs(t: number | null | undefined): number | undefined {
  if (t === null || t === undefined) return undefined;
  return Math.max(0, Math.round(t * 1000));
}

/** SWE-ReX prints the float as given (`1.0`); our sessions print milliseconds / 1000 the JavaScript way. */
function withPyTimeout(e: unknown, t: number | null): unknown {
  if (e instanceof SessionError && e.swerexClass === "swerex.exceptions.CommandTimeoutError" && t !== null) {
    const msg = e.message.replace(/^timeout after \S+ seconds/, `timeout after ${pyFloat(t)} seconds`);
    return new SessionError(e.code, msg, e.swerexClass, e.extraInfo);
  }
  return e;
}

function fileError(e: unknown, path: string): unknown {
  if (e instanceof NotFoundError)
    return new PyError("builtins.FileNotFoundError", `[Errno 2] No such file or directory: ${pyRepr(path)}`);
  if (e instanceof MinisandboxError) return osErrorFrom(e.message, path) ?? e;
  return e;
}

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

/** A file's bytes, read inside the sandbox, refusing files over `cap` (the server must not hold gigabytes). */
export async function readFileCapped(e: Entry, path: string, cap: number): Promise<Buffer> {
  const r = await e.sandbox.exec(["/bin/cat", "--", path], { outputLimitBytes: cap });
  if (r.exitCode !== 0) {
    throw (
      osErrorFrom(r.stderr, path) ??
      new PyError("builtins.OSError", `reading ${pyRepr(path)} failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`)
    );
  }
  if (r.truncated) {
    throw new PyError(
      "builtins.OSError",
      `[Errno 27] File too large: ${pyRepr(path)} (over this server's read limit of ${cap} bytes; use /execute to inspect it)`,
    );
  }
  return r.stdoutBytes;
}

export function registerRuntimeRoutes(
  app: FastifyInstance,
  prefix: string,
  resolve: (req: FastifyRequest) => Entry,
  deps: RuntimeDeps,
): void {
  const { registry, metrics } = deps;
  const config = RUNTIME;

  /** Run a handler with the sandbox marked busy. */
  const withEntry =
    <T>(fn: (e: Entry, req: FastifyRequest, reply: FastifyReply) => Promise<T>) =>
    async (req: FastifyRequest, reply: FastifyReply): Promise<T> => {
      const e = resolve(req);
      registry.begin(e);
      try {
        return await fn(e, req, reply);
      } finally {
        registry.end(e);
      }
    };

  if (prefix !== "")
    app.get(`${prefix}/`, { config }, async (req) => {
      resolve(req);
      return { message: "hello world" };
    });

  app.get(`${prefix}/is_alive`, { config }, async (req) => {
    const e = resolve(req);
    e.lastActive = Date.now();
    return { is_alive: true, message: "" };
  });

  app.post(
    `${prefix}/create_session`,
    { config },
    withEntry(async (e, req) => {
      const r = parseCreateSession(req.body);
      if (e.sandbox.sessions.has(r.session)) {
        throw new PyError("swerex.exceptions.SessionExistsError", `session ${r.session} already exists`);
      }
      const startup = Math.max(r.startup_timeout, deps.minStartupTimeoutS);
      try {
        const { output } = await e.sandbox.sessions.create(r.session, {
          startupSource: r.startup_source,
          startupTimeoutMs: timeoutMs(startup),
        });
        metrics.sessionsCreated.inc();
        return { output, session_type: "bash" };
      } catch (err) {
        if (err instanceof SessionError && err.swerexClass === "swerex.exceptions.SessionExistsError") {
          throw new PyError(err.swerexClass, `session ${r.session} already exists`);
        }
        if (!(err instanceof MinisandboxError) && err instanceof Error && /timed out/.test(err.message)) {
          throw new PyError(
            "pexpect.exceptions.TIMEOUT",
            `Timeout exceeded: session ${pyRepr(r.session)} did not start within ${pyFloat(startup)} seconds`,
          );
        }
        throw err;
      }
    }),
  );

  app.post(
    `${prefix}/run_in_session`,
    { config },
    withEntry(async (e, req) => {
      const a = parseAction(req.body);
      const session = e.sandbox.sessions.get(a.session);
      const started = performance.now();
      if (a.action_type === "bash_interrupt") {
        const r = await session.interrupt({ timeoutMs: timeoutMs(a.timeout), retries: a.n_retry, expect: a.expect });
        metrics.commands.observe({ kind: "interrupt" }, (performance.now() - started) / 1000);
        return {
          output: r.output,
          exit_code: r.exitCode,
          failure_reason: "",
          expect_string: r.expectString,
          session_type: "bash",
        };
      }
      try {
        const r = await session.run(a.command, {
          timeoutMs: timeoutMs(a.timeout),
          check: a.check,
          errorMsg: a.error_msg,
          expect: a.expect,
          interactive: a.is_interactive_command,
          interactiveQuit: a.is_interactive_quit,
        });
        return {
          output: r.output,
          exit_code: r.exitCode,
          failure_reason: "",
          expect_string: r.expectString,
          session_type: "bash",
        };
      } catch (err) {
        throw withPyTimeout(err, a.timeout);
      } finally {
        metrics.commands.observe({ kind: "session" }, (performance.now() - started) / 1000);
      }
    }),
  );

  app.post(
    `${prefix}/close_session`,
    { config },
    withEntry(async (e, req) => {
      const r = parseCloseSession(req.body);
      await e.sandbox.sessions.close(r.session);
      return { session_type: "bash" };
    }),
  );

  app.post(
    `${prefix}/execute`,
    { config },
    withEntry(async (e, req) => {
      const c = parseCommand(req.body);
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
      if (c.env) {
        for (const k of Object.keys(c.env)) {
          if (k === "" || k.includes("="))
            throw new PyError("builtins.ValueError", "illegal environment variable name");
        }
        // `env` replaces the environment (subprocess semantics), it does not add to it.
        argv = ["/usr/bin/env", "-i", ...Object.entries(c.env).map(([k, v]) => `${k}=${v}`), ...argv];
      }
      const started = performance.now();
      const r = await e.sandbox.exec(argv, {
        timeoutMs: timeoutMs(c.timeout),
        cwd: c.cwd ?? undefined,
        mergeOutput: c.merge_output_streams,
      });
      metrics.commands.observe({ kind: "execute" }, (performance.now() - started) / 1000);
      if (r.timedOut)
        throw new PyError(
          "swerex.exceptions.CommandTimeoutError",
          `Timeout (${pyFloat(c.timeout!)}s) exceeded while running command`,
        );
      const spawnErr = spawnError(r, c.merge_output_streams, c.cwd);
      if (spawnErr) throw spawnErr;
      const exitCode = r.signal && SIGNUMS[r.signal] ? -SIGNUMS[r.signal]! : r.exitCode;
      const stdout = decodeBackslashReplace(r.stdoutBytes);
      const stderr = c.merge_output_streams ? "" : decodeBackslashReplace(r.stderrBytes);
      if (c.check && exitCode !== 0) {
        let msg = `Command ${pyReprValue(c.command)} failed with exit code ${exitCode}. Stdout:\n${pyRepr(stdout)}\nStderr:\n${pyRepr(stderr)}`;
        if (c.error_msg) msg = `${c.error_msg}: ${msg}`;
        throw new PyError("swerex.exceptions.NonZeroExitCodeError", msg);
      }
      return { stdout, stderr, exit_code: exitCode };
    }),
  );

  app.post(
    `${prefix}/read_file`,
    { config },
    withEntry(async (e, req) => {
      const r = parseReadFile(req.body);
      const bytes = await readFileCapped(e, r.path, deps.maxReadBytes);
      return { content: pyReadText(bytes, r.encoding, r.errors) };
    }),
  );

  app.post(
    `${prefix}/write_file`,
    { config },
    withEntry(async (e, req) => {
      const r = parseWriteFile(req.body);
      try {
        await e.sandbox.files.write(r.path, r.content);
      } catch (err) {
        throw fileError(err, r.path);
      }
      return {};
    }),
  );

  app.post(
    `${prefix}/upload`,
    { config },
    withEntry(async (e, req) => {
      if (!req.isMultipart()) {
        throw new RequestValidationError([
          { type: "missing", loc: ["body", "file"], msg: "Field required", input: null },
          { type: "missing", loc: ["body", "target_path"], msg: "Field required", input: null },
        ]);
      }
      const tmp = mkdtempSync(join(tmpdir(), "msb-upload-"));
      try {
        const fields: { target_path?: string; unzip?: string; hasFile: boolean } = { hasFile: false };
        const upload = join(tmp, "temp_file_transfer");
        for await (const part of req.parts({ limits: { fileSize: deps.maxUploadBytes, files: 1, fields: 16 } })) {
          if (part.type === "file") {
            const f = part as MultipartFile;
            if (f.fieldname !== "file" || fields.hasFile) {
              f.file.resume();
              continue;
            }
            await pipeline(f.file, createWriteStream(upload));
            if (f.file.truncated)
              throw new HttpError(
                413,
                `upload larger than this server's limit of ${deps.maxUploadBytes} bytes`,
                "upload_too_large",
              );
            fields.hasFile = true;
          } else {
            const v = part as MultipartValue<string>;
            if (v.fieldname === "target_path") fields.target_path = String(v.value);
            else if (v.fieldname === "unzip") fields.unzip = String(v.value);
          }
        }
        const form = parseUploadForm(fields);
        let source = upload;
        if (form.unzip) {
          source = join(tmp, "extracted");
          mkdirSync(source);
          await extractZipChecked(upload, source, deps.zipLimits);
        }
        try {
          await e.sandbox.files.upload(source, form.target_path);
        } catch (err) {
          throw fileError(err, form.target_path);
        }
        return {};
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }),
  );

  app.post(
    `${prefix}/close`,
    { config },
    withEntry(async (e) => {
      await e.sandbox.sessions.closeAll();
      return {};
    }),
  );
}
