/**
 * Chronologically sound testbeds on real git repositories: a source with a future fix commit, tags, branches, a
 * stash, notes and reflogs gives a testbed where none of it exists (no ref, no object, nothing unreachable), while
 * the base commit's ancestry works; the full-history option keeps the old behaviour. SWE-smith's bug becomes the
 * testbed's only commit: the fix's blobs are gone from the sandbox, and the gold patch still resolves.
 */
process.env.PIP_RETRIES ??= "0";

import { before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { commitFilesAt, git, tempDir, tempHome } from "./helpers.js";
import { checkoutTestbed } from "../src/env/repos.js";
import { envFor } from "../src/env/environments.js";
import { historyForInstance, specKey } from "../src/env/spec.js";
import { prepareInstances } from "../src/env/prepare.js";
import { makeSweSmithDataset } from "../src/fixtures/generate.js";
import { loadDataset } from "../src/tasks/index.js";
import { openSandbox } from "../src/env/workspace.js";
import { evaluate } from "../src/eval/index.js";

const work = tempDir("msb-history-");
function commitAt(dir: string, file: string, text: string, date: string, message: string): string {
  return commitFilesAt(dir, { [file]: text }, date, message);
}

/** A repository whose history goes on after `base`: the fix, a tag, a branch, a stash, a note, reflogs. */
function sourceRepo(): { dir: string; base: string; fix: string; fixBlob: string; old: string } {
  const dir = join(work, "source");
  mkdirSync(dir);
  git(dir, "init", "-q", "-b", "main");
  const old = commitAt(dir, "calc.py", "def add(a, b):\n    return a - b\n", "2021-03-01T10:00:00Z", "first");
  commitAt(dir, "README", "calc\n", "2022-06-01T10:00:00Z", "readme");
  const base = commitAt(dir, "notes.txt", "v1\n", "2023-02-01T10:00:00Z", "base");
  const fixed = "def add(a, b):\n    return a + b  # the fix\n";
  const fix = commitAt(dir, "calc.py", fixed, "2023-05-01T10:00:00Z", "fix add");
  const fixBlob = git(dir, "rev-parse", `${fix}:calc.py`);
  git(dir, "tag", "-a", "v2", "-m", "release with the fix", fix);
  git(dir, "branch", "later", fix);
  git(dir, "-c", "user.name=t", "-c", "user.email=t@t", "notes", "add", "-m", "fixed upstream in #1", base);
  writeFileSync(join(dir, "calc.py"), "stashed work\n");
  git(dir, "-c", "user.name=t", "-c", "user.email=t@t", "stash", "-q");
  git(dir, "update-ref", "refs/remotes/origin/main", fix);
  return { dir, base, fix, fixBlob, old };
}

describe("chronological testbeds", { concurrency: 2 }, () => {
  let src: ReturnType<typeof sourceRepo>;
  before(() => {
    src = sourceRepo();
  });

  it("nothing after the base commit: no ref, reflog, tag, stash, note, remote or object; ancestry works", async () => {
    const dest = join(work, "chrono");
    await checkoutTestbed(src.dir, src.base, dest);
    assert.equal(git(dest, "rev-parse", "HEAD"), src.base);
    assert.equal(git(dest, "log", "--all", "--format=%H").split("\n").length, 3, "only the base and its ancestors");
    assert.doesNotMatch(git(dest, "log", "--all", "--oneline"), /fix add/);
    assert.equal(git(dest, "for-each-ref"), "", "no branch, tag, note, stash or remote-tracking ref");
    assert.equal(git(dest, "reflog", "--all"), "");
    for (const f of ["logs", "packed-refs", "FETCH_HEAD", "ORIG_HEAD", "objects/info/alternates"])
      assert.equal(existsSync(join(dest, ".git", f)), false, `.git/${f}`);
    assert.equal(existsSync(join(dest, ".git", "objects", "info", "commit-graph")), false);
    const all = git(dest, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split("\n");
    assert.ok(!all.includes(src.fix) && !all.includes(src.fixBlob), "neither the fix commit nor its blob");
    const reachable = git(dest, "rev-list", "--objects", "--all").split("\n").length;
    assert.equal(all.length, reachable, "every object is reachable from HEAD");
    assert.equal(git(dest, "fsck", "--unreachable", "--no-reflogs", "--lost-found"), "");
    assert.match(git(dest, "blame", "calc.py"), /^[\^0-9a-f]+ .*return a - b/m);
    assert.equal(git(dest, "status", "--porcelain"), "");
    // Packs cut at calendar years: 2021, 2022, and the rest.
    assert.equal(git(dest, "count-objects", "-v").match(/packs: (\d+)/)?.[1], "3");
  });

  it("two commits of one repository share their year packs byte for byte", async () => {
    const a = join(work, "share-a");
    const b = join(work, "share-b");
    await checkoutTestbed(src.dir, src.base, a);
    await checkoutTestbed(src.dir, `${src.base}~1`, b);
    const packs = (d: string) => execFileSync("ls", [join(d, ".git", "objects", "pack")], { encoding: "utf8" });
    const shared = packs(a)
      .split("\n")
      .filter((p) => p && packs(b).includes(p));
    assert.ok(shared.length >= 2, `the 2021 pack and its index are shared: ${shared.join(", ")}`);
  });

  it("full history keeps the old behaviour (the fix is one git log --all away); loose objects on request", async () => {
    const full = join(work, "full");
    await checkoutTestbed(src.dir, src.base, full, { history: "full" });
    assert.match(git(full, "log", "--all", "--oneline"), /fix add/);
    const loose = join(work, "loose");
    await checkoutTestbed(src.dir, src.base, loose, { looseObjects: true });
    assert.equal(git(loose, "count-objects", "-v").match(/packs: (\d+)/)?.[1], "0");
    assert.equal(git(loose, "fsck", "--unreachable", "--no-reflogs"), "");
  });

  it("the spec key changes with the history policy; full-history keys are the old ones", () => {
    const spec = {
      repo: "o/n",
      commit: "abc",
      python: "3.11",
      pip_packages: [],
      pre_install: [],
      eval_commands: [],
      test_cmd: "",
      env: {},
    };
    assert.notEqual(specKey(spec), specKey({ ...spec, history: "full" }));
    const row = { instance_id: "o__n-1", repo: "o/n", base_commit: "abc", spec: { python: "3.11" } };
    const inst = row as unknown as Parameters<typeof envFor>[0];
    assert.equal(envFor(inst, {}).spec.history, undefined, "chronological by default");
    // One specs file for every command: "*" holds the policy for every instance, anything more specific wins.
    const specsFile = join(work, "full-history.json");
    writeFileSync(
      specsFile,
      JSON.stringify({ "*": { history: "full" }, "o/m": { "*": { history: "chronological" } } }),
    );
    const full = envFor(inst, { specsFile });
    assert.equal(full.spec.history, "full");
    assert.equal(full.key, specKey({ ...envFor(inst, {}).spec, history: "full" }));
    const other = { ...row, instance_id: "o__m-1", repo: "o/m" } as unknown as Parameters<typeof envFor>[0];
    assert.equal(envFor(other, { specsFile }).spec.history, undefined, "the repository's entry wins over *");
    writeFileSync(specsFile, JSON.stringify({ "*": { history: "all" } }));
    assert.throws(() => envFor(inst, { specsFile }), /history.*"chronological" or "full"/);
    const unknown = { ...row, repo: "x/y", version: "1.0", spec: undefined } as unknown as Parameters<typeof envFor>[0];
    writeFileSync(specsFile, JSON.stringify({ "*": { history: "full" } }));
    assert.throws(
      () => envFor(unknown, { specsFile }),
      /no environment spec for x\/y \(instance o__n-1\)/,
      "* alone is no spec",
    );
    // A row on an image needs no whole spec: its testbed's history comes from the same sources all the same.
    assert.equal(historyForInstance(unknown, { specsFile }), "full");
    assert.equal(historyForInstance(unknown, {}), "chronological");
    assert.equal(
      historyForInstance({ ...unknown, spec: { history: "chronological" } }, { specsFile }),
      "chronological",
    );
  });
});

describe("SWE-smith: the bug is the testbed's only commit", () => {
  it("no git command gives the fix back; the gold patch still resolves", async () => {
    const home = tempHome("msb-history-smith-");
    const sm = await makeSweSmithDataset(join(work, "smith"), { tasks: 1 });
    const [task] = await loadDataset(sm.datasetPath);
    const built = await prepareInstances([task!], { home, reposDir: sm.reposDir, workers: 1 });
    assert.deepEqual(
      built.filter((r) => r.status === "failed"),
      [],
    );
    // The bug's preimage (the fix) as blobs: every file the bug patch changes, as the snapshot has it.
    const changed = [...task!.bug_patch!.matchAll(/^diff --git a\/(\S+) /gm)].map((m) => m[1]!);
    const fixBlobs = changed.map((p) => git(sm.snapshotPath, "rev-parse", `${sm.snapshotCommit}:${p}`));
    await using sb = await openSandbox({ home, instance: task! });
    const sh = async (cmd: string) => (await sb.exec(cmd, { cwd: "/testbed" })).stdout;
    assert.equal((await sh("git log --all --format=%H")).trim().split("\n").length, 1, "one commit");
    assert.equal(await sh("git status --porcelain"), "", "the bug is committed");
    assert.match(await sh("git diff HEAD~ 2>&1; git show --stat HEAD~ 2>&1"), /unknown revision|bad revision/);
    const objects = await sh("git cat-file --batch-all-objects --batch-check='%(objectname)'");
    for (const blob of fixBlobs) assert.ok(!objects.includes(blob), `the fix's blob ${blob} is not in the sandbox`);
    assert.equal(await sh("git fsck --unreachable --no-reflogs 2>&1"), "");
    assert.equal(await sh("ls .git/logs 2>/dev/null; git reflog"), "");
    const gold = await evaluate({ instance: task!, patch: task!.patch }, { home });
    assert.equal(gold.status, "FULL", JSON.stringify(gold.error ?? gold.grade));
  });
});
