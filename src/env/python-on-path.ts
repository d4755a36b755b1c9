/**
 * `--python VERSION` for plain sandboxes: a host toolchain mounted read-only at its own path, and a small directory
 * of commands first on PATH so that `python`, `python3`, `pythonX.Y`, `pip` and `pip3` are that interpreter, whatever
 * the toolchain's own bin directory holds (a distribution's /usr/bin/python3.11 has no `python` beside it).
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { shellQuote } from "../util/shell.js";
import { findToolchain } from "./toolchains.js";

export interface PythonOnPath {
  /** Full version found, e.g. "3.11.7". */
  version: string;
  /** The interpreter binary (host path, the same inside). */
  python: string;
  /** For `SandboxOptions.toolchains` and `SandboxOptions.pathPrepend`. */
  toolchains: string[];
  pathPrepend: string[];
}

/** Resolve `version` on this host (src/env/toolchains.ts) and prepare its commands under `<home>/toolchains/bin`. */
export async function pythonOnPath(version: string, home: string): Promise<PythonOnPath> {
  const t = await findToolchain(version, { home });
  const id = createHash("sha256").update(t.python).digest("hex").slice(0, 12);
  const bin = join(home, "toolchains", "bin", `${t.version}-${id}`);
  if (!existsSync(bin)) writeCommands(bin, t.python, t.version);
  return { version: t.version, python: t.python, toolchains: [...t.mounts, bin], pathPrepend: [bin] };
}

/** Written to a temporary directory, then renamed into place: concurrent callers never see half of it. */
function writeCommands(bin: string, python: string, version: string): void {
  const tmp = `${bin}.tmp-${process.pid}-${Date.now()}`;
  mkdirSync(tmp, { recursive: true });
  const minor = version.split(".").slice(0, 2).join(".");
  for (const name of ["python", "python3", `python${minor}`]) symlinkSync(python, join(tmp, name));
  const pip = `#!/bin/sh\nexec ${shellQuote(python)} -m pip "$@"\n`;
  for (const name of ["pip", "pip3", `pip${minor}`]) writeFileSync(join(tmp, name), pip, { mode: 0o755 });
  try {
    renameSync(tmp, bin);
  } catch {
    rmSync(tmp, { recursive: true, force: true }); // another caller won the race: its copy is identical
  }
}
