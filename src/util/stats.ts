/** Latency distributions: what every benchmark in the project reports. */

/** Latency distribution of one measured quantity. */
export interface Dist {
  n: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  meanMs: number;
  minMs: number;
  maxMs: number;
}

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
