/**
 * The dashboard's data: one snapshot per principal (its own sandboxes, rollout groups and outcomes; an admin sees
 * all, plus the server's command rates and latencies, warm pool, node cache, store and peers, which the API shows
 * admins only too), and the streams that receive a fresh one after each live sample.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { LimitError } from "../errors.js";
import type { RolloutGroup, RolloutOutcome } from "../rollout/index.js";
import type { Principal } from "./auth.js";
import type { DashboardSnapshot, GroupRow } from "../view/dashboard-data.js";
import { DashboardHistory } from "./dashboard-history.js";
import { LiveSampler, type RolloutSide } from "./dashboard-live.js";
import type { RouteContext } from "./route-context.js";

/** Streams of events at most, per principal and in all (each holds a connection). */
const MAX_STREAMS_PER_PRINCIPAL = 8;
const MAX_STREAMS = 64;
const MIN_INTERVAL_MS = 1000;

interface Watcher {
  who: Principal;
  /** false: the client is slow, this snapshot was dropped. */
  send: (snapshot: string) => boolean;
}

export class Dashboard {
  readonly history: DashboardHistory;
  private readonly live: LiveSampler;
  private readonly watchers = new Set<Watcher>();
  private rollouts: RolloutSide | undefined;
  private sampling: Promise<void> | undefined;
  private looping = false;
  private readonly startedAt = Date.now();

  constructor(private readonly ctx: RouteContext) {
    this.history = new DashboardHistory(ctx.metrics);
    this.live = new LiveSampler(ctx.registry, ctx.home, () => this.rollouts);
  }

  /** The rollout engine, and who owns which group (when the server runs rollouts). */
  attachRollouts(side: RolloutSide): void {
    this.rollouts = side;
  }

  /** An outcome as it is decided (the engine's `onOutcome`). */
  outcome(o: RolloutOutcome): void {
    const g = this.rollouts?.engine.groups().find((x) => x.id === o.groupId);
    this.history.record(o, (g && this.rollouts?.access.ownerOf(g)) ?? "");
  }

  /** A fresh-enough snapshot for one request (sampled now when nobody streams). */
  async state(who: Principal): Promise<DashboardSnapshot> {
    if (Date.now() - this.live.sampledAt > MIN_INTERVAL_MS) await this.sampleOnce();
    return this.snapshot(who);
  }

  /** Receive a snapshot after every sample, from the next one on, until the returned function is called. */
  watch(who: Principal, send: (snapshot: string) => boolean): () => void {
    const mine = [...this.watchers].filter((w) => w.who.name === who.name).length;
    if (mine >= MAX_STREAMS_PER_PRINCIPAL || this.watchers.size >= MAX_STREAMS)
      throw new LimitError(`too many dashboard streams open (${mine} of ${who.name}, ${this.watchers.size} in all)`);
    const w = { who, send };
    this.watchers.add(w);
    // Nothing is sent from here: the caller writes its headers first (the next sample comes within a second).
    if (!this.looping) void this.loop();
    return () => void this.watchers.delete(w);
  }

  private sampleOnce(): Promise<void> {
    this.sampling ??= this.live.sample().finally(() => {
      this.sampling = undefined;
    });
    return this.sampling;
  }

  /** Sample, send, wait; again while anyone watches (waiting longer when a sample takes long). */
  private async loop(): Promise<void> {
    this.looping = true;
    try {
      while (this.watchers.size > 0) {
        await this.sampleOnce();
        this.broadcast();
        await sleep(Math.max(MIN_INTERVAL_MS, 10 * this.live.lastSampleMs));
      }
    } finally {
      this.looping = false;
    }
  }

  private broadcast(): void {
    const byPrincipal = new Map<string, string>();
    for (const w of this.watchers) {
      const key = `${w.who.admin ? "admin" : "user"}:${w.who.name}`;
      const text = byPrincipal.get(key) ?? JSON.stringify(this.snapshot(w.who));
      byPrincipal.set(key, text);
      w.send(text);
    }
  }

  snapshot(who: Principal): DashboardSnapshot {
    const { registry } = this.ctx;
    const side = this.rollouts;
    const groups = side ? side.access.groups(who).map((g) => groupRow(g, side.access.ownerOf(g) ?? "")) : [];
    const base: DashboardSnapshot = {
      at: Date.now(),
      principal: { name: who.name, admin: who.admin },
      server: { startedAt: this.startedAt, sampleMs: Math.round(this.live.lastSampleMs * 10) / 10 },
      sandboxes: this.live.sandboxesFor(who),
      groups,
      outcomes: this.history.outcomesFor(who),
    };
    if (!who.admin) return base;
    base.server = {
      ...base.server,
      maxSandboxes: registry.maxSandboxes,
      creating: registry.pendingCreations,
      sessions: registry.sessionCount(),
    };
    return {
      ...base,
      commands: this.history.commands(),
      ...(side ? { pool: { size: side.engine.poolSize, max: side.poolMax } } : {}),
      cache: this.live.cacheState(),
      store: this.live.storeState(),
      peers: this.ctx.peers.peers(),
    };
  }

  close(): void {
    this.history.close();
    this.watchers.clear();
  }
}

function groupRow(g: RolloutGroup, owner: string): GroupRow {
  const states: Record<string, number> = {};
  for (const r of g.rollouts) states[r.state] = (states[r.state] ?? 0) + 1;
  return {
    id: g.id,
    instanceId: g.instanceId,
    owner,
    createdAt: g.createdAt.getTime(),
    readyMs: g.timings.readyMs,
    states,
    rewards: g.rollouts.map((r) => r.outcome?.reward ?? null),
  };
}
