/** The command line's and the layer transfer's ratios against their floors, targets and the command line section. */
import { ratio } from "./stats.js";
import type { BenchResults, Target } from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type SpeedRatios = Pick<
  BenchResults["ratios"],
  "cli_version_vs_node_empty" | "cli_exec_vs_podman_run" | "transfer_http_vs_copy"
>;

export const SPEED_RATIO_MEANINGS: Record<keyof SpeedRatios, string> = {
  cli_version_vs_node_empty: "command line: node starting an empty script ÷ minisandbox --version (1 = the floor)",
  cli_exec_vs_podman_run: "command line, end to end: podman run --rm IMAGE true ÷ minisandbox exec --dir D -- true",
  transfer_http_vs_copy: "layer into a fresh node: HTTP (missing objects) MB/s ÷ cp -a of the materialized tree MB/s",
};

const transferOf = (r: Partial) => (r.fleet.available && r.fleet.transfer.available ? r.fleet.transfer : undefined);

export function speedRatios(r: Partial, reasons: Record<string, string>): SpeedRatios {
  const c = r.cli.available ? r.cli : undefined;
  const t = transferOf(r);
  const out: SpeedRatios = {
    cli_version_vs_node_empty: c ? ratio(c.nodeEmptyMs, c.versionMs) : null,
    cli_exec_vs_podman_run: c ? ratio(c.podmanRunMs, c.execMs) : null,
    transfer_http_vs_copy: t ? ratio(t.methods.http_objects.mbPerS, t.methods.plain_copy.mbPerS) : null,
  };
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

export function speedTargets(r: Partial): Target[] {
  const c = r.cli.available ? r.cli : undefined;
  const t = transferOf(r);
  const http = t?.methods.http_objects;
  return [
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
