/**
 * The speed rows against their floors: the warm start beside raw bwrap and podman, a group of 8 beside eight warm
 * starts, the command line beside node's empty script and podman run, the layer transfer beside cp -a; their ratios,
 * targets and the command line section.
 */
import { ratio } from "./stats.js";
import type { BenchResults, ReadyVariantName, Target } from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type SpeedRatios = Pick<
  BenchResults["ratios"],
  "warm_vs_bwrap_raw" | "cli_version_vs_node_empty" | "cli_exec_vs_podman_run" | "transfer_http_vs_copy"
>;

export const SPEED_RATIO_MEANINGS: Record<keyof SpeedRatios, string> = {
  warm_vs_bwrap_raw: "workspace ready, echo p50: raw bwrap on the same trees ÷ minisandbox warm (1 = the floor)",
  cli_version_vs_node_empty: "command line: node starting an empty script ÷ minisandbox --version (1 = the floor)",
  cli_exec_vs_podman_run: "command line, end to end: podman run --rm IMAGE true ÷ minisandbox exec --dir D -- true",
  transfer_http_vs_copy: "layer into a fresh node: HTTP (missing objects) MB/s ÷ cp -a of the materialized tree MB/s",
};

const transferOf = (r: Partial) => (r.fleet.available && r.fleet.transfer.available ? r.fleet.transfer : undefined);

/** The echo p50 of a workspace-ready variant, when it ran. */
function readyP50(r: Partial, name: ReadyVariantName): number | null {
  const v = r.ready.variants[name];
  return v?.available ? v.echo.p50Ms : null;
}

/** A group of 8 (no warm pool) ready, p50, when the rollout workload ran it. */
function groupP50(r: Partial): { ms: number; size: number } | null {
  const g = r.rollout.available ? r.rollout.group.minisandbox : undefined;
  return g?.available && r.rollout.available ? { ms: g.allReady.p50Ms, size: r.rollout.groupSize } : null;
}

export function speedRatios(r: Partial, reasons: Record<string, string>): SpeedRatios {
  const c = r.cli.available ? r.cli : undefined;
  const t = transferOf(r);
  const warm = readyP50(r, "minisandbox_warm");
  const bwrap = readyP50(r, "bwrap_raw");
  const out: SpeedRatios = {
    warm_vs_bwrap_raw: warm !== null && bwrap !== null ? ratio(bwrap, warm) : null,
    cli_version_vs_node_empty: c ? ratio(c.nodeEmptyMs, c.versionMs) : null,
    cli_exec_vs_podman_run: c ? ratio(c.podmanRunMs, c.execMs) : null,
    transfer_http_vs_copy: t ? ratio(t.methods.http_objects.mbPerS, t.methods.plain_copy.mbPerS) : null,
  };
  if (out.warm_vs_bwrap_raw === null) reasons.warm_vs_bwrap_raw = "the warm or the raw bwrap variant did not run";
  const cliWhy = r.cli.available ? "" : r.cli.reason;
  if (out.cli_version_vs_node_empty === null) reasons.cli_version_vs_node_empty = cliWhy;
  if (out.cli_exec_vs_podman_run === null) reasons.cli_exec_vs_podman_run = c ? (c.podmanReason ?? "") : cliWhy;
  if (out.transfer_http_vs_copy === null)
    reasons.transfer_http_vs_copy = !r.fleet.available
      ? r.fleet.reason
      : r.fleet.transfer.available
        ? ""
        : r.fleet.transfer.reason;
  return out;
}

/** The warm start against the floor (raw bwrap) and podman; a group of 8 against eight warm starts. */
function warmTargets(r: Partial): Target[] {
  const f = (n: number | null): string => (n === null ? "n/a" : `${n.toFixed(1)} ms`);
  const warm = readyP50(r, "minisandbox_warm");
  const podman = readyP50(r, "podman");
  const vsPodman = warm !== null && podman !== null ? podman / warm : null;
  const group = groupP50(r);
  return [
    {
      name: "warm create → first output, p50, beside raw bwrap on the same trees and podman run",
      target: "≤ 10 ms, ≥ 15× podman",
      measured:
        warm === null
          ? "not run"
          : `${f(warm)} (raw bwrap ${f(readyP50(r, "bwrap_raw"))}; podman ${f(podman)}, ` +
            `${vsPodman === null ? "n/a" : `${vsPodman.toFixed(1)}×`})`,
      met: warm === null ? null : warm <= 10 && (vsPodman === null || vsPodman >= 15),
    },
    {
      name: "group of 8 ready, no warm pool, p50, beside 8 × the warm start",
      target: "≤ 40 ms",
      measured: group
        ? `${f(group.ms)} (${group.size} × warm ${f(warm === null ? null : warm * group.size)})`
        : "not run",
      met: group ? group.ms <= 40 : null,
    },
  ];
}

export function speedTargets(r: Partial): Target[] {
  const c = r.cli.available ? r.cli : undefined;
  const t = transferOf(r);
  const http = t?.methods.http_objects;
  return [
    ...warmTargets(r),
    {
      name: "command line: minisandbox --version",
      target: "≤ 80 ms",
      measured: c ? `${c.versionMs} ms (node empty script ${c.nodeEmptyMs} ms)` : "not run",
      met: c ? c.versionMs <= 80 : null,
    },
    {
      name: "command line: exec --dir D -- true, end to end",
      target: "≤ 120 ms",
      measured: c ? `${c.execMs} ms (podman run ${c.podmanRunMs === null ? "n/a" : `${c.podmanRunMs} ms`})` : "not run",
      met: c ? c.execMs <= 120 : null,
    },
    {
      name: "layer into a fresh node over HTTP (loopback)",
      target: "≥ 100 MB/s",
      measured: http && t ? `${http.mbPerS} MB/s (cp -a ${t.methods.plain_copy.mbPerS} MB/s)` : "not run",
      met: http ? http.mbPerS >= 100 : null,
    },
  ];
}

export function cliLines(r: BenchResults): string[] {
  const L = ["", "## 10. Command line (whole processes, wall time)", ""];
  const c = r.cli;
  if (!c.available) return [...L, `Not available — ${c.reason}`];
  const vs = (floor: number | null, ours: number): string => (floor === null ? "n/a" : `${(ours / floor).toFixed(2)}×`);
  const podman = c.podmanRunMs === null ? `n/a (${c.podmanReason})` : `${c.podmanRunMs} ms`;
  L.push(
    `Median of ${c.runs} interleaved rounds.`,
    "",
    "| command | time | floor | this ÷ floor |",
    "|---|---:|---|---:|",
    `| minisandbox --version | ${c.versionMs} ms | node empty script ${c.nodeEmptyMs} ms | ` +
      `${vs(c.nodeEmptyMs, c.versionMs)} |`,
    `| minisandbox exec --dir D -- true | ${c.execMs} ms | podman run --rm ${podman} | ` +
      `${vs(c.podmanRunMs, c.execMs)} |`,
  );
  return L;
}
