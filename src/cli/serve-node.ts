/**
 * `serve` options for a server that is one node of many (started by a supervisor, e.g. the Python fleet on Ray):
 * a ready file instead of a line to parse, an exit when the supervisor's pipe closes, the peers layers may come
 * from, and local clones for builds. Parsing and the two process hooks only.
 */
import { renameSync, writeFileSync } from "node:fs";
import type { Command } from "commander";
import type { RunningServer } from "../server/server.js";
import { collect } from "./common.js";

export interface NodeServeOptions {
  readyFile?: string;
  exitWithStdin?: boolean;
  peerAllow: string[];
  repos?: string;
}

export function addNodeServeOptions(cmd: Command): Command {
  return cmd
    .option("--ready-file <FILE>", 'once listening, write {"url", "pid"} to FILE (atomically)')
    .option("--exit-with-stdin", "shut down gracefully (closing every sandbox) when stdin reaches end of file")
    .option(
      "--peer-allow <HOST|CIDR>",
      "servers whose layers this one may fetch (repeatable; peers can also be registered with PUT /peers)",
      collect,
      [] as string[],
    )
    .option("--repos <DIR>", "local clones or mirrors for building environments, laid out as DIR/<owner>/<name>");
}

/** Tell a supervisor where the server listens: a JSON file that appears complete or not at all. */
export function writeReadyFile(file: string, server: RunningServer): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify({ url: server.url, pid: process.pid })}\n`, { mode: 0o644 });
  renameSync(tmp, file);
}

/** The supervisor holds our stdin; when it goes (even killed), stdin ends and we stop as on SIGTERM. */
export function stopWhenStdinEnds(stop: (why: string) => void): void {
  process.stdin.on("data", () => undefined);
  process.stdin.once("end", () => stop("stdin closed"));
  process.stdin.once("error", () => stop("stdin closed"));
  process.stdin.resume();
}
