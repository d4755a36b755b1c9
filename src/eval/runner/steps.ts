/**
 * The shell side of one instance's evaluation: the scripts piped into the sandbox (apply the patch, run eval.sh),
 * how their output is split, and run_instance.log.
 */
import { TESTBED_PATH } from "../../env/types.js";
import { appendInstanceLog, formatLogLine, type LogLevel } from "../report.js";

/** The harness's GIT_APPLY_CMDS, tried in order on /tmp/patch.diff. */
export const GIT_APPLY_CMDS = [
  "git apply --verbose",
  "git apply --verbose --reject",
  "patch --batch --fuzz=5 -p1 -i",
] as const;
/** The harness's DOCKER_PATCH. */
export const SANDBOX_PATCH_PATH = "/tmp/patch.diff";
export const SANDBOX_EVAL_PATH = "/eval.sh";
/** Exit status of the scripts when they cannot even write their input file. */
export const SCRIPT_SETUP_FAILED = 97;

/** Collects run_instance.log lines; appends them to the file when there is one. */
export class InstanceLogger {
  private text = "";
  private chain: Promise<void> = Promise.resolve();
  constructor(private readonly dir: string | undefined) {}

  write(level: LogLevel, message: string): void {
    this.text += formatLogLine(level, message);
    if (this.dir) {
      const dir = this.dir;
      this.chain = this.chain.then(() => appendInstanceLog(dir, level, message)).catch(() => {});
    }
  }
  info(message: string): void {
    this.write("INFO", message);
  }
  warn(message: string): void {
    this.write("WARNING", message);
  }
  error(message: string): void {
    this.write("ERROR", message);
  }
  async flush(): Promise<string> {
    await this.chain;
    return this.text;
  }
}

/** Split output on lines `\n<nonce> <tag>\n` the scripts print between steps. */
export function splitOnNonce(output: string, nonce: string): { segments: string[]; tags: string[] } {
  const re = new RegExp(`\\n${nonce} ([^\\n]*)\\n`, "g");
  const segments: string[] = [];
  const tags: string[] = [];
  let last = 0;
  for (let m = re.exec(output); m; m = re.exec(output)) {
    segments.push(output.slice(last, m.index));
    tags.push(m[1]!);
    last = m.index + m[0].length;
  }
  segments.push(output.slice(last));
  return { segments, tags };
}

/** Patch on stdin: each apply command in turn, its status after a nonce line, `git diff` after the first success. */
export function applyScript(nonce: string): string {
  const attempts = GIT_APPLY_CMDS.map(
    (c) =>
      `${c} ${SANDBOX_PATCH_PATH} 2>&1; rc=$?; printf '\\n%s %s\\n' ${nonce} "$rc"; ` +
      `if [ "$rc" -eq 0 ]; then git -c core.fileMode=false diff 2>&1; printf '\\n%s diff\\n' ${nonce}; exit 0; fi`,
  );
  const setup = [
    `cat > ${SANDBOX_PATCH_PATH} || exit ${SCRIPT_SETUP_FAILED}`,
    `cd ${TESTBED_PATH} || exit ${SCRIPT_SETUP_FAILED}`,
  ];
  return [...setup, ...attempts, "exit 1"].join("\n");
}

/** eval.sh on stdin: run it, then a nonce line, then `git diff`. */
export function evalRunScript(nonce: string): string {
  const cannotWrite = `{ printf 'cannot write ${SANDBOX_EVAL_PATH}\\n'; exit ${SCRIPT_SETUP_FAILED}; }`;
  return [
    `cat > ${SANDBOX_EVAL_PATH} 2>/dev/null || ${cannotWrite}`,
    `/bin/bash ${SANDBOX_EVAL_PATH}`,
    `printf '\\n%s end\\n' ${nonce}`,
    `cd ${TESTBED_PATH} && git -c core.fileMode=false diff 2>&1`,
  ].join("\n");
}

export const seconds = (ms: number): number => Math.round(ms / 1000);

/** Seconds as Python prints `f"{x:_.2f}"`. */
export const fmtSeconds = (ms: number): string =>
  (ms / 1000).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }).replaceAll(",", "_");
