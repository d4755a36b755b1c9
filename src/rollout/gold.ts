/**
 * Gold pre-check: a task is used for rollouts only if its gold patch resolves it (FULL) in a fresh sandbox of its
 * environment. Definite verdicts are kept under `<home>/rollout/gold/<env key>/<instance id>.json`, so each task is
 * checked once per environment; a stored validation verdict of the environment for the same instance counts too.
 * An infrastructure failure is no verdict: it is thrown and checked again next time.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readEnvRecord } from "../env/environments.js";
import { SandboxError, TaskInvalidError } from "../errors.js";
import type { EvaluateResult } from "../eval/reward-api.js";
import type { Instance } from "../tasks/types.js";
import type { CamelOf, rollout as wire } from "../wire/index.js";
import { classifyOutcome } from "./outcome.js";

/** A task's gold verdict (the wire contract's `GoldVerdict`, camelCase): also how it is stored. */
export type GoldVerdict = CamelOf<typeof wire.GoldVerdict>;

function verdictPath(home: string, envKey: string, instanceId: string): string {
  return join(home, "rollout", "gold", envKey, `${encodeURIComponent(instanceId)}.json`);
}

function storedVerdict(home: string, envKey: string, instanceId: string): GoldVerdict | undefined {
  try {
    return JSON.parse(readFileSync(verdictPath(home, envKey, instanceId), "utf8")) as GoldVerdict;
  } catch {
    const v = readEnvRecord(home, envKey)?.validation;
    if (v?.valid && v.instanceId === instanceId)
      return { instanceId, envKey, passed: true, checkedAt: v.checkedAt, source: "validation" };
    return undefined;
  }
}

function storeVerdict(home: string, v: GoldVerdict): void {
  const p = verdictPath(home, v.envKey, v.instanceId);
  mkdirSync(join(p, ".."), { recursive: true });
  writeFileSync(`${p}.tmp`, `${JSON.stringify(v, null, 2)}\n`);
  renameSync(`${p}.tmp`, p);
}

/** Gold checks of one home: stored verdicts, and one check at a time per task in this process. */
export class GoldChecks {
  private readonly inflight = new Map<string, Promise<GoldVerdict>>();

  constructor(
    private readonly home: string,
    private readonly grade: (instance: Instance) => Promise<EvaluateResult>,
  ) {}

  /** The task's verdict (checking it first if none is stored); throws TaskInvalidError when its gold fails. */
  async require(instance: Instance, envKey: string): Promise<GoldVerdict> {
    const v = await this.verdict(instance, envKey);
    if (!v.passed)
      throw new TaskInvalidError(`${instance.instance_id}: its gold patch does not resolve it (${v.problem})`);
    return v;
  }

  verdict(instance: Instance, envKey: string): Promise<GoldVerdict> {
    const id = instance.instance_id;
    const stored = storedVerdict(this.home, envKey, id);
    if (stored) return Promise.resolve(stored);
    const key = `${envKey}\0${id}`;
    let p = this.inflight.get(key);
    if (!p) {
      p = this.check(instance, envKey).finally(() => this.inflight.delete(key));
      this.inflight.set(key, p);
    }
    return p;
  }

  private async check(instance: Instance, envKey: string): Promise<GoldVerdict> {
    const id = instance.instance_id;
    const r = await this.grade(instance);
    const o = classifyOutcome(r, { rolloutId: "", groupId: "", instanceId: id, repetition: 0, mode: "fresh" });
    if (o.status === "infra_failure")
      throw new SandboxError(`gold pre-check of ${id} could not run: ${o.failure!.message}`);
    const problem = r.resolved
      ? undefined
      : (o.note ??
        `${r.status}: FAIL_TO_PASS ${o.failToPass?.passed ?? 0}/${o.failToPass?.total ?? 0}, ` +
          `PASS_TO_PASS ${o.passToPass?.passed ?? 0}/${o.passToPass?.total ?? 0}`);
    const v: GoldVerdict = {
      instanceId: id,
      envKey,
      passed: r.resolved,
      checkedAt: new Date().toISOString(),
      source: "gold-check",
      ...(problem ? { problem } : {}),
    };
    storeVerdict(this.home, v);
    return v;
  }
}
