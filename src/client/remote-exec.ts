/** One-shot commands of a remote sandbox: the native `/exec` route, answered in the in-process `ExecResult` shape. */
import type { LimitHit } from "../sandbox/exec.js";
import { type InOf, native } from "../wire/index.js";
import type { HttpClient } from "./http.js";

export interface RemoteExecOptions {
  timeoutMs?: number;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  mergeOutput?: boolean;
  outputLimitBytes?: number;
}

/** `ExecResult` of the in-process API, minus the raw byte buffers. */
export interface RemoteExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  limit?: LimitHit;
  signal?: string;
  durationMs: number;
}

export function remoteExec(
  api: HttpClient,
  id: string,
  cmd: string | string[],
  o: RemoteExecOptions = {},
): Promise<RemoteExecResult> {
  return remoteExecAt(api, `/sandboxes/${id}/exec`, cmd, o);
}

/** The same against any route speaking `ExecRequest` / `ExecResponse` (a rollout's `/exec` too). */
export async function remoteExecAt(
  api: HttpClient,
  path: string,
  cmd: string | string[],
  o: RemoteExecOptions = {},
): Promise<RemoteExecResult> {
  const body: InOf<typeof native.ExecRequest> = {
    command: cmd,
    timeout_ms: o.timeoutMs,
    cwd: o.cwd,
    env: o.env,
    stdin: o.stdin,
    merge_output: o.mergeOutput,
    output_limit_bytes: o.outputLimitBytes,
  };
  const r = native.ExecResponse.toCamel(await api.call("POST", path, native.ExecResponse, body));
  const { limit, signal, ...rest } = r;
  return { ...rest, ...(limit ? { limit } : {}), ...(signal ? { signal } : {}) };
}
