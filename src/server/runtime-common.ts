/** Shared pieces of the SWE-ReX routes: the route marker, timeout conversion, Python-shaped file errors. */
import { MinisandboxError } from "../errors.js";
import { osErrorFrom, PyError, pyRepr } from "./pycompat.js";

/** Route config marker: errors of these routes are answered as 511 swerexceptions. */
export const RUNTIME = { kind: "runtime" } as const;

/** SWE-ReX timeouts are float seconds, null for none. */
export function secondsToMs(t: number | null | undefined): number | undefined {
  if (t === null || t === undefined) return undefined;
  return Math.max(0, Math.round(t * 1000));
}

/** A sandbox file operation's error as the OSError Python would raise for `path`. */
export function fileError(e: unknown, path: string): unknown {
  if (e instanceof MinisandboxError && e.code === "not_found")
    return new PyError(
      "builtins.FileNotFoundError",
      `[Errno 2] No such file or directory: ${pyRepr(path)}`,
      {},
      "not_found",
    );
  if (e instanceof MinisandboxError && !(e instanceof PyError)) return osErrorFrom(e.message, path) ?? e;
  return e;
}
