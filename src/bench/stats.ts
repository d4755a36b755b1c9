import type { Dist } from "./types.js";

/** Nearest-rank percentile of sorted samples. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

const round = (x: number): number => Math.round(x * 100) / 100;

export function summarize(samplesMs: readonly number[]): Dist {
  const s = [...samplesMs].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / (s.length || 1);
  return {
    n: s.length,
    p50Ms: round(percentile(s, 50)),
    p90Ms: round(percentile(s, 90)),
    p99Ms: round(percentile(s, 99)),
    meanMs: round(mean),
    minMs: round(s[0] ?? NaN),
    maxMs: round(s[s.length - 1] ?? NaN),
  };
}

/** a / b rounded to 2 decimals, null when either is missing or b is 0. */
export function ratio(a: number | null | undefined, b: number | null | undefined): number | null {
  if (a == null || b == null || !Number.isFinite(a) || !Number.isFinite(b) || b <= 0) return null;
  return Math.round((a / b) * 100) / 100;
}

export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t = performance.now();
  const value = await fn();
  return { ms: performance.now() - t, value };
}
