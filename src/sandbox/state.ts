import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { SandboxCgroups } from "./limits.js";

/** What the reaper needs to clean a sandbox whose owner died: written when the sandbox starts. */
export interface SandboxState {
  id: string;
  ownerPid: number;
  ownerStart?: number;
  /** Host pid of the launcher (outer bwrap) and of the sandbox's pid 1. */
  holderPid: number;
  holderStart?: number;
  pid1: number;
  cgroups: SandboxCgroups;
  createdAt: string;
}

export interface SandboxPaths {
  dir: string;
  control: string;
  scratch: string;
  state: string;
}

export function sandboxPaths(sandboxesDir: string, id: string): SandboxPaths {
  const dir = join(sandboxesDir, id);
  return { dir, control: join(dir, "ctl"), scratch: join(dir, "rw"), state: join(dir, "state.json") };
}

export function makeSandboxDirs(p: SandboxPaths): void {
  mkdirSync(p.control, { recursive: true, mode: 0o755 });
  mkdirSync(p.scratch, { recursive: true, mode: 0o755 });
}

export function writeState(p: SandboxPaths, state: SandboxState): void {
  const tmp = `${p.state}.tmp`;
  writeFileSync(tmp, JSON.stringify(state, null, 2));
  renameSync(tmp, p.state);
}

export function readState(p: SandboxPaths): SandboxState | undefined {
  try {
    return JSON.parse(readFileSync(p.state, "utf8")) as SandboxState;
  } catch {
    return undefined;
  }
}
