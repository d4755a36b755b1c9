/**
 * The dashboard's memory of the recent past, kept whether anyone watches or not because it costs nothing per
 * request: every 5 s a copy of the command-latency histogram's totals (a few numbers, no I/O), and each rollout
 * outcome as it is decided (one entry per reward, which takes seconds). Both are bounded rings.
 */
import type { RolloutOutcome } from "../rollout/index.js";
import type { Principal } from "./auth.js";
import type { CommandSeries, OutcomeRow, OutcomeSummary } from "../view/dashboard-data.js";
import type { HistogramTotals, ServerMetrics } from "./metrics.js";

const TICK_MS = 5_000;
/** One hour of ticks, and the last outcomes. */
const MAX_SAMPLES = 720;
const MAX_OUTCOMES = 5_000;
const MINUTE_MS = 60_000;

interface Sample {
  at: number;
  commands: HistogramTotals;
}

export interface OutcomeEntry {
  at: number;
  owner: string;
  /** "resolved", "unresolved", or the infrastructure failure's kind. */
  kind: string;
  reward: number | null;
  instanceId: string;
  /** The outcome's reason: a scored one's (graded, empty_patch, eval_timeout...) or the failure's kind. */
  reason: string;
  /** Its integrity flags, as "kind path". */
  flags: string[];
}

const LATEST_SHOWN = 20;

interface OwnerTotals {
  kinds: Record<string, number>;
  reasons: Record<string, number>;
  flagged: number;
}

const addCounts = (to: Record<string, number>, from: Readonly<Record<string, number>>): void => {
  for (const [k, n] of Object.entries(from)) to[k] = (to[k] ?? 0) + n;
};

/** The value under which a fraction `q` of the observations fall, interpolated within its bucket. */
export function bucketQuantile(buckets: readonly number[], counts: readonly number[], q: number): number {
  const total = counts[counts.length - 1] ?? 0;
  if (total === 0) return 0;
  const want = q * total;
  for (let i = 0; i < buckets.length; i++) {
    if (counts[i]! < want) continue;
    const [lo, below] = i === 0 ? [0, 0] : [buckets[i - 1]!, counts[i - 1]!];
    const inBucket = counts[i]! - below;
    return lo + (buckets[i]! - lo) * (inBucket > 0 ? (want - below) / inBucket : 1);
  }
  return buckets[buckets.length - 1]!;
}

export const outcomeKind = (o: RolloutOutcome): string =>
  o.status === "scored" ? (o.resolved ? "resolved" : "unresolved") : (o.failure?.kind ?? "infra_failure");

export class DashboardHistory {
  private readonly samples: Sample[] = [];
  private readonly outcomes: OutcomeEntry[] = [];
  /** Per owner: counts by kind, by reason, and of flagged outcomes. */
  private readonly totals = new Map<string, OwnerTotals>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly metrics: ServerMetrics) {
    this.tick();
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  private tick(): void {
    this.samples.push({ at: Date.now(), commands: this.metrics.commands.merged() });
    if (this.samples.length > MAX_SAMPLES) this.samples.shift();
  }

  record(o: RolloutOutcome, owner: string): void {
    const kind = outcomeKind(o);
    const flags = o.flags.map((f) => `${f.kind} ${f.path}`);
    const reason = o.reason ?? kind; // the engine always says why; the wire lets older servers omit it
    const entry = { at: Date.now(), owner, kind, reward: o.reward, instanceId: o.instanceId, reason, flags };
    this.outcomes.push(entry);
    if (this.outcomes.length > MAX_OUTCOMES) this.outcomes.shift();
    const t = this.totals.get(owner) ?? { kinds: {}, reasons: {}, flagged: 0 };
    t.kinds[kind] = (t.kinds[kind] ?? 0) + 1;
    t.reasons[reason] = (t.reasons[reason] ?? 0) + 1;
    if (flags.length) t.flagged++;
    this.totals.set(owner, t);
  }

  /** Commands per second and latency percentiles (seconds) per tick, over the last hour. */
  commands(): CommandSeries {
    const out: CommandSeries = { perSecond: [], p50: [], p90: [], p99: [] };
    for (let i = 1; i < this.samples.length; i++) {
      const [a, b] = [this.samples[i - 1]!, this.samples[i]!];
      const n = b.commands.count - a.commands.count;
      out.perSecond.push([b.at, n / ((b.at - a.at) / 1000)]);
      if (n === 0) continue;
      const counts = b.commands.counts.map((c, j) => c - a.commands.counts[j]!);
      counts.push(n);
      const bounds = [...b.commands.buckets, b.commands.buckets[b.commands.buckets.length - 1]!];
      for (const [q, series] of [
        [0.5, out.p50],
        [0.9, out.p90],
        [0.99, out.p99],
      ] as const)
        series.push([b.at, bucketQuantile(bounds, counts, q)]);
    }
    return out;
  }

  /** What `who` may see of the outcomes: its own, or everyone's for an admin. */
  outcomesFor(who: Principal, now = Date.now()): OutcomeSummary {
    const mine = (owner: string): boolean => who.admin || owner === who.name;
    const totals: Record<string, number> = {};
    const reasons: Record<string, number> = {};
    let flagged = 0;
    for (const [owner, t] of this.totals) {
      if (!mine(owner)) continue;
      addCounts(totals, t.kinds);
      addCounts(reasons, t.reasons);
      flagged += t.flagged;
    }
    const start = Math.floor(now / MINUTE_MS) * MINUTE_MS - 29 * MINUTE_MS;
    const perMinute = Array.from({ length: 30 }, (_, i) => ({
      at: start + i * MINUTE_MS,
      kinds: {} as Record<string, number>,
    }));
    const rewards: number[] = [];
    const latest: OutcomeRow[] = [];
    for (const e of this.outcomes) {
      if (!mine(e.owner)) continue;
      latest.push({
        at: e.at,
        instanceId: e.instanceId,
        kind: e.kind,
        reason: e.reason,
        reward: e.reward,
        flags: e.flags,
      });
      const slot = perMinute[Math.floor((e.at - start) / MINUTE_MS)];
      if (slot) slot.kinds[e.kind] = (slot.kinds[e.kind] ?? 0) + 1;
      if (e.reward !== null) rewards.push(e.reward);
    }
    const newest = latest.slice(-LATEST_SHOWN).reverse();
    return { totals, reasons, flagged, perMinute, rewards: rewards.slice(-1000), latest: newest };
  }

  close(): void {
    clearInterval(this.timer);
  }
}
