/**
 * One job of an evaluation run (an instance and its prediction), run here: the instance's environment made present
 * (fetched from peers, else built), then the harness's `run_instance` with its files in `logDir`. `minisandbox
 * evaluate` runs its jobs through it, and so does a server evaluating one job of a run planned elsewhere (a fleet):
 * both write the same files for the same outcome.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { errMessage, LayerUnavailableError, LimitError, MinisandboxError, NotFoundError } from "../errors.js";
import { envFor } from "../env/environments.js";
import { makePresent, type MadePresent, type RowPresence } from "../env/present.js";
import type { HttpSource } from "../env/store/index.js";
import type { InstanceEnv } from "../env/workspace.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import { appendInstanceLog, LOG_FILES } from "./report.js";
import {
  clearInstanceOutputs,
  INTEGRITY_FILE,
  runInstanceEvaluation,
  TIMINGS_FILE,
  type EvalErrorKind,
  type InstanceEvalInput,
  type InstanceEvalResult,
} from "./runner/instance.js";
import type { PhaseTimings } from "./runner/timings.js";

/** One job: an instance evaluation (`InstanceEvalInput`, the run's settings in it unchanged) whose files go to
 * `logDir`, on an environment made present first. */
export interface EvalJobInput extends Omit<InstanceEvalInput, "logDir" | "sandbox" | "inPlace"> {
  patch: string;
  model: string;
  /** Where the harness's files go. */
  logDir: string;
  /** Build the environment when neither this node nor a source has it (default false: "Environment Missing"). */
  build?: boolean;
  /** Peers to fetch the environment's layer from when this node lacks it. */
  sources?: readonly HttpSource[];
}

export interface EvalJobResult {
  instanceId: string;
  status: InstanceEvalResult["status"];
  resolution: InstanceEvalResult["resolution"];
  error?: InstanceEvalResult["error"];
  timings?: PhaseTimings;
  warnings: string[];
  envKey?: string;
  /** How the environment got here: it was already here, fetched from a peer, built now, or (an image) pulled now. */
  layer?: RowPresence;
}

/** Failures of the node rather than the instance: the job should run again (here later, or elsewhere). */
export function isRetryable(e: unknown): boolean {
  return (
    e instanceof LimitError ||
    e instanceof LayerUnavailableError ||
    (e instanceof MinisandboxError && e.code === "unavailable")
  );
}

/** A job that ends before its sandbox: outputs cleared, run_instance.log holding the one error line. */
export async function writeErrorLog(dir: string, message: string): Promise<void> {
  await clearInstanceOutputs(dir);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, LOG_FILES.instanceLog), "");
  await appendInstanceLog(dir, "ERROR", message);
}

async function failed(input: EvalJobInput, kind: EvalErrorKind, message: string, envKey?: string) {
  await writeErrorLog(input.logDir, message);
  const result: EvalJobResult = {
    instanceId: input.instance.instance_id,
    status: "error",
    resolution: null,
    error: { kind, message },
    warnings: [],
    ...(envKey ? { envKey } : {}),
  };
  return result;
}

/**
 * Run one job. Per-instance failures are results (as the harness records them); a layer no source could supply
 * throws `LayerUnavailableError`, since running the job elsewhere may well succeed.
 */
export async function runEvalJob(input: EvalJobInput): Promise<EvalJobResult> {
  let env = input.env;
  if (!env) {
    try {
      env = envFor(input.instance, input);
    } catch (e) {
      return failed(input, "Environment Missing", errMessage(e));
    }
  }
  const present = await presentEnvironment(input, env);
  if ("instanceId" in present) return present;
  const { layer } = present;
  await clearInstanceOutputs(input.logDir);
  let notHere: unknown;
  const open = input.openSandbox;
  const openSandbox = open
    ? async (e: InstanceEnv): Promise<Sandbox> => {
        try {
          return await open(e);
        } catch (err) {
          if (isRetryable(err)) notHere = err;
          throw err;
        }
      }
    : undefined;
  const r = await runInstanceEvaluation({ ...input, env, ...(openSandbox ? { openSandbox } : {}) });
  if (notHere !== undefined) throw notHere;
  return {
    instanceId: r.instanceId,
    status: r.status,
    resolution: r.resolution,
    ...(r.error ? { error: r.error } : {}),
    timings: r.timings,
    warnings: r.warnings,
    envKey: env.key,
    ...(layer ? { layer } : {}),
  };
}

/**
 * The job's environment made present (`makePresent`: its image pulled, or its layer fetched or built, when the job
 * may build). A failure to make it is the job's result; nothing that has it and no leave to make it is not: the
 * evaluation records "Environment Missing" itself, with its log and timings.
 */
async function presentEnvironment(
  input: EvalJobInput,
  env: InstanceEnv,
): Promise<{ layer?: RowPresence } | EvalJobResult> {
  const target = input.image !== undefined ? { image: input.image, history: env.spec.history } : { env };
  let made: MadePresent;
  try {
    made = await makePresent(target, { ...input, build: input.build ?? false });
  } catch (e) {
    if (e instanceof NotFoundError) return {};
    throw e; // No source had it: another node may (run the job there).
  }
  if (made.status !== "failed") return { layer: made.status };
  const message = made.failed === "build" ? `environment build failed: ${made.error}` : made.error;
  return failed(input, "Environment Build Failed", message, env.key);
}

/** The files a job may leave, by name (the harness's five, `timings.json` and `integrity.json`). */
export const JOB_FILES = [...Object.values(LOG_FILES), TIMINGS_FILE, INTEGRITY_FILE] as const;

/** Run one job in a scratch directory under `scratchRoot` and return its files' bytes (the directory is removed). */
export async function runEvalJobToFiles(
  input: Omit<EvalJobInput, "logDir">,
  scratchRoot: string,
): Promise<{ result: EvalJobResult; files: Record<string, Buffer> }> {
  await mkdir(scratchRoot, { recursive: true });
  const dir = await mkdtemp(join(scratchRoot, "job-"));
  try {
    const result = await runEvalJob({ ...input, logDir: dir });
    const files: Record<string, Buffer> = {};
    for (const name of JOB_FILES) {
      const bytes = await readFile(join(dir, name)).catch(() => undefined);
      if (bytes) files[name] = bytes;
    }
    return { result, files };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
