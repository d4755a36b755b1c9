/** A few Prometheus metrics, kept by hand (text exposition format 0.0.4): no dependency, no global registry. */

type Labels = Record<string, string>;

const key = (labels: Labels): string =>
  Object.keys(labels)
    .sort()
    .map((k) => `${k}="${String(labels[k]).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`)
    .join(",");

class Counter {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  inc(labels: Labels = {}, by = 1): void {
    const k = key(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  get(labels: Labels = {}): number {
    return this.values.get(key(labels)) ?? 0;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [k, v] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ""} ${v}`);
    return lines.join("\n");
  }
}

export interface HistogramTotals {
  buckets: readonly number[];
  counts: number[];
  sum: number;
  count: number;
}

class Histogram {
  private readonly series = new Map<string, { counts: number[]; sum: number; count: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: number[],
  ) {}
  observe(labels: Labels, value: number): void {
    const k = key(labels);
    let s = this.series.get(k);
    if (!s) {
      s = { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.series.set(k, s);
    }
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) s.counts[i]!++;
    s.sum += value;
    s.count++;
  }
  /** Every series added up: observations at or under each bucket (as rendered), their sum and count. */
  merged(): HistogramTotals {
    const t: HistogramTotals = { buckets: this.buckets, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
    for (const s of this.series.values()) {
      for (let i = 0; i < s.counts.length; i++) t.counts[i]! += s.counts[i]!;
      t.sum += s.sum;
      t.count += s.count;
    }
    return t;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [k, s] of this.series) {
      const sep = k ? "," : "";
      for (const [i, b] of this.buckets.entries())
        lines.push(`${this.name}_bucket{${k}${sep}le="${b}"} ${s.counts[i]}`);
      lines.push(`${this.name}_bucket{${k}${sep}le="+Inf"} ${s.count}`);
      lines.push(`${this.name}_sum${k ? `{${k}}` : ""} ${s.sum}`);
      lines.push(`${this.name}_count${k ? `{${k}}` : ""} ${s.count}`);
    }
    return lines.join("\n");
  }
}

export class ServerMetrics {
  readonly creations = new Counter(
    "minisandbox_sandbox_creations_total",
    "Sandbox creations by result (ok, error, rejected).",
  );
  readonly closes = new Counter(
    "minisandbox_sandbox_closes_total",
    "Sandboxes closed, by reason (delete, ttl, idle, shutdown, exited).",
  );
  readonly sessionsCreated = new Counter("minisandbox_sessions_created_total", "Bash sessions created.");
  readonly evaluations = new Counter("minisandbox_evaluations_total", "Evaluations by result (ok, error).");
  readonly requests = new Counter("minisandbox_http_requests_total", "HTTP requests by route and status code.");
  readonly rateLimited = new Counter(
    "minisandbox_rate_limited_total",
    "Requests refused with 429 because their principal exceeded its rate.",
  );
  readonly replays = new Counter(
    "minisandbox_request_replays_total",
    "Responses replayed for a repeated X-Request-ID.",
  );
  readonly commands = new Histogram(
    "minisandbox_command_duration_seconds",
    "Server-side latency of commands by kind (session, interrupt, execute, exec).",
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
  );
  readonly creationLatency = new Histogram(
    "minisandbox_sandbox_create_duration_seconds",
    "Time to create a sandbox (provider + launch).",
    [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  );

  render(gauges: { sandboxes: number; sessions: number; creating: number; maxSandboxes: number }): string {
    const gauge = (name: string, help: string, v: number): string =>
      `# HELP ${name} ${help}\n# TYPE ${name} gauge\n${name} ${v}`;
    return `${[
      gauge("minisandbox_sandboxes_live", "Sandboxes currently live.", gauges.sandboxes),
      gauge("minisandbox_sandboxes_creating", "Sandbox creations in progress.", gauges.creating),
      gauge("minisandbox_sandboxes_max", "Configured maximum of live sandboxes (0: unlimited).", gauges.maxSandboxes),
      gauge("minisandbox_sessions_live", "Bash sessions currently open, over all sandboxes.", gauges.sessions),
      this.creations.render(),
      this.closes.render(),
      this.sessionsCreated.render(),
      this.evaluations.render(),
      this.requests.render(),
      this.replays.render(),
      this.rateLimited.render(),
      this.commands.render(),
      this.creationLatency.render(),
    ].join("\n")}\n`;
  }
}
