/**
 * eval.sh for one instance, in the harness's shape (`make_eval_script_list_py`): same commands in the same order,
 * `set -uxo pipefail` so that `set -x` echoes the `: '>>>>> ...'` marker lines into the log. The one change is the
 * environment: a venv at VENV_PATH activated with `source`, where the harness activates a conda env.
 * Variables of `spec.env` are not exported here: the sandbox running the script provides them.
 */
import type { EnvSpec } from "../env/types.js";
import { TESTBED_PATH, VENV_PATH } from "../env/types.js";
import { modifiedFiles, newFiles, testDirectives } from "./diff.js";
import { MARKERS } from "./parsers.js";
import { shellQuote } from "../util/shell.js";

export interface EvalScriptInput {
  instance: { instance_id: string; repo: string; base_commit: string; test_patch: string };
  spec: Pick<EnvSpec, "install" | "eval_commands" | "test_cmd">;
  /** Where the repository is (default TESTBED_PATH). */
  testbedPath?: string;
  /** Where the venv is (default VENV_PATH). */
  venvPath?: string;
  /** The lines that activate the environment (default: `source <venvPath>/bin/activate`; an image's own: see below). */
  activate?: readonly string[];
}

/** How the harness's eval script activates a SWE-bench image's environment (its conda env `testbed`). */
export const CONDA_ACTIVATION: readonly string[] = ["source /opt/miniconda3/bin/activate", "conda activate testbed"];
/** Whether an image has that conda env (a shell test, run in the sandbox). */
export const HAS_CONDA_TESTBED = "test -f /opt/miniconda3/bin/activate && test -d /opt/miniconda3/envs/testbed";

/** The activation of a venv at `venvPath`. */
export function venvActivation(venvPath: string = VENV_PATH): string[] {
  return [`source ${shellQuote(`${venvPath}/bin/activate`)}`];
}

/** The harness's heredoc delimiter. */
export const HEREDOC_DELIMITER = "EOF_114329324912";

/** A delimiter that no line of `body` equals (the harness's own unless the patch happens to contain it). */
export function heredocDelimiter(body: string, base: string = HEREDOC_DELIMITER): string {
  const lines = new Set(body.split("\n").map((l) => l.replace(/\r$/, "")));
  let delimiter = base;
  for (let n = 1; lines.has(delimiter); n++) delimiter = `${base}_${n}`;
  return delimiter;
}

/** Commands that put the test files back as they were at the base commit (empty when the patch touches none). */
function resetCommands(baseCommit: string, testPatch: string): string[] {
  const modified = modifiedFiles(testPatch);
  const created = newFiles(testPatch);
  const out: string[] = [];
  // Without files, `git checkout <base>` would reset the whole tree (the harness guards against it the same way).
  if (modified.length > 0) out.push(`git checkout ${shellQuote(baseCommit)} ${modified.map(shellQuote).join(" ")}`);
  if (created.length > 0) out.push(`rm -f ${created.map(shellQuote).join(" ")}`);
  return out;
}

/** The eval.sh text (ends with a newline). */
export function makeEvalScript(input: EvalScriptInput): string {
  const { instance, spec } = input;
  const testbed = shellQuote(input.testbedPath ?? TESTBED_PATH);
  const activate = (input.activate ?? venvActivation(input.venvPath)).join("\n");
  const base = shellQuote(instance.base_commit);
  const reset = resetCommands(instance.base_commit, instance.test_patch);
  const delimiter = heredocDelimiter(instance.test_patch);
  const testCommand = [spec.test_cmd, ...testDirectives(instance).map(shellQuote)].join(" ");
  const lines = [
    "#!/bin/bash",
    "set -uxo pipefail",
    activate,
    `cd ${testbed}`,
    ...spec.eval_commands,
    `git config --global --add safe.directory ${testbed}`,
    `cd ${testbed}`,
    // Informational, so the log records the state under test.
    "git status",
    "git show",
    `git -c core.fileMode=false diff ${base}`,
    activate,
    ...(spec.install ? [spec.install] : []),
    ...reset,
    `git apply -v - <<'${delimiter}'\n${instance.test_patch}\n${delimiter}`,
    `: '${MARKERS.startTestOutput}'`,
    testCommand,
    `: '${MARKERS.endTestOutput}'`,
    ...reset, // leave the tests as they were
  ];
  return `${lines.join("\n")}\n`;
}
