/**
 * Bytecode-cache checks. `python -v` says, per module, "code object from '<x>.pyc'" when it used the cache and
 * "code object from <x>.py" when it compiled the source (a stale or missing .pyc), and "created '<x>.pyc'" when it
 * wrote one. A workspace whose caches are valid shows neither of the last two.
 */
import type { PycCheck, ReadyVariant } from "./types.js";

/** The command run once per variant (untimed): the real first import, verbose, plus the interpreter's write setting. */
export function pycProbe(importModule: string): string {
  return `python -v -c "import sys, ${importModule}; print('MSB_DWB=' + str(sys.dont_write_bytecode))"`;
}

/** Counts .pyc files under the workspace trees with a modification time after the given epoch second. */
export function pycNewerCommand(paths: string[], sinceEpochSec: number): string {
  return `find ${paths.join(" ")} -name '*.pyc' -newermt @${Math.floor(sinceEpochSec)} 2>/dev/null | wc -l`;
}

export function parsePycProbe(output: string, newerAfterTimedRuns: number | null = null): PycCheck {
  const compiled: string[] = [];
  const written: string[] = [];
  for (const line of output.split("\n")) {
    // Python prints the source path bare ("code object from /x/y.py") and the cache path quoted.
    const code = /code object from '?([^'\s]+)'?/.exec(line);
    if (code && !code[1]!.endsWith(".pyc")) compiled.push(code[1]!);
    const created = /^# created '([^']+)'/.exec(line.trim()) ?? /^created '([^']+\.pyc)'/.exec(line.trim());
    if (created) written.push(created[1]!);
  }
  const dwb = /MSB_DWB=(True|False)/.exec(output);
  const dontWriteBytecode = dwb ? dwb[1] === "True" : null;
  const sawAnyImport = /code object from/.test(output);
  return {
    compiledFromSource: compiled.length,
    written: written.length,
    newerAfterTimedRuns,
    dontWriteBytecode,
    ok:
      sawAnyImport &&
      compiled.length === 0 &&
      written.length === 0 &&
      dontWriteBytecode === false &&
      (newerAfterTimedRuns ?? 0) === 0,
    examples: [...compiled, ...written].slice(0, 5),
  };
}

/** The Markdown's word on a variant's bytecode check. */
export function pycVerdict(v: ReadyVariant): string {
  if (!v.pyc) return "n/a";
  if (v.pyc.ok) return "valid";
  const dont = v.pyc.dontWriteBytecode ? ", dont_write_bytecode" : "";
  return `**${v.pyc.compiledFromSource} recompiled, ${v.pyc.written} written${dont}**`;
}
