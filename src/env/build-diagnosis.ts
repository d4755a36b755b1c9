/**
 * A failed build said the way a person needs it: the cause first (read from the step and the log's tail), then the
 * fix when it is a known one (local clones with --repos, a missing interpreter, a package the index lacks), then
 * where the whole log is.
 */
import { BuildError } from "../errors.js";

export interface BuildFailure {
  /** One line: what went wrong. */
  cause: string;
  /** One line: what to do about it, when known. */
  fix?: string;
  /** The build's log. */
  logFile?: string;
  /** The last lines of the log (for the curious; the cause is already above). */
  tail?: string;
}

const lastMatch = (text: string, re: RegExp): RegExpExecArray | undefined => {
  let found: RegExpExecArray | undefined;
  for (const line of text.split("\n")) {
    const m = re.exec(line);
    if (m) found = m;
  }
  return found;
};

/** The cause and the fix of a build failure (any error: a BuildError gets the full treatment). */
export function explainBuildFailure(e: unknown): BuildFailure {
  if (!(e instanceof BuildError)) return { cause: e instanceof Error ? e.message : String(e) };
  const { step, tail, logFile } = e;
  const failedLine = lastMatch(tail, /^# FAILED at [^:]+: (.*)$/)?.[1] ?? "";
  const at = `build failed at step "${step}"`;
  const base = { logFile, tail: tail.split("\n").slice(-12).join("\n") };
  const pkg =
    lastMatch(tail, /No matching distribution found for (\S+)/) ??
    lastMatch(tail, /Could not find a version that satisfies the requirement (\S+)/);
  const unreachable = lastMatch(tail, /^# (the package index(?:es)? (?:is|are) unreachable .*)$/)?.[1];
  if (pkg)
    return {
      ...base,
      cause:
        `${at}: package ${pkg[1]} is not available from the configured package index` +
        (unreachable ? ` (${unreachable})` : ""),
      fix:
        "make it available to pip (a local index or wheel directory in pip.conf / PIP_INDEX_URL / " +
        "PIP_FIND_LINKS; builds see the host's pip configuration), or pin an available version with --specs",
    };
  if (step === "toolchain" || /Python \S+ is not installed/.test(failedLine))
    return {
      ...base,
      cause: `${at}: ${failedLine || "no interpreter for this environment"}`,
      fix: "install that Python (e.g. `pyenv install <version>`) or map an installed one in <home>/toolchains.json",
    };
  if (step === "fetch" || step === "checkout") {
    const git = lastMatch(tail, /(fatal: .*|could not .*|unable to .*)/i)?.[1];
    return {
      ...base,
      cause: `${at}: ${failedLine || git || "the repository could not be fetched"}`,
      fix:
        "give local clones or mirrors with --repos DIR (laid out as DIR/<owner>/<name>); without it the " +
        "repository is cloned from GitHub, which needs the network",
    };
  }
  const errorLine =
    lastMatch(tail, /^(?:ERROR|error|Error|fatal|E {3}|\S+Error)[: ].*$/)?.[0] ??
    (failedLine || tail.trim().split("\n").pop());
  return { ...base, cause: `${at}: ${errorLine ?? "see the log"}` };
}

/** A build failure whose message is its explanation on one line (for answers that are one line, e.g. HTTP). */
export function withOneLineMessage(e: unknown): unknown {
  if (!(e instanceof BuildError)) return e;
  const f = explainBuildFailure(e);
  e.message = [f.cause, f.fix && `fix: ${f.fix}`, f.logFile && `log: ${f.logFile}`].filter(Boolean).join("; ");
  return e;
}

/** The explanation as text: cause, fix, log, then the log's last lines indented. */
export function renderBuildFailure(f: BuildFailure, withTail = true): string {
  const lines = [f.cause];
  if (f.fix) lines.push(`  fix: ${f.fix}`);
  if (f.logFile) lines.push(`  log: ${f.logFile}`);
  if (withTail && f.tail) lines.push("  last lines of the log:", ...f.tail.split("\n").map((l) => `    ${l}`));
  return lines.join("\n");
}
