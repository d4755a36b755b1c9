/**
 * The shell text that derives a chronologically sound `.git` from an image's `/testbed`, run by the host's git inside
 * a sandbox of its own (`image-history-derive.ts`), and the report it prints. The image's repository is mounted
 * copy-on-write at /src; the new repository is written at /tmp/out/.git, in the sandbox's own memory, and leaves it
 * only through a bounded copy that keeps regular files and directories.
 *
 * What the new repository holds: HEAD's commit (its id unchanged), its tree and blobs, as loose objects (SWE-smith's
 * bug deletes the base's one by one; loose objects dedup across images of a repository); `shallow` naming it; HEAD
 * on the image's branch (else detached) and that branch alone; an index of the image's staged state with the stat
 * data every sandbox on the image sees; the image's `info/exclude` and `info/attributes`; and of the image's config
 * only what decides `git status` and who commits. No other ref, no tag, stash, note, remote, reflog, hook, pack,
 * commit-graph, alternate, parent or unreachable commit. Not even HEAD's parents: an image may have committed its
 * task's bug on top of the fixed code, and a parent's tree would then be the fix.
 */

/** Settings every git call here runs with: nothing of the image's repository runs code, asks or writes a reflog. */
const G = [
  "core.hooksPath=/dev/null",
  "core.fsmonitor=false",
  "safe.directory=*",
  "core.logAllRefUpdates=false",
  "gc.auto=0",
  "maintenance.auto=false",
  "protocol.allow=never",
  "protocol.file.allow=always",
  "core.looseCompression=1",
]
  .map((c) => `-c '${c}'`)
  .join(" ");

/** What the fetch needs: any commit by its id, every object checked (which keeps them as a pack: unpacked after). */
const FETCH = ["uploadpack.allowAnySHA1InWant=true", "transfer.fsckObjects=true", "fetch.writeCommitGraph=false"]
  .map((c) => `-c '${c}'`)
  .join(" ");

/** Config keys of the image's repository that are kept: how its files compare, and who commits. */
export const KEPT_CONFIG = [
  "core.filemode",
  "core.autocrlf",
  "core.eol",
  "core.safecrlf",
  "core.ignorecase",
  "core.precomposeunicode",
  "core.symlinks",
  "user.name",
  "user.email",
] as const;

/** Where the script reads and writes inside its sandbox. */
export const SRC_PATH = "/src";
export const OUT_PATH = "/tmp/out";

/** The environment of the script: no system or user configuration, no replace refs, no grafts, no prompts. */
export const SCRIPT_ENV = {
  PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
  HOME: "/nonexistent",
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_NO_REPLACE_OBJECTS: "1",
  GIT_GRAFT_FILE: "/dev/null",
  GIT_TERMINAL_PROMPT: "0",
  GIT_AUTHOR_NAME: "minisandbox",
  GIT_AUTHOR_EMAIL: "minisandbox@localhost",
  GIT_COMMITTER_NAME: "minisandbox",
  GIT_COMMITTER_EMAIL: "minisandbox@localhost",
  LC_ALL: "C",
};

/** Exit status of a refusal (the image's repository is the cause; its reason is stderr's last line). */
export const REFUSED = 3;

export const DERIVE_SCRIPT = `set -eu
fail() { echo "$*" >&2; exit ${REFUSED}; }
g() { git ${G} "$@"; }
n() { g --git-dir=${OUT_PATH}/.git --work-tree=${SRC_PATH} "$@"; }
s() { g -C ${SRC_PATH} "$@"; }
head=$(s rev-parse --verify --quiet 'HEAD^{commit}') || fail "its HEAD names no commit"
branch=$(s symbolic-ref --quiet HEAD) || branch=
case $branch in ""|refs/heads/*) ;; *) fail "its HEAD is $branch, not a branch" ;; esac
[ -z "$branch" ] || g check-ref-format "$branch" || fail "its branch $branch is not a valid name"
format=$(s rev-parse --show-object-format)
# The staged state, as a commit of its own (fetched with HEAD, then deleted: the index keeps its tree).
staged=
if [ -f ${SRC_PATH}/.git/index ]; then
  tree=$(s write-tree 2>/tmp/err) || fail "its index is no tree (an unfinished merge?): $(tail -n 1 /tmp/err)"
  [ "$tree" = "$(s rev-parse "$head^{tree}")" ] || staged=$(echo staged | s commit-tree "$tree")
fi
g init -q --template= --object-format="$format" ${OUT_PATH}
n ${FETCH} fetch -q --no-tags --no-write-fetch-head --no-recurse-submodules --depth 1 \\
  "file://${SRC_PATH}" "$head" $staged || fail "its HEAD could not be fetched"
for p in ${OUT_PATH}/.git/objects/pack/*.pack; do
  [ -e "$p" ] || continue
  mv "$p" /tmp/fetched.pack && rm -f "\${p%.pack}".*
  n unpack-objects -q < /tmp/fetched.pack && rm -f /tmp/fetched.pack
done
if [ -n "$branch" ]; then n update-ref "$branch" "$head" && n symbolic-ref HEAD "$branch"
else n update-ref --no-deref HEAD "$head"; fi
n read-tree "\${staged:-$head}"
if [ -n "$staged" ]; then rm -f "${OUT_PATH}/.git/objects/\${staged%"\${staged#??}"}/\${staged#??}"; fi
# The boundary is HEAD (the fetch names every commit it sent without its parents, the staged one too).
if [ -f ${OUT_PATH}/.git/shallow ]; then
  grep -x "$head" ${OUT_PATH}/.git/shallow > /tmp/shallow || true
  mv /tmp/shallow ${OUT_PATH}/.git/shallow
  [ -s ${OUT_PATH}/.git/shallow ] || rm ${OUT_PATH}/.git/shallow
fi
# HEAD alone: nothing a graft, a replace ref or a lying repository could have added.
n cat-file --batch-all-objects --batch-check='%(objecttype) %(objectname)' | sed -n 's/^commit //p' > /tmp/have
[ "$(cat /tmp/have)" = "$head" ] || fail "commits other than HEAD arrived"
echo "head $head"
echo "branch $branch"
echo "format $format"
for k in ${KEPT_CONFIG.join(" ")}; do
  v=$(s config --local --get "$k" 2>/dev/null) || continue
  case $v in *"
"*) continue ;; esac
  n config "$k" "$v"
  printf 'config %s %s\\n' "$k" "$v"
done
n config core.checkStat minimal
n config core.trustctime false
mkdir -p ${OUT_PATH}/.git/info
for f in exclude attributes; do
  if [ -f "${SRC_PATH}/.git/info/$f" ]; then head -c 1048576 "${SRC_PATH}/.git/info/$f" > "${OUT_PATH}/.git/info/$f"; fi
done
# Stat data as every sandbox on the image sees its files: no sandbox re-hashes the tree on its first git status.
n update-index -q --refresh >/dev/null || true
`;

/** What the script reports on stdout. */
export interface DeriveReport {
  head: string;
  /** `refs/heads/<name>`, or undefined: HEAD detached. */
  branch?: string;
  format: "sha1" | "sha256";
  /** The kept config values (KEPT_CONFIG keys only). */
  config: Record<string, string>;
}
