/**
 * The patch an agent made in a live sandbox: its /testbed (tracked, untracked and binary files) against the
 * pristine state of the same environment, without changing anything of the agent's repository (temporary index,
 * temporary object directory). The pristine state is listed in a fresh sandbox of the environment, so files the
 * environment's build left untracked (egg-info, compiled extensions...) are part of the base and never show up as
 * "new files" that would not apply.
 */
import type { Sandbox } from "../../sandbox/sandbox.js";
import { TESTBED_PATH } from "../../env/types.js";
import { SandboxError } from "../../errors.js";

/** System tools only: the agent may have put anything in front of PATH (the venv's bin, for one). */
const SAFE_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", GIT_CONFIG_NOSYSTEM: "1", GIT_TERMINAL_PROMPT: "0" };
const GIT = "git -c safe.directory='*' -c core.fsmonitor=false -c core.untrackedCache=false -c core.quotePath=false";

const PRELUDE = `set -e
cd ${TESTBED_PATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
objs=$(${GIT} rev-parse --path-format=absolute --git-path objects)
idx=$(${GIT} rev-parse --path-format=absolute --git-path index)
mkdir "$tmp/objects"
export GIT_OBJECT_DIRECTORY="$tmp/objects" GIT_ALTERNATE_OBJECT_DIRECTORIES="$objs"
if [ -f "$idx" ]; then cp "$idx" "$tmp/index"; fi
export GIT_INDEX_FILE="$tmp/index"
${GIT} add -A
`;

/** `mode sha stage<TAB>path` NUL-terminated for every file of the snapshot (tracked + untracked, not ignored). */
const LIST_SCRIPT = `${PRELUDE}${GIT} ls-files -s -z\n`;

const DIFF_SCRIPT = `${PRELUDE}
cat > "$tmp/listing"
GIT_INDEX_FILE="$tmp/base" ${GIT} update-index -z --index-info < "$tmp/listing"
base=$(GIT_INDEX_FILE="$tmp/base" ${GIT} write-tree --missing-ok)
# Changes to environment files git has no preimage of (untracked build output): left out, with a note.
${GIT} diff --cached --no-renames --raw -z --abbrev=40 "$base" > "$tmp/raw"
: > "$tmp/restore"
while IFS= read -r -d '' meta && IFS= read -r -d '' path; do
  set -- $meta
  case "$3" in 0000000000000000000000000000000000000000) continue ;; esac
  if ! ${GIT} cat-file -e "$3" 2>/dev/null; then
    printf '%s %s 0\\t%s\\0' "\${1#:}" "$3" "$path" >> "$tmp/restore"
    printf 'skipped: %s\\n' "$path" >&2
  fi
done < "$tmp/raw"
if [ -s "$tmp/restore" ]; then ${GIT} update-index -z --index-info < "$tmp/restore"; fi
${GIT} diff --cached --binary --no-renames --no-ext-diff --no-textconv --no-color "$base"
`;

const MAX_DIFF_BYTES = 512 * 1024 * 1024;

/** List the pristine snapshot of a fresh sandbox (to pass to agentDiff). */
export async function pristineListing(fresh: Sandbox, timeoutMs = 300_000): Promise<Buffer> {
  const r = await fresh.exec(LIST_SCRIPT, {
    uid: 0,
    gid: 0,
    env: SAFE_ENV,
    timeoutMs,
    outputLimitBytes: MAX_DIFF_BYTES,
    cwd: TESTBED_PATH,
  });
  if (r.exitCode !== 0 || r.truncated) {
    throw new SandboxError(
      `could not list the pristine ${TESTBED_PATH}: ` +
        (r.timedOut ? "timed out" : r.stderr.trim() || `exit ${r.exitCode}`),
    );
  }
  // A testbed is a git work tree with files: an empty listing is our step that failed, never a base to diff against
  // (every file of the agent's tree would be "new"). Measured in a fresh sandbox: nothing of the policy's is there.
  if (r.stdoutBytes.length === 0)
    throw new SandboxError(`listing the pristine ${TESTBED_PATH} came back empty (exit 0, no output): not a testbed`);
  return r.stdoutBytes;
}

export interface AgentDiff {
  /** The patch (git's binary format for binary files); "" when nothing changed. */
  patch: string;
  /** The same, byte for byte (text files need not be UTF-8). */
  patchBytes: Buffer;
  /** Paths whose changes were left out (environment files untracked at the start). */
  skipped: string[];
  durationMs: number;
}

/** The agent's changes in `live` relative to the pristine listing. Read-only for the agent's repository. */
export async function agentDiff(live: Sandbox, listing: Buffer, timeoutMs = 300_000): Promise<AgentDiff> {
  // As root inside: whatever user the agent runs as, every file of /testbed is readable.
  const r = await live.exec(DIFF_SCRIPT, {
    uid: 0,
    gid: 0,
    env: SAFE_ENV,
    stdin: listing,
    timeoutMs,
    outputLimitBytes: MAX_DIFF_BYTES,
    cwd: TESTBED_PATH,
  });
  if (r.timedOut)
    throw new SandboxError(`taking the diff of ${TESTBED_PATH} timed out after ${Math.round(timeoutMs / 1000)} s`);
  if (r.exitCode !== 0)
    throw new SandboxError(
      `could not take the diff of ${TESTBED_PATH} in sandbox ${live.id}: ${r.stderr.trim() || `exit ${r.exitCode}`}`,
    );
  if (r.truncated) throw new SandboxError(`the diff of ${TESTBED_PATH} is larger than ${MAX_DIFF_BYTES} bytes`);
  const skipped = r.stderr
    .split("\n")
    .filter((l) => l.startsWith("skipped: "))
    .map((l) => l.slice("skipped: ".length));
  return { patch: r.stdout, patchBytes: r.stdoutBytes, skipped, durationMs: r.durationMs };
}
