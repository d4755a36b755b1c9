/** The dashboard's snapshot, as the server sends it (`GET /dashboard/state`, each event of `/dashboard/events`). */

export type Point = [number, number];

export interface SandboxRow {
  id: string;
  owner: string;
  /** "sandbox" (the lifecycle API) or "rollout". */
  kind: "sandbox" | "rollout";
  instanceId: string | null;
  source: string;
  createdAt: number;
  /** busy / idle for a sandbox, the rollout's state for a rollout. */
  state: string;
  memoryBytes: number | null;
  memoryLimit: number | null;
  cpuPercent: number;
  processes: number;
  /** The newest process's command line, as the sandbox set it (any text at all). */
  command: string;
  groupId?: string;
}

export interface GroupRow {
  id: string;
  instanceId: string;
  owner: string;
  createdAt: number;
  readyMs: number;
  /** Rollouts by state. */
  states: Record<string, number>;
  /** Each rollout's reward so far (null: not rewarded, or an infrastructure failure). */
  rewards: (number | null)[];
}

export interface CommandSeries {
  perSecond: Point[];
  /** Seconds. */
  p50: Point[];
  p90: Point[];
  p99: Point[];
}

/** One decided outcome, as the dashboard lists the latest. */
export interface OutcomeRow {
  at: number;
  instanceId: string;
  kind: string;
  /** Why: a scored outcome's reason (graded, empty_patch, eval_timeout...) or the failure's kind. */
  reason: string;
  reward: number | null;
  /** Integrity flags of the graded patch, as "kind path". */
  flags: string[];
}

export interface OutcomeSummary {
  /** By kind: "resolved", "unresolved", or an infrastructure failure's kind. */
  totals: Record<string, number>;
  /** By reason (see OutcomeRow.reason). */
  reasons: Record<string, number>;
  /** Outcomes whose patch carries integrity flags. */
  flagged: number;
  /** The newest outcomes first (at most 20). */
  latest: OutcomeRow[];
  /** Per minute of the last 30, counts by kind (oldest first). */
  perMinute: { at: number; kinds: Record<string, number> }[];
  /** Rewards of the latest scored outcomes. */
  rewards: number[];
}

export interface CacheLayerRow {
  key: string;
  bytes: number;
  leases: number;
  lastUsedAt: number;
}

export interface StoreFigures {
  layers: number;
  objects: number;
  logicalBytes: number;
  storedBytes: number;
  dedupRatio: number;
}

export interface DashboardSnapshot {
  at: number;
  principal: { name: string; admin: boolean };
  server: { startedAt: number; sampleMs: number; maxSandboxes?: number; creating?: number; sessions?: number };
  sandboxes: SandboxRow[];
  groups: GroupRow[];
  outcomes: OutcomeSummary;
  /** Admins only, as /metrics and /store are. */
  commands?: CommandSeries;
  pool?: { size: number; max: number };
  cache?: { layers?: CacheLayerRow[]; error?: string };
  store?: { stats?: StoreFigures; error?: string };
  peers?: string[];
}
