/**
 * Rollouts on a minisandbox server (`/rollouts/...`) with the shapes of the in-process engine (src/rollout): groups of
 * N rollouts of one task, commands and files per rollout, rewards (`status: "scored" | "infra_failure"`), forks,
 * prewarm and gold pre-checks. A command on a lost rollout throws `SandboxLostError`, as in-process.
 */
import { InvalidInputError } from "../errors.js";
import { type CamelOf, rollout as wire, swerex } from "../wire/index.js";
import { readTokenFile } from "../wire/token-file.js";
import { HttpClient } from "./http.js";
import type { ConnectOptions } from "./remote-sandbox.js";
import { type RemoteExecOptions, type RemoteExecResult, remoteExecAt } from "./remote-exec.js";

/** The rollout API's answers in camelCase: the wire contract's models (src/wire/rollout.ts), as in-process. */
export type RolloutOutcome = CamelOf<typeof wire.RolloutOutcome>;
export type RolloutInfo = CamelOf<typeof wire.RolloutInfo>;
export type GroupInfo = CamelOf<typeof wire.GroupInfo>;
export type PrewarmReport = CamelOf<typeof wire.PrewarmReport>;
export type GoldVerdict = CamelOf<typeof wire.GoldVerdict>;

/** How a remote reward is graded: where, within how long, and how (a remote reward is "binary" or "fraction"). */
export interface RemoteRewardOptions {
  mode?: RolloutOutcome["mode"];
  timeoutMs?: number;
  reward?: NonNullable<wire.RewardIn["reward"]>;
}

export interface StartGroupOptions {
  instanceId: string;
  n: number;
  goldCheck?: boolean;
  /** The server closes each rollout after this long. */
  ttlMs?: number;
}

export class RolloutClient {
  private constructor(readonly api: HttpClient) {}

  /** The rollout API of a server (token: `apiKey`, else the home's token file). */
  static connect(o: ConnectOptions): RolloutClient {
    return new RolloutClient(new HttpClient(o.url, o.apiKey ?? readTokenFile(o.home), o.requestTimeoutMs));
  }

  /** N rollouts of one task, started together (from the warm pool first). */
  async startGroup(o: StartGroupOptions): Promise<RemoteRolloutGroup> {
    const body: wire.CreateGroupIn = {
      instance_id: o.instanceId,
      n: o.n,
      gold_check: o.goldCheck,
      ttl_seconds: o.ttlMs === undefined ? undefined : o.ttlMs / 1000,
    };
    const g = await this.api.call("POST", "/rollouts/groups", wire.GroupInfo, body, { what: "start rollout group" });
    return new RemoteRolloutGroup(this, g);
  }

  async group(id: string): Promise<RemoteRolloutGroup> {
    const path = `/rollouts/groups/${encodeURIComponent(id)}`;
    return new RemoteRolloutGroup(this, await this.api.call("GET", path, wire.GroupInfo, undefined, { what: id }));
  }

  async groups(): Promise<GroupInfo[]> {
    const r = await this.api.call("GET", "/rollouts/groups", wire.GroupList, undefined, { what: "list groups" });
    return wire.GroupList.toCamel(r).groups;
  }

  /** A rollout by id (`<group id>.<repetition>`). */
  async rollout(id: string): Promise<RemoteRollout> {
    const path = `/rollouts/${encodeURIComponent(id)}`;
    return new RemoteRollout(this, await this.api.call("GET", path, wire.RolloutInfo, undefined, { what: id }));
  }

  /** Get the next batch ready: layers materialized and held, up to `sandboxes` per task in the warm pool. */
  async prewarm(instanceIds: string[], o: { sandboxes?: number } = {}): Promise<PrewarmReport> {
    const body = { instance_ids: instanceIds, ...(o.sandboxes === undefined ? {} : { sandboxes: o.sandboxes }) };
    const r = await this.api.call("POST", "/rollouts/prewarm", wire.PrewarmReport, body, { what: "prewarm" });
    return wire.PrewarmReport.toCamel(r);
  }

  /** The task's gold verdict (checked unless stored); TaskInvalidError when its gold patch fails. */
  async goldCheck(instanceId: string): Promise<GoldVerdict> {
    const body = { instance_id: instanceId };
    const v = await this.api.call("POST", "/rollouts/gold-check", wire.GoldVerdict, body, { what: "gold check" });
    return wire.GoldVerdict.toCamel(v);
  }
}

export class RemoteRolloutGroup implements AsyncDisposable {
  readonly id: string;
  readonly info: GroupInfo;
  readonly problemStatement: string;
  readonly rollouts: RemoteRollout[];

  constructor(
    private readonly client: RolloutClient,
    g: wire.GroupInfo,
  ) {
    this.id = g.id;
    this.info = wire.GroupInfo.toCamel(g);
    this.problemStatement = g.problem_statement;
    this.rollouts = g.rollouts.map((r) => new RemoteRollout(client, r));
  }

  rollout(repetition: number): RemoteRollout {
    const r = this.rollouts.find((x) => x.repetition === repetition);
    if (!r) throw new Error(`group ${this.id} has no repetition ${repetition}`);
    return r;
  }

  /** Close every rollout of the group (forks included). */
  async close(): Promise<void> {
    const path = `/rollouts/groups/${encodeURIComponent(this.id)}`;
    await this.client.api.call("DELETE", path, wire.ClosedResponse, undefined, { what: `close group ${this.id}` });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

export class RemoteRollout {
  readonly id: string;
  readonly groupId: string;
  readonly instanceId: string;
  readonly repetition: number;
  readonly trajectoryId: string;
  readonly parent: string | null;
  readonly fromPool: boolean;
  info: RolloutInfo;
  readonly files: { read: (path: string) => Promise<Buffer>; write: (path: string, content: string) => Promise<void> };

  constructor(
    private readonly client: RolloutClient,
    r: wire.RolloutInfo,
  ) {
    this.info = wire.RolloutInfo.toCamel(r);
    this.id = r.id;
    this.groupId = r.group_id;
    this.instanceId = r.instance_id;
    this.repetition = r.repetition;
    this.trajectoryId = r.trajectory_id;
    this.parent = r.parent;
    this.fromPool = r.from_pool;
    this.files = { read: (p) => this.read(p), write: (p, c) => this.write(p, c) };
  }

  private get path(): string {
    return `/rollouts/${encodeURIComponent(this.id)}`;
  }

  /** One command (a string runs under `bash -c`); SandboxLostError when the rollout's sandbox is gone. */
  exec(cmd: string | string[], o: RemoteExecOptions = {}): Promise<RemoteExecResult> {
    return remoteExecAt(this.client.api, `${this.path}/exec`, cmd, o);
  }

  private async read(path: string): Promise<Buffer> {
    const what = `read ${path}`;
    const res = await this.client.api.fetch("GET", `${this.path}/files?path=${encodeURIComponent(path)}`, undefined, {
      what,
    });
    if (!res.ok) await this.client.api.read(res, swerex.EmptyResponse, what);
    return Buffer.from(await res.arrayBuffer());
  }

  private async write(path: string, content: string): Promise<void> {
    await this.client.api.call("PUT", `${this.path}/files`, swerex.EmptyResponse, { path, content }, { what: path });
  }

  /** The reward: a real grade, or an infrastructure failure (`status`); never throws for a lost rollout. */
  async reward(o: RemoteRewardOptions = {}): Promise<RolloutOutcome> {
    if (typeof o.reward === "function") throw new InvalidInputError("a remote reward is 'binary' or 'fraction'");
    const body: wire.RewardIn = {
      mode: o.mode,
      timeout_seconds: o.timeoutMs === undefined ? undefined : o.timeoutMs / 1000,
      reward: o.reward,
    };
    const r = await this.client.api.call("POST", `${this.path}/reward`, wire.RolloutOutcome, body, { what: "reward" });
    // A server before reasons: an infrastructure failure's kind, else a graded outcome.
    return { ...wire.RolloutOutcome.toCamel(r), reason: r.reason ?? r.failure?.kind ?? "graded" };
  }

  /** `k` children from this rollout's current state (or a checkpoint's of its group): new rollouts of the group. */
  async fork(k = 1, o: { checkpoint?: string } = {}): Promise<RemoteRollout[]> {
    const body: wire.ForkIn = { k, checkpoint_id: o.checkpoint };
    const r = await this.client.api.call("POST", `${this.path}/fork`, wire.RolloutList, body, { what: "fork" });
    return r.rollouts.map((x) => new RemoteRollout(this.client, x));
  }

  /**
   * Back to the group's start state (or a checkpoint's), in place: every process and write of the agent's gone, the
   * same rollout and sandbox; its new info, and how long the reset took on the server.
   */
  async reset(o: { checkpoint?: string } = {}): Promise<{ info: RolloutInfo; resetMs: number }> {
    const body: wire.ResetIn = { checkpoint_id: o.checkpoint };
    const r = await this.client.api.call("POST", `${this.path}/reset`, wire.ResetResponse, body, { what: "reset" });
    this.info = wire.RolloutInfo.toCamel(r.rollout);
    return { info: this.info, resetMs: r.reset_ms };
  }

  /** A checkpoint of this rollout's state, kept by its group (reset or fork to it): its id. */
  async checkpoint(): Promise<string> {
    const path = `${this.path}/checkpoints`;
    const r = await this.client.api.call("POST", path, wire.CheckpointResponse, {}, { what: "checkpoint" });
    return r.checkpoint_id;
  }

  /** Let a checkpoint of the group go. */
  async dropCheckpoint(id: string): Promise<void> {
    const path = `${this.path}/checkpoints/${encodeURIComponent(id)}`;
    await this.client.api.call("DELETE", path, wire.ClosedResponse, undefined, { what: `drop ${id}` });
  }

  async refresh(): Promise<RolloutInfo> {
    this.info = wire.RolloutInfo.toCamel(await this.client.api.call("GET", this.path, wire.RolloutInfo, undefined));
    return this.info;
  }

  async close(): Promise<void> {
    await this.client.api.call("DELETE", this.path, wire.ClosedResponse, undefined, { what: `close ${this.id}` });
  }
}
