/**
 * The dashboard's live view, sampled only while someone watches (a stream is open or a state was asked for): each
 * live sandbox's memory, CPU and newest process from /proc and its cgroups, in slices that leave the event loop free;
 * the node cache every 10 s and the store every minute. Nobody watching: no timer, no I/O.
 */
import { setImmediate as yieldLoop } from "node:timers/promises";
import { nodeCacheFor } from "../env/environments.js";
import { openStore, storeStats, type StoreStats } from "../env/store/index.js";
import type { RolloutEngine } from "../rollout/index.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import { CLOCK_TICKS_PER_SECOND, cgroupDirsOf, sandboxUsage } from "../sandbox/usage.js";
import { homeLayout } from "../util/home.js";
import type { Principal } from "./auth.js";
import type { SandboxRegistry } from "./registry.js";
import type { RolloutAccess } from "./rollout-routes.js";
import type { CacheLayerRow, SandboxRow } from "../view/dashboard-data.js";

/** Slowly changing facts (cache, store), refreshed on their own period while watched. */
interface Slow<T> {
  value?: T;
  error?: string;
  at: number;
  pending?: Promise<void>;
}

/** What is kept between samples of one sandbox: where its cgroups are, its CPU time when last seen. */
interface Tracked {
  dirs: { memory?: string; pids?: string };
  ticks?: number;
  at?: number;
}

/** A row to fill, and the sandbox it is about. */
interface Listed {
  row: SandboxRow;
  sandbox: Sandbox;
}

/** A row's figures before its first measurement. */
const UNMEASURED = { memoryBytes: null, cpuPercent: 0, processes: 0, command: "" } as const;
const SLICE = 50;
const CACHE_EVERY_MS = 10_000;
const STORE_EVERY_MS = 60_000;

export interface RolloutSide {
  engine: RolloutEngine;
  access: RolloutAccess;
  poolMax: number;
}

export class LiveSampler {
  private readonly tracked = new Map<string, Tracked>();
  private rows: SandboxRow[] = [];
  private readonly cache: Slow<CacheLayerRow[]> = { at: 0 };
  private readonly store: Slow<StoreStats> = { at: 0 };
  /** The event loop's time spent on the last sample (its slices, not the work that ran between them). */
  lastSampleMs = 0;
  sampledAt = 0;

  constructor(
    private readonly registry: SandboxRegistry,
    private readonly home: string,
    private readonly rollouts: () => RolloutSide | undefined,
  ) {}

  /** Every live sandbox with what it uses now; the cache and store when their period is over. */
  async sample(): Promise<void> {
    let t0 = performance.now();
    let busy = 0;
    const listed = this.list();
    for (let i = 0; i < listed.length; i += SLICE) {
      for (const x of listed.slice(i, i + SLICE)) this.measure(x);
      if (i + SLICE >= listed.length) break;
      busy += performance.now() - t0;
      await yieldLoop();
      t0 = performance.now();
    }
    const seen = new Set(listed.map((x) => x.row.id));
    for (const id of this.tracked.keys()) if (!seen.has(id)) this.tracked.delete(id);
    this.rows = listed.map((x) => x.row);
    this.refresh(this.cache, CACHE_EVERY_MS, () => this.cacheLayers());
    this.refresh(this.store, STORE_EVERY_MS, () => storeStats(openStore(homeLayout(this.home).store)));
    this.sampledAt = Date.now();
    this.lastSampleMs = busy + performance.now() - t0;
  }

  /** The registry's sandboxes and the live rollouts', with their owners. */
  private list(): Listed[] {
    const all = { name: "", admin: true };
    const listed: Listed[] = this.registry.list(all).map((e) => ({
      sandbox: e.sandbox,
      row: {
        id: e.id,
        owner: e.owner,
        kind: "sandbox",
        instanceId: e.instanceId ?? null,
        source: e.source,
        createdAt: e.createdAt.getTime(),
        state: e.inflight > 0 ? "busy" : "idle",
        memoryLimit: e.limits.memoryBytes ?? null,
        ...UNMEASURED,
      },
    }));
    return [...listed, ...this.rolloutsListed()];
  }

  private rolloutsListed(): Listed[] {
    const side = this.rollouts();
    const listed: Listed[] = [];
    for (const g of side?.engine.groups() ?? []) {
      const owner = side!.access.ownerOf(g) ?? "";
      for (const r of g.rollouts) {
        const sandbox = r.sandbox;
        if (!sandbox || sandbox.isClosed) continue;
        const row: SandboxRow = {
          id: sandbox.id,
          owner,
          kind: "rollout",
          instanceId: r.instanceId,
          source: "rollout",
          createdAt: r.createdAt.getTime(),
          state: r.state,
          memoryLimit: sandbox.limits.memoryBytes ?? null,
          groupId: g.id,
          ...UNMEASURED,
        };
        listed.push({ sandbox, row });
      }
    }
    return listed;
  }

  private measure({ row, sandbox }: Listed): void {
    let t = this.tracked.get(row.id);
    if (!t) {
      t = { dirs: cgroupDirsOf(sandbox.pid1) };
      this.tracked.set(row.id, t);
    }
    const u = sandboxUsage(t.dirs);
    const now = performance.now();
    if (t.ticks !== undefined && t.at !== undefined && now > t.at) {
      const seconds = (now - t.at) / 1000;
      row.cpuPercent = Math.max(0, Math.round(((u.cpuTicks - t.ticks) / CLOCK_TICKS_PER_SECOND / seconds) * 1000) / 10);
    }
    [t.ticks, t.at] = [u.cpuTicks, now];
    [row.memoryBytes, row.processes, row.command] = [u.memoryBytes, u.processes, u.command];
  }

  private refresh<T>(slot: Slow<T>, everyMs: number, load: () => Promise<T>): void {
    if (slot.pending || Date.now() - slot.at < everyMs) return;
    slot.pending = load().then(
      (v) => {
        [slot.value, slot.error, slot.at, slot.pending] = [v, undefined, Date.now(), undefined];
      },
      (e: Error) => {
        [slot.error, slot.at, slot.pending] = [e.message, Date.now(), undefined];
      },
    );
  }

  private async cacheLayers(): Promise<CacheLayerRow[]> {
    const layers = await nodeCacheFor(this.home).list();
    return layers.map((l) => ({ key: l.key, bytes: l.logicalBytes, leases: l.leases, lastUsedAt: l.lastUsedMs }));
  }

  /** The sandboxes `who` may see, as last sampled. */
  sandboxesFor(who: Principal): SandboxRow[] {
    return this.rows.filter((r) => who.admin || r.owner === who.name);
  }

  cacheState(): { layers?: CacheLayerRow[]; error?: string } {
    return { layers: this.cache.value, error: this.cache.error };
  }

  storeState(): { stats?: StoreStats; error?: string } {
    return { stats: this.store.value, error: this.store.error };
  }
}
