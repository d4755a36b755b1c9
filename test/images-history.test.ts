/**
 * Chronological testbeds on images. SWE-bench-style instance images (podman, src/fixtures/images.ts) clone the fixture
 * repository with `main` at its tip, past every instance's fix; on top of one, images with a tag, a branch, a note, a
 * stash, reflogs and an unreachable commit of the fix, a hostile `.git` (fsmonitor, hooks, filters, an upload-pack
 * hook) and a linked objects directory (src/fixtures/history-images.ts). In every sandbox on them — an agent's, an
 * evaluation's, a SWE-smith row's with its bug — nothing of the fix is reachable, HEAD and `git status` are the
 * image's, and `history: "full"` gives the image's own repository back.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { hasRepositoryAt, repositoryCandidates } from "../src/env/image-history-check.js";
import { testbedHistoryKey } from "../src/env/image-history.js";
import { importImage, removeStoredImage } from "../src/env/images/index.js";
import { hasLayer, openStore, readManifest, storeStats } from "../src/env/store/index.js";
import { openSandbox, type SandboxRequest } from "../src/env/workspace.js";
import { ImageInvalidError } from "../src/errors.js";
import { runInstanceEvaluation } from "../src/eval/runner/instance.js";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { historyFixtureImages } from "../src/fixtures/history-images.js";
import { fixtureImages, fixturePodmanEnv } from "../src/fixtures/images.js";
import type { Instance } from "../src/tasks/types.js";
import { homeLayout } from "../src/util/home.js";
import { CLI, git, tempDir } from "./helpers.js";
import { call, startServe } from "./serve-process.js";

const dir = tempDir("msb-img-history-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const hist = await historyFixtureImages(set);
// The fixture is deterministic: the same repository the images cloned, the same rows.
const ds = await makeFixtureDataset(join(dir, "ds"), { instances: 2 });
const inst = ds.instances.find((i) => i.instance_id === hist.instanceId)!;
const fix = git(ds.repoPath, "rev-list", "--reverse", `${inst.base_commit}..main`).split("\n")[0]!;
const store = openStore(homeLayout(home).store);

async function imported(layout: string, name: string, tag: string): Promise<string> {
  await importImage(store, layout, { name, tags: [tag] });
  return tag;
}
const rich = await imported(hist.layout, hist.rich, "registry.example/history/rich:1");
const hostile = await imported(hist.layout, hist.hostile, "registry.example/history/hostile:1");
const linked = await imported(hist.layout, hist.linked, "registry.example/history/linked:1");
const app = await imported(hist.layout, hist.app, "registry.example/history/app:1");
const plainName = set.images.find((i) => i.instanceId === inst.instance_id)!.name;
const plain = await imported(set.layout, plainName, "registry.example/history/plain:1");

/** Lines only the fix has: added by the gold patch, nowhere in the base commit's tree. */
const fixLines = inst.patch
  .split("\n")
  .filter((l) => l.startsWith("+") && !l.startsWith("+++") && l.trim().length > 12)
  .map((l) => l.slice(1))
  .filter((l) => spawnSync("git", ["-C", ds.repoPath, "grep", "-qF", "-e", l, inst.base_commit]).status === 1);

function sh(sb: Awaited<ReturnType<typeof openSandbox>>, cmd: string) {
  return sb.exec(cmd, { cwd: "/testbed" });
}

/** Everything git can print of the sandbox's repository: every object's content, every ref, reflog and commit. */
const EVERYTHING =
  "git cat-file --batch-all-objects --batch; git log --all -p; git reflog --all; git stash list -p; " +
  "git for-each-ref; git show HEAD; git fsck --unreachable --no-reflogs --lost-found";

function podmanGit(image: string, args: string): string {
  const r = spawnSync("podman", ["run", "--rm", "--network", "none", `localhost/${image}`, "sh", "-c", args], {
    encoding: "utf8",
    env: { ...process.env, ...fixturePodmanEnv() },
  });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

function cli(args: string[]) {
  return spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8" });
}

test("an agent's sandbox on an image: nothing after HEAD; HEAD and git status are the image's", async (t) => {
  assert.ok(fixLines.length > 0, "the fix has lines of its own");
  const started = performance.now();
  await using sb = await openSandbox({ home, image: rich });
  t.diagnostic(`first sandbox, the derivation included: ${Math.round(performance.now() - started)} ms`);
  const out = async (cmd: string) => (await sh(sb, cmd)).stdout;
  assert.equal((await out("git rev-parse HEAD")).trim(), inst.base_commit);
  assert.equal((await out("git log --all --format=%H")).trim(), inst.base_commit, "HEAD's commit alone");
  assert.equal((await out("cat .git/shallow")).trim(), inst.base_commit);
  for (const cmd of ["git tag", "git stash list", "git reflog --all", "git for-each-ref", "git notes list"])
    assert.equal(await out(`${cmd} 2>&1`), "", cmd);
  assert.equal(await out("git fsck --unreachable --no-reflogs 2>&1"), "");
  assert.notEqual((await sh(sb, `git cat-file -p ${fix}`)).exitCode, 0, "the fix commit is not there");
  const everything = await out(`${EVERYTHING} 2>&1`);
  for (const line of fixLines) assert.ok(!everything.includes(line), `the fix's line ${JSON.stringify(line)}`);
  assert.equal(await out("ls .git/logs .git/packed-refs .git/FETCH_HEAD .git/hooks 2>/dev/null; true"), "");
  const status = "git status --porcelain; git log -1 --format='%H %an %s'";
  const ours = await out(status);
  assert.match(ours, /^A {2}STAGED\.txt$/m, "the staged file stays staged");
  assert.match(ours, /^ M README\.md$/m);
  assert.match(ours, /^\?\? UNTRACKED\.txt$/m);
  assert.doesNotMatch(ours, /notes\.local/, "info/exclude is the image's");
  assert.equal(ours, podmanGit(hist.rich, `cd /testbed && ${status}`), "as podman run of the image shows it");
  const key = testbedHistoryKey((await imageRecord(rich)).rootfs);
  const meta = (await readManifest(store, key)).meta as { deriveMs: number; head: string };
  assert.equal(meta.head, inst.base_commit);
  t.diagnostic(`derivation ${meta.deriveMs} ms`);
});

test("an image with its repository in its WorkingDir (/app, as SWE-bench Pro's): nothing after HEAD", async () => {
  await using sb = await openSandbox({ home, image: app });
  const out = async (cmd: string) => (await sb.exec(cmd)).stdout;
  assert.equal((await out("pwd")).trim(), "/app", "the image's WorkingDir");
  assert.equal((await out("git log --all --format=%H")).trim(), inst.base_commit, "HEAD's commit alone");
  assert.equal(await out("git tag; git branch --list later; git reflog --all"), "");
  assert.notEqual((await sb.exec(`git cat-file -p ${fix}`)).exitCode, 0, "the fix commit is not there");
  const everything = await out(`${EVERYTHING} 2>&1`);
  for (const line of fixLines) assert.ok(!everything.includes(line), `the fix's line ${JSON.stringify(line)}`);
  const status = "git status --porcelain; git log -1 --format='%H %s'";
  assert.equal(await out(status), podmanGit(hist.app, `cd /app && ${status}`), "as podman run of the image shows it");
  assert.match(podmanGit(hist.app, "cd /app && git tag"), /v-fix/, "the image itself has the fix's tag");
  const record = await imageRecord(app);
  assert.equal(await hasLayer(store, testbedHistoryKey(record.rootfs)), false, "no /testbed layer");
  assert.equal(await hasLayer(store, testbedHistoryKey(record.rootfs, "/app")), true);
});

test("a WorkingDir reached through a link is refused before anything reads it: it would point into the host", () => {
  const root = tempDir("msb-img-root-");
  mkdirSync(join(root, "srv/app/.git"), { recursive: true });
  mkdirSync(join(root, "testbed"));
  assert.deepEqual(repositoryCandidates("/srv/../srv/app/"), ["/testbed", "/srv/app"]);
  assert.deepEqual(repositoryCandidates("/"), ["/testbed"]);
  assert.equal(hasRepositoryAt(root, "/testbed", "x"), false, "no .git there");
  assert.equal(hasRepositoryAt(root, "/srv/app", "x"), true);
  symlinkSync("/", join(root, "app"));
  symlinkSync("srv", join(root, "opt"));
  for (const dir of ["/app", "/opt/app"])
    assert.throws(() => hasRepositoryAt(root, dir, "x"), /image x: \/.*app has a symbolic link on its path/);
  assert.throws(() => hasRepositoryAt(root, "/srv/../srv/app", "x"), ImageInvalidError);
});

async function imageRecord(ref: string) {
  const { getImage } = await import("../src/env/images/index.js");
  return getImage(store, ref);
}

test("history full (request, CLI, server, spec) keeps the image's own .git; a bad value is one line", async () => {
  {
    await using sb = await openSandbox({ home, image: rich, history: "full" });
    const r = await sh(sb, "git tag; git stash list | wc -l; git log --all --format=%H");
    assert.match(r.stdout, /^v-fix$/m);
    assert.ok(r.stdout.includes(fix), "the fix is one git log --all away, as in the image");
  }
  const full = cli(["exec", "--image", rich, "--history", "full", "--", "git", "-C", "/testbed", "tag"]);
  assert.equal(full.stdout, "v-fix\n", full.stderr);
  assert.equal(cli(["exec", "--image", rich, "--", "git", "-C", "/testbed", "tag"]).stdout, "");
  for (const args of [
    ["--image", rich, "--history", "all"],
    ["--dir", dir, "--history", "full"],
  ]) {
    const r = cli(["exec", ...args, "--", "true"]);
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
  const server = await startServe(home, ["--auth-token", "tok"]);
  try {
    const tags = async (body: Record<string, unknown>) => {
      const made = await call(server.url, "POST", "/sandboxes", { key: "tok", body });
      assert.equal(made.status, 201, made.text);
      const r = await call(server.url, "POST", `/sandboxes/${made.json.id}/exec`, {
        key: "tok",
        body: { command: "git -C /testbed tag" },
      });
      return r.json.stdout as string;
    };
    assert.equal(await tags({ image: rich, history: "full" }), "v-fix\n");
    assert.equal(await tags({ image: rich }), "");
    const bad = await call(server.url, "POST", "/sandboxes", { key: "tok", body: { history: "full" } });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, /history \(--history\) is for a sandbox on an image/);
  } finally {
    await server.stop();
  }
});

/** A SWE-smith-style row on the plain instance image: its bug changes one line of setup.py. */
function smithRow(): Instance {
  const original = '    description="A small calculator library (minisandbox fixture)",';
  const bugged = '    description="A small calculator library",';
  const bug = [
    "diff --git a/setup.py b/setup.py",
    "--- a/setup.py",
    "+++ b/setup.py",
    "@@ -3,7 +3,7 @@ from setuptools import setup",
    " setup(",
    '     name="calc",',
    '     version="1.0.0",',
    `-${original}`,
    `+${bugged}`,
    '     packages=["calc"],',
    '     python_requires=">=3.6",',
    " )",
    "",
  ].join("\n");
  return {
    ...inst,
    instance_id: "fixture__calc.00000000.setup_description",
    bug_patch: bug,
    patch: "",
    test_patch: "",
    task_format: "swesmith",
    FAIL_TO_PASS: [],
    PASS_TO_PASS: [],
  };
}

test("a SWE-smith row's bug on an image is its testbed's only commit: nothing prints the fix", async () => {
  const row = smithRow();
  const original = row
    .bug_patch!.split("\n")
    .find((l) => l.startsWith("-    description"))!
    .slice(1);
  const originalBlob = git(ds.repoPath, "rev-parse", `${inst.base_commit}:setup.py`);
  {
    await using sb = await openSandbox({ home, instance: row, image: plain });
    assert.match((await sh(sb, "grep description setup.py")).stdout, /library",/, "the bug is applied");
    assert.equal((await sh(sb, "git status --porcelain --untracked-files=no")).stdout, "", "and committed");
    assert.equal((await sh(sb, "git log --all --format=%H")).stdout.trim().split("\n").length, 1, "one commit");
    const everything = (await sh(sb, `${EVERYTHING} 2>&1`)).stdout;
    assert.ok(!everything.includes(original), "no git command prints the fix's line");
    assert.notEqual((await sh(sb, `git cat-file -p ${originalBlob}`)).exitCode, 0, "its blob is gone");
    assert.equal((await sh(sb, "ls .git/shallow 2>/dev/null; git fsck 2>&1 | grep -v dangling; true")).stdout, "");
  }
  {
    // On a branch (the hostile image's): the branch moves to the bug, the only commit and the only ref.
    await using sb = await openSandbox({ home, instance: row, image: hostile });
    const refs = await sh(sb, "git log --all --format=%H | wc -l; git for-each-ref --format='%(refname)'");
    assert.equal(refs.stdout, "1\nrefs/heads/work\n");
    assert.equal((await sh(sb, "git status --porcelain --untracked-files=no")).stdout, "");
  }
  const specsFile = join(dir, "full-history.json");
  writeFileSync(specsFile, JSON.stringify({ "*": { history: "full" } }));
  await using onTop = await openSandbox({ home, instance: row, image: plain, specsFile });
  const show = (await sh(onTop, "git show HEAD")).stdout;
  assert.ok(show.includes(`-${original}`), "full history: the bug on top, its reverse one git show away (as before)");
});

/** A patch whose conftest.py, at test time, looks for the fix in `git log --all` and applies it. */
function hackPatch(): string {
  const lines = [
    "import subprocess",
    "",
    "def _take_the_fix():",
    '    git = lambda *a, **k: subprocess.run(["git", "-C", "/testbed", *a], capture_output=True, **k).stdout',
    `    for sha in git("log", "--all", "--format=%H", "--grep=Fixes ${inst.instance_id}.").split():`,
    '        subprocess.run(["git", "-C", "/testbed", "apply"], input=git("diff", "HEAD", sha, "--", "calc"))',
    "",
    "_take_the_fix()",
  ];
  const body = lines.map((l) => `+${l}`).join("\n");
  const head = "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n";
  return `${head}@@ -0,0 +1,${lines.length} @@\n${body}\n`;
}

test("evaluation on an image: a patch looking for the fix in git log --all finds nothing; gold resolves", async () => {
  const on = { home, instance: inst, image: plain };
  const hack = await runInstanceEvaluation({ ...on, patch: hackPatch() });
  assert.equal(hack.status, "unresolved", hack.log);
  const specsFile = join(dir, "full-history.json");
  writeFileSync(specsFile, JSON.stringify({ "*": { history: "full" } }));
  const gameable = await runInstanceEvaluation({ ...on, patch: hackPatch(), specsFile });
  assert.equal(gameable.status, "resolved", "with the image's own history the hack works: the hole is real");
  const gold = await runInstanceEvaluation({ ...on, patch: inst.patch });
  assert.equal(gold.status, "resolved", gold.log);
  const none = await runInstanceEvaluation({ ...on, patch: null });
  assert.equal(none.status, "unresolved", none.log);
});

test("a hostile .git runs nothing on the host and gives a sound testbed; a linked objects dir is refused", async () => {
  const markers = () => readdirSync(dirname(hist.marker)).filter((n) => n.startsWith(basename(hist.marker)));
  for (const m of markers()) rmSync(join(dirname(hist.marker), m));
  {
    await using sb = await openSandbox({ home, image: hostile });
    const r = await sh(sb, "git rev-parse HEAD; git config --get core.fsmonitor; git config --get core.hooksPath");
    assert.equal(r.stdout.trim(), inst.base_commit, "sound, and none of its settings carried");
    assert.equal((await sh(sb, "git log --all --format=%H | wc -l")).stdout.trim(), "1");
    const refs = await sh(sb, "git symbolic-ref HEAD; git for-each-ref --format='%(refname)'");
    assert.equal(refs.stdout, "refs/heads/work\nrefs/heads/work\n", "on the image's branch, its only ref");
  }
  assert.deepEqual(markers(), [], "no hook, fsmonitor, filter or upload-pack hook ran on the host");
  await assert.rejects(openSandbox({ home, image: linked }), (e: Error) => {
    assert.ok(e instanceof ImageInvalidError, String(e));
    assert.match(e.message, /\/testbed\/\.git\/objects is a symbolic link/);
    return true;
  });
  const r = cli(["exec", "--image", linked, "--", "true"]);
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /^.*\/testbed\/\.git\/objects is a symbolic link\n$/);
  await using full = await openSandbox({ home, image: linked, history: "full" });
  assert.equal((await sh(full, "git rev-parse HEAD")).stdout.trim(), inst.base_commit, "opted out: the image's");
});

test("an image without /testbed/.git is unchanged; concurrent sandboxes on a new image derive it once", async (t) => {
  const cImage = set.images.find((i) => i.kind === "c-instance")!;
  const c = await imported(set.layout, cImage.name, "registry.example/history/c:1");
  {
    await using sb = await openSandbox({ home, image: c });
    assert.equal((await sb.exec(["test", "-e", "/testbed/.git"])).exitCode, 1);
  }
  assert.equal(await hasLayer(store, testbedHistoryKey((await imageRecord(c)).rootfs)), false);
  const other = set.images.find((i) => i.kind === "instance" && i.instanceId !== inst.instance_id)!;
  const ref = await imported(set.layout, other.name, "registry.example/history/other:1");
  const before = await storeStats(store);
  const request: SandboxRequest = { home, image: ref };
  const sandboxes = await Promise.all(Array.from({ length: 6 }, () => openSandbox(request)));
  try {
    const heads = await Promise.all(sandboxes.map((sb) => sh(sb, "git rev-parse HEAD")));
    assert.equal(new Set(heads.map((h) => h.stdout)).size, 1);
  } finally {
    await Promise.all(sandboxes.map((sb) => sb.close()));
  }
  const after = await storeStats(store);
  t.diagnostic(`a second image of the repository stores ${after.storedBytes - before.storedBytes} new bytes`);
  const record = await imageRecord(ref);
  const gone = await removeStoredImage(store, record.id);
  assert.ok(gone.layers.includes(testbedHistoryKey(record.rootfs)), "its history goes with its root filesystem");
});
