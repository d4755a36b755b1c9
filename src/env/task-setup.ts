/**
 * A task's own setup in a fresh sandbox, as shell text (`src/env/workspace.ts` runs it). SWE-smith's bug is applied
 * and becomes the testbed's only commit: the base commit, and every object only it reached (the original version
 * of each file the bug changes, which is the fix), are deleted, so neither `git show`, `git diff HEAD~`, the reflog
 * nor `git cat-file --batch-all-objects` can give the fix back. The testbed's objects are loose for SWE-smith
 * environments (`checkoutTestbed`'s `looseObjects`) and for images' chronological testbeds (`image-history.ts`);
 * one the bug would leave behind in a pack fails the setup. On a branch (an image's), the branch moves to the bug;
 * a shallow testbed's boundary (the base's parents, deleted with it) goes too.
 */

/** System tools only and no user configuration: nothing of the environment decides what runs here. */
export const SETUP_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", GIT_CONFIG_NOSYSTEM: "1", HOME: "/nonexistent" };

/** Reads the bug patch on stdin; runs in /testbed. */
export const BUG_COMMIT_SCRIPT = `set -e
g() { git -c core.hooksPath=/dev/null -c core.fsmonitor=false "$@"; }
old=$(g rev-parse --verify HEAD)
g apply --whitespace=nowarn -
g add -A
tree=$(g write-tree)
export GIT_AUTHOR_NAME="$(g log -1 --format=%an "$old")" GIT_AUTHOR_EMAIL="$(g log -1 --format=%ae "$old")"
export GIT_AUTHOR_DATE="$(g log -1 --format=%aI "$old")" GIT_COMMITTER_DATE="$(g log -1 --format=%cI "$old")"
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
new=$(g log -1 --format=%B "$old" | g commit-tree "$tree")
# Without --path-format (git 2.31+): an image's own git may be older.
objects="$(cd "$(g rev-parse --git-dir)" && pwd -P)/objects"
ids() { g rev-list --objects "$1" | cut -d' ' -f1 | sort; }
ids "$old" > /tmp/.msb-old-objects
ids "$new" | comm -23 /tmp/.msb-old-objects - | while read -r id; do
  f="$objects/\${id%"\${id#??}"}/\${id#??}"
  [ -f "$f" ] || { echo "object $id of the base is packed: it cannot be removed" >&2; exit 1; }
  rm -f "$f"
done
rm -f /tmp/.msb-old-objects
g -c core.logAllRefUpdates=false update-ref HEAD "$new"
rm -rf "$(g rev-parse --git-path logs)" "$(g rev-parse --git-path ORIG_HEAD)" "$(g rev-parse --git-path shallow)"
`;

/** Full history (the old behaviour, gameable): the bug committed on top of the base, by minisandbox (an image's
 * repository may have no identity). */
export const BUG_ON_TOP_SCRIPT =
  "git apply --whitespace=nowarn - && git add -A && " +
  "git -c core.hooksPath=/dev/null -c user.name=minisandbox -c user.email=minisandbox@localhost " +
  "commit -q --no-verify -m 'minisandbox: task bug'";
