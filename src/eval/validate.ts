/**
 * Environment validation: an environment is only trustworthy for an instance if, in a fresh sandbox, every
 * FAIL_TO_PASS and PASS_TO_PASS test passes with the gold patch, and the FAIL_TO_PASS tests fail without it
 * (eval.sh on the untouched base). The verdict is stored with the environment (env record `validation`), and
 * `evaluate` warns when it grades an instance on an environment that failed. A row on an image (the image policy,
 * as prepare and evaluate read it) is checked on that image the same way; its verdict is reported, not stored (the
 * record is the built environment's).
 */
import { join } from "node:path";
import type { Instance } from "../tasks/types.js";
import type { Limits } from "../sandbox/limits.js";
import type { LayerKey } from "../env/types.js";
import { rowImageRef, type InstanceEnv } from "../env/workspace.js";
import {
  envFor,
  isBuilt,
  nodeCacheFor,
  readEnvRecord,
  writeEnvRecord,
  type SpecSource,
  type ValidationVerdict,
} from "../env/environments.js";
import { findStoredImage } from "../env/images/index.js";
import type { ImagePolicy } from "../env/instance-image.js";
import { Progress, pool } from "../util/progress.js";
import { parseTestList, testFailed, testPassed, type ResolutionStatus } from "./grading.js";
import type { StatusMap } from "./types.js";
import { runInstanceEvaluation, type EvalFailure, type InstanceEvalResult } from "./runner/instance.js";
import type { PhaseTimings } from "./runner/timings.js";
import { evalPipSettings } from "./runner/sandbox.js";

export interface ValidateOptions extends SpecSource {
  home: string;
  reposDir?: string;
  /** Test runs at once (each instance needs two; default 2). */
  workers?: number;
  /** Per run (default 1800 s). */
  timeoutMs?: number;
  limits?: Limits;
  /** Store each environment's verdict in its record (default true). */
  store?: boolean;
  /** Write both runs' harness files under `<logDir>/<instance_id>/{gold,base}/`. */
  logDir?: string;
  /** Progress bar on stderr (default true). */
  progress?: boolean;
  /** Which rows run on an image of the store (default `auto`: a row's own image_name / docker_image if present). */
  images?: ImagePolicy;
  onResult?: (result: InstanceValidation) => void;
}

export interface ValidationRun {
  status: InstanceEvalResult["status"];
  resolution: ResolutionStatus | null;
  error?: EvalFailure;
  timings: PhaseTimings;
}

export interface InstanceValidation {
  instanceId: string;
  /** The built environment's key, or the image's root filesystem's. */
  key: LayerKey;
  /** The image it was checked on, when its row runs on one. */
  image?: string;
  /** false also when the instance could not be checked (see skipped). */
  valid: boolean;
  /** Why the instance was not checked (its environment is not built, or has no spec). */
  skipped?: string;
  /** Which tests, which direction: "FAIL_TO_PASS test X passes without the fix", ... */
  problems: string[];
  gold?: ValidationRun;
  base?: ValidationRun;
}

export interface ValidationReport {
  results: InstanceValidation[];
  /** Checked and found invalid (skipped instances are not in here). */
  invalid: InstanceValidation[];
  skipped: InstanceValidation[];
  /** What was stored per environment. */
  verdicts: Record<LayerKey, ValidationVerdict>;
}

function describeStatus(name: string, sm: StatusMap): string {
  if (!Object.hasOwn(sm, name)) return "fails (not in the test log)";
  const s = sm[name]!;
  if (s === "FAILED") return "fails";
  if (s === "ERROR") return "fails (ERROR)";
  return `does not pass (${s})`;
}

/** Problems of the gold run: any listed test that does not pass. */
export function goldProblems(instance: Instance, run: InstanceEvalResult): string[] {
  if (run.error) return [`with the gold patch: ${run.error.kind}`];
  const log = run.grade?.log;
  if (!log?.found) return [`no test results with the gold patch (${log && !log.found ? log.reason : "no log"})`];
  const sm = log.statusMap;
  const out: string[] = [];
  for (const field of ["FAIL_TO_PASS", "PASS_TO_PASS"] as const) {
    for (const name of parseTestList(instance[field], field)) {
      if (!testPassed(name, sm)) out.push(`${field} test ${name} ${describeStatus(name, sm)} with the gold patch`);
    }
  }
  return out;
}

/** Problems of the no-patch run: any FAIL_TO_PASS test that does not fail. */
export function baseProblems(instance: Instance, run: InstanceEvalResult): string[] {
  if (run.error) return [`without the fix: ${run.error.kind}`];
  const log = run.grade?.log;
  if (!log?.found) return [`no test results without the fix (${log && !log.found ? log.reason : "no log"})`];
  const sm = log.statusMap;
  const out: string[] = [];
  for (const name of parseTestList(instance.FAIL_TO_PASS, "FAIL_TO_PASS")) {
    if (testFailed(name, sm)) continue;
    out.push(
      testPassed(name, sm)
        ? `FAIL_TO_PASS test ${name} passes without the fix`
        : `FAIL_TO_PASS test ${name} does not fail without the fix (${sm[name]})`,
    );
  }
  return out;
}

const brief = (r: InstanceEvalResult): ValidationRun => ({
  status: r.status,
  resolution: r.resolution,
  ...(r.error ? { error: r.error } : {}),
  timings: r.timings,
});

/** An instance whose environment is built (or whose image is in the store), with that environment. */
interface Item extends InstanceEnv {
  instance: Instance;
  image?: string;
}

/** Validate instances on their built environments; store one verdict per environment. */
export async function validateInstances(
  instances: readonly Instance[],
  opts: ValidateOptions,
): Promise<ValidationReport> {
  const results = new Map<string, InstanceValidation>();
  const items = await checkable(instances, opts, results);
  await runGoldAndBase(items, opts, results);
  const verdicts = storeVerdicts(items, results, opts);
  const ordered = instances.map((i) => results.get(i.instance_id)!).filter(Boolean);
  return {
    results: ordered,
    invalid: ordered.filter((r) => !r.valid && !r.skipped),
    skipped: ordered.filter((r) => r.skipped !== undefined),
    verdicts,
  };
}

/** The instances that can be checked; the others get a `skipped` result (no spec, not built, image not pulled). */
async function checkable(
  instances: readonly Instance[],
  opts: ValidateOptions,
  results: Map<string, InstanceValidation>,
): Promise<Item[]> {
  const items: Item[] = [];
  for (const instance of instances) {
    const instanceId = instance.instance_id;
    const skip = (key: string, skipped: string) =>
      results.set(instanceId, { instanceId, key, valid: false, skipped, problems: [] });
    let env: InstanceEnv;
    let image: string | undefined;
    try {
      env = envFor(instance, opts);
      image = await rowImageRef(opts.home, instance, opts.images ?? { kind: "auto" });
    } catch (e) {
      skip("", (e as Error).message);
      continue;
    }
    if (image !== undefined) {
      const record = await findStoredImage(nodeCacheFor(opts.home).store, image);
      if (record) items.push({ instance, spec: env.spec, key: record.rootfs, image });
      else skip("", `image ${image} is not in the store (minisandbox images pull ${image})`);
    } else if (await isBuilt(opts.home, env.key)) items.push({ instance, ...env });
    else skip(env.key, `environment ${env.key.slice(0, 12)} is not built`);
  }
  return items;
}

/** Two runs per instance (gold patch, no patch), `workers` at a time; each instance's verdict once both ended. */
async function runGoldAndBase(
  items: Item[],
  opts: ValidateOptions,
  results: Map<string, InstanceValidation>,
): Promise<void> {
  await Promise.all([...new Set(items.map((i) => i.spec.python))].map((python) => evalPipSettings(opts.home, python)));
  type Mode = "gold" | "base";
  const tasks = items.flatMap((item) => (["gold", "base"] as Mode[]).map((mode) => ({ item, mode })));
  const runs = new Map<string, InstanceEvalResult>();
  const progress = (opts.progress ?? true) && tasks.length > 0 ? new Progress(tasks.length, "validate") : undefined;
  const finished = new Map<string, number>();
  await pool(tasks, opts.workers ?? 2, async ({ item, mode }) => {
    const id = item.instance.instance_id;
    const gold = item.instance.patch ?? "";
    const r = mode === "gold" && gold.trim() === "" ? null : await runOnce(item, mode === "gold" ? gold : null, opts);
    if (r) runs.set(`${id}\0${mode}`, r);
    progress?.tick(r?.error ? "error" : "done", `${id} (${mode === "gold" ? "gold patch" : "no patch"})`);
    finished.set(id, (finished.get(id) ?? 0) + 1);
    if (finished.get(id) === 2) {
      const v = verdictFor(item, runs.get(`${id}\0gold`), runs.get(`${id}\0base`));
      results.set(id, v);
      opts.onResult?.(v);
    }
  });
  progress?.finish();
}

function runOnce(item: Item, patch: string | null, opts: ValidateOptions): Promise<InstanceEvalResult> {
  const mode = patch === null ? "base" : "gold";
  return runInstanceEvaluation({
    home: opts.home,
    instance: item.instance,
    env: { spec: item.spec, key: item.key },
    ...(item.image ? { image: item.image } : {}),
    patch,
    model: mode,
    timeoutMs: opts.timeoutMs,
    specsFile: opts.specsFile,
    base: opts.base,
    reposDir: opts.reposDir,
    limits: opts.limits,
    checkValidation: false,
    ...(opts.logDir ? { logDir: join(opts.logDir, item.instance.instance_id, mode) } : {}),
  });
}

/** One verdict per environment (several SWE-smith tasks can share one), stored in its record unless `store: false`. */
function storeVerdicts(
  items: Item[],
  results: Map<string, InstanceValidation>,
  opts: ValidateOptions,
): Record<LayerKey, ValidationVerdict> {
  const verdicts: Record<LayerKey, ValidationVerdict> = {};
  const byKey = new Map<LayerKey, InstanceValidation[]>();
  for (const item of items.filter((i) => i.image === undefined)) {
    const v = results.get(item.instance.instance_id)!;
    byKey.set(item.key, [...(byKey.get(item.key) ?? []), v]);
  }
  const checkedAt = new Date().toISOString();
  for (const [key, vs] of byKey) {
    const shared = vs.length > 1;
    const invalid = vs.filter((v) => !v.valid);
    const verdict: ValidationVerdict = {
      valid: invalid.length === 0,
      checkedAt,
      instanceId: shared ? (invalid[0] ?? vs[0]!).instanceId : vs[0]!.instanceId,
      problems: vs.flatMap((v) => v.problems.map((p) => (shared ? `${v.instanceId}: ${p}` : p))),
    };
    verdicts[key] = verdict;
    if (opts.store ?? true) {
      const spec = items.find((i) => i.key === key)!.spec;
      writeEnvRecord(opts.home, {
        ...(readEnvRecord(opts.home, key) ?? { key, spec }),
        key,
        spec,
        validation: verdict,
      });
    }
  }
  return verdicts;
}

function verdictFor(
  item: { instance: Instance; key: LayerKey; image?: string },
  gold: InstanceEvalResult | undefined,
  base: InstanceEvalResult | undefined,
): InstanceValidation {
  const { instance } = item;
  const problems: string[] = [];
  if (parseTestList(instance.FAIL_TO_PASS, "FAIL_TO_PASS").length === 0) problems.push("FAIL_TO_PASS lists no tests");
  if (!gold) problems.push("the instance has no gold patch");
  else problems.push(...goldProblems(instance, gold));
  if (base) problems.push(...baseProblems(instance, base));
  return {
    instanceId: instance.instance_id,
    key: item.key,
    ...(item.image ? { image: item.image } : {}),
    valid: problems.length === 0,
    problems,
    ...(gold ? { gold: brief(gold) } : {}),
    ...(base ? { base: brief(base) } : {}),
  };
}

/** Text lines for people: one per invalid or skipped instance, with its reasons. */
export function renderValidation(report: ValidationReport): string {
  const lines: string[] = [];
  const ok = report.results.filter((r) => r.valid).length;
  lines.push(`validation: ${ok} valid, ${report.invalid.length} invalid, ${report.skipped.length} not checked`);
  for (const r of report.invalid) {
    lines.push(`  ${r.instanceId} (${r.image ? `image ${r.image}` : `environment ${r.key.slice(0, 12)}`}): INVALID`);
    for (const p of r.problems) lines.push(`    - ${p}`);
  }
  for (const r of report.skipped) lines.push(`  ${r.instanceId}: not checked: ${r.skipped}`);
  return `${lines.join("\n")}\n`;
}

/** What `prepare --validate --json` reports: instance ids by verdict, with each problem, and every result. */
export function validationSummary(report: ValidationReport): {
  valid: string[];
  invalid: { instanceId: string; environment: LayerKey; problems: string[] }[];
  skipped: { instanceId: string; reason: string }[];
  results: InstanceValidation[];
} {
  return {
    valid: report.results.filter((r) => r.valid).map((r) => r.instanceId),
    invalid: report.invalid.map((r) => ({ instanceId: r.instanceId, environment: r.key, problems: r.problems })),
    skipped: report.skipped.map((r) => ({ instanceId: r.instanceId, reason: r.skipped ?? "" })),
    results: report.results,
  };
}
