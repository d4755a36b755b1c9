/** SWE-ReX session routes: create_session, run_in_session (commands and interrupts), close_session, close. */
import type { FastifyInstance } from "fastify";
import { SessionError } from "../session/errors.js";
import { MinisandboxError } from "../errors.js";
import { swerex } from "../wire/index.js";
import { PyError, pyFloat, pyRepr } from "./pycompat.js";
import { RUNTIME, secondsToMs } from "./runtime-common.js";
import { onEntry, type EntryResolver, type RouteContext } from "./route-context.js";
import type { Entry } from "./registry.js";

/** SWE-ReX prints the float as given (`1.0`); sessions print milliseconds / 1000 the JavaScript way. */
function withPyTimeout(e: unknown, t: number | null): unknown {
  if (e instanceof SessionError && e.code === "timeout" && t !== null) {
    const msg = e.message.replace(/^timeout after \S+ seconds/, `timeout after ${pyFloat(t)} seconds`);
    return new SessionError(e.code, msg, e.swerexClass, e.extraInfo);
  }
  return e;
}

async function createSession(ctx: RouteContext, e: Entry, body: unknown) {
  const r = swerex.CreateSessionRequest.parse(body);
  const exists = () => new PyError("swerex.exceptions.SessionExistsError", `session ${r.session} already exists`);
  if (e.sandbox.sessions.has(r.session)) throw exists();
  const startup = Math.max(r.startup_timeout, ctx.limits.minStartupTimeoutS);
  const started = performance.now();
  try {
    const { output } = await e.sandbox.sessions.create(r.session, {
      startupSource: r.startup_source,
      startupTimeoutMs: secondsToMs(startup),
    });
    ctx.metrics.sessionsCreated.inc();
    return { output, session_type: "bash" as const };
  } catch (err) {
    if (err instanceof SessionError && err.code === "session_exists") throw exists();
    // The session reports its start-up deadline as an untyped error: the time taken says what happened.
    if (!(err instanceof MinisandboxError) && performance.now() - started >= startup * 1000) {
      throw new PyError(
        "pexpect.exceptions.TIMEOUT",
        `Timeout exceeded: session ${pyRepr(r.session)} did not start within ${pyFloat(startup)} seconds`,
      );
    }
    throw err;
  }
}

const observation = (r: { output: string; exitCode: number | null; expectString: string }): swerex.BashObservation => ({
  output: r.output,
  exit_code: r.exitCode,
  failure_reason: "",
  expect_string: r.expectString,
  session_type: "bash" as const,
});

async function runInSession(ctx: RouteContext, e: Entry, body: unknown) {
  const a = swerex.Action.parse(body);
  const session = e.sandbox.sessions.get(a.session);
  const started = performance.now();
  const kind = a.action_type === "bash_interrupt" ? "interrupt" : "session";
  try {
    if (a.action_type === "bash_interrupt")
      return observation(
        await session.interrupt({ timeoutMs: secondsToMs(a.timeout), retries: a.n_retry, expect: a.expect }),
      );
    return observation(await runCommand(session, a));
  } finally {
    ctx.metrics.commands.observe({ kind }, (performance.now() - started) / 1000);
  }
}

async function runCommand(session: ReturnType<Entry["sandbox"]["sessions"]["get"]>, a: swerex.BashAction) {
  try {
    return await session.run(a.command, {
      timeoutMs: secondsToMs(a.timeout),
      check: a.check,
      errorMsg: a.error_msg,
      expect: a.expect,
      interactive: a.is_interactive_command,
      interactiveQuit: a.is_interactive_quit,
    });
  } catch (err) {
    throw withPyTimeout(err, a.timeout);
  }
}

export function registerSessionRoutes(
  app: FastifyInstance,
  prefix: string,
  resolve: EntryResolver,
  ctx: RouteContext,
): void {
  const config = RUNTIME;
  app.post(
    `${prefix}/create_session`,
    { config },
    onEntry(ctx, resolve, (e, req) => createSession(ctx, e, req.body)),
  );
  app.post(
    `${prefix}/run_in_session`,
    { config },
    onEntry(ctx, resolve, (e, req) => runInSession(ctx, e, req.body)),
  );
  app.post(
    `${prefix}/close_session`,
    { config },
    onEntry(ctx, resolve, async (e, req) => {
      await e.sandbox.sessions.close(swerex.CloseSessionRequest.parse(req.body).session);
      return { session_type: "bash" as const };
    }),
  );
  app.post(
    `${prefix}/close`,
    { config },
    onEntry(ctx, resolve, async (e) => {
      await e.sandbox.sessions.closeAll();
      if (e.deleteOnClose) await ctx.registry.delete(e.id, "delete").catch(() => undefined);
      return {};
    }),
  );
}
