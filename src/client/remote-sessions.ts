/** Persistent bash sessions of a remote sandbox, over its SWE-ReX runtime routes (the in-process session's shape). */
import type { RunOptions, RunResult } from "../session/bash-session.js";
import { type InOf, swerex } from "../wire/index.js";
import type { HttpClient } from "./http.js";

/** The same options as an in-process session's `run`. */
export type RemoteRunOptions = RunOptions;

export interface InterruptOptions {
  timeoutMs?: number;
  retries?: number;
  expect?: string[];
}

const seconds = (ms: number | undefined): number | null => (ms === undefined ? null : ms / 1000);

const result = (o: swerex.BashObservation): RunResult => ({
  output: o.output,
  exitCode: o.exit_code,
  expectString: o.expect_string,
});

/** One named bash session of a remote sandbox. */
export class RemoteSession {
  constructor(
    private readonly sessions: RemoteSessions,
    readonly name: string,
  ) {}
  run(command: string, opts?: RemoteRunOptions): Promise<RunResult> {
    return this.sessions.run(this.name, command, opts);
  }
  interrupt(opts?: InterruptOptions): Promise<RunResult> {
    return this.sessions.interrupt(this.name, opts);
  }
  close(): Promise<void> {
    return this.sessions.close(this.name);
  }
}

export class RemoteSessions {
  constructor(private readonly rt: HttpClient) {}

  /** Start a persistent bash; `output` is what its startup printed. */
  async create(
    name = "default",
    opts: { startupSource?: string[]; startupTimeoutMs?: number } = {},
  ): Promise<{ session: RemoteSession; output: string }> {
    const body: InOf<typeof swerex.CreateBashSessionRequest> = {
      startup_source: opts.startupSource ?? [],
      session: name,
      startup_timeout: (opts.startupTimeoutMs ?? 10_000) / 1000,
    };
    const r = await this.rt.call("POST", "/create_session", swerex.CreateBashSessionResponse, body, {
      what: `create session ${name}`,
    });
    return { session: new RemoteSession(this, name), output: r.output };
  }

  get(name = "default"): RemoteSession {
    return new RemoteSession(this, name);
  }

  async run(name: string, command: string, opts: RemoteRunOptions = {}): Promise<RunResult> {
    const body: InOf<typeof swerex.BashAction> = {
      command,
      session: name,
      timeout: seconds(opts.timeoutMs),
      is_interactive_command: opts.interactive ?? false,
      is_interactive_quit: opts.interactiveQuit ?? false,
      check: opts.check ?? "raise",
      error_msg: opts.errorMsg ?? "",
      expect: opts.expect ?? [],
      action_type: "bash",
    };
    const what = `run in session ${name}`;
    return result(await this.rt.call("POST", "/run_in_session", swerex.BashObservation, body, { what }));
  }

  async interrupt(name = "default", opts: InterruptOptions = {}): Promise<RunResult> {
    const body: InOf<typeof swerex.BashInterruptAction> = {
      session: name,
      timeout: (opts.timeoutMs ?? 200) / 1000,
      n_retry: opts.retries ?? 3,
      expect: opts.expect ?? [],
      action_type: "bash_interrupt",
    };
    const what = `interrupt session ${name}`;
    return result(await this.rt.call("POST", "/run_in_session", swerex.BashObservation, body, { what }));
  }

  async close(name = "default"): Promise<void> {
    const body: InOf<typeof swerex.CloseBashSessionRequest> = { session: name, session_type: "bash" };
    await this.rt.call("POST", "/close_session", swerex.CloseBashSessionResponse, body, {
      what: `close session ${name}`,
    });
  }

  /** Close every session (the sandbox stays). */
  async closeAll(): Promise<void> {
    await this.rt.call("POST", "/close", swerex.EmptyResponse, undefined, { what: "close sessions" });
  }
}
