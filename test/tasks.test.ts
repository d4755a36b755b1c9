import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync, chmodSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { parquetWriteFile, type ParquetWriteOptions } from "hyparquet-writer";
import { runOk } from "../src/util/run.js";
import { loadDataset, normalizeInstance, reversePatch, type Instance } from "../src/tasks/index.js";

type SchemaElement = NonNullable<ParquetWriteOptions["schema"]>[number];

let tmp: string;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), "msb-tasks-"));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

const PATCH = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n";

/** Rows as published on HuggingFace (SWE-bench): test lists are JSON strings; plus fields other exports add. */
function swebenchRows(): Record<string, unknown>[] {
  return [1, 2, 3].map((n) => ({
    repo: "sympy/sympy",
    instance_id: `sympy__sympy-${1000 + n}`,
    base_commit: `${n}`.repeat(40),
    patch: PATCH,
    test_patch: "",
    problem_statement: `issue ${n}`,
    hints_text: "",
    created_at: "2020-01-01T00:00:00Z",
    version: "1.1",
    FAIL_TO_PASS: JSON.stringify([`test_a${n}`]),
    PASS_TO_PASS: JSON.stringify([]),
    environment_setup_commit: "e".repeat(40),
    log_parser: "sympy",
    meta: { difficulty: "<15 min fix", tags: ["x"] },
  }));
}

function write(name: string, content: string): string {
  const p = join(tmp, name);
  writeFileSync(p, content);
  return p;
}

function expectNormalized(inst: Instance, raw: Record<string, unknown>) {
  assert.equal(inst.instance_id, raw.instance_id);
  assert.deepEqual(inst.FAIL_TO_PASS, JSON.parse(raw.FAIL_TO_PASS as string));
  assert.deepEqual(inst.PASS_TO_PASS, []);
  assert.equal(inst.task_format, "swebench");
  assert.equal(inst.log_parser, "sympy", "unknown scalar field kept");
  assert.deepEqual(inst.meta, raw.meta, "unknown object field kept");
}

test("JSON list: string-encoded test lists become lists, unknown fields are kept", async () => {
  const rows = swebenchRows();
  const insts = await loadDataset(write("d.json", JSON.stringify(rows, null, 2)));
  assert.equal(insts.length, 3);
  for (const [i, inst] of insts.entries()) expectNormalized(inst, rows[i]!);
});

test("JSONL: lists or strings, blank lines and a BOM are fine", async () => {
  const rows = swebenchRows();
  rows[1]!.FAIL_TO_PASS = ["test_a2"]; // already a list
  const text = `\uFEFF${rows.map((r) => JSON.stringify(r)).join("\n\n")}\n`;
  const insts = await loadDataset(write("d.jsonl", text));
  assert.deepEqual(
    insts.map((i) => i.FAIL_TO_PASS),
    [["test_a1"], ["test_a2"], ["test_a3"]],
  );
  // A .json name holding JSONL is sniffed by content.
  assert.equal((await loadDataset(write("jsonl-named.json", text))).length, 3);
});

test("parquet (HF SWE-bench layout: string columns) reads like the JSON export", async () => {
  const rows = swebenchRows();
  const cols = Object.keys(rows[0]!).filter((k) => k !== "meta");
  const file = join(tmp, "d.parquet");
  parquetWriteFile({
    filename: file,
    columnData: [
      ...cols.map((name) => ({ name, data: rows.map((r) => r[name] as string), type: "STRING" as const })),
      { name: "meta", data: rows.map((r) => JSON.stringify(r.meta)), type: "STRING" as const },
      { name: "spec", data: rows.map(() => JSON.stringify({ python: "3.9" })), type: "STRING" as const },
    ],
  });
  const insts = await loadDataset(file);
  assert.equal(insts.length, 3);
  insts.forEach((inst, i) => {
    assert.deepEqual(inst.FAIL_TO_PASS, JSON.parse(rows[i]!.FAIL_TO_PASS as string));
    assert.equal(inst.version, "1.1");
    assert.equal(inst.meta, JSON.stringify(rows[i]!.meta), "unknown columns kept as stored");
    assert.deepEqual(inst.spec, { python: "3.9" }, "a JSON-string spec column is parsed");
  });
});

/** A pyarrow-style LIST<string> column, as HF writes SWE-smith's FAIL_TO_PASS / PASS_TO_PASS. */
function listSchema(name: string): SchemaElement[] {
  return [
    { name, repetition_type: "OPTIONAL", converted_type: "LIST", num_children: 1 },
    { name: "list", repetition_type: "REPEATED", num_children: 1 },
    { name: "element", type: "BYTE_ARRAY", converted_type: "UTF8", repetition_type: "OPTIONAL" },
  ];
}

const strCol = (name: string): SchemaElement => ({
  name,
  type: "BYTE_ARRAY",
  converted_type: "UTF8",
  repetition_type: "OPTIONAL",
});

function sweSmithRows(): Record<string, unknown>[] {
  return ["combine_file__09vlzwgc", "lm_rewrite__q9ve64pd"].map((bug) => ({
    instance_id: `oauthlib__oauthlib.1fd52536.${bug}`,
    patch: PATCH,
    FAIL_TO_PASS: ["tests/test_a.py::test_x"],
    PASS_TO_PASS: ["tests/test_a.py::test_y", "tests/test_b.py::test_z"],
    image_name: "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
    repo: "swesmith/oauthlib__oauthlib.1fd52536",
    problem_statement: "it broke",
  }));
}

test("parquet (HF SWE-smith layout: LIST columns, GZIP pages) is normalized to SWE-smith instances", async () => {
  const rows = sweSmithRows();
  const file = join(tmp, "smith.parquet");
  const scalar = ["instance_id", "patch", "image_name", "repo", "problem_statement"];
  parquetWriteFile({
    filename: file,
    codec: "GZIP",
    compressors: { GZIP: (input: Uint8Array) => new Uint8Array(gzipSync(input)) },
    schema: [
      { name: "root", num_children: scalar.length + 2 },
      ...scalar.map(strCol),
      ...listSchema("FAIL_TO_PASS"),
      ...listSchema("PASS_TO_PASS"),
    ],
    columnData: [
      ...scalar.map((name) => ({ name, data: rows.map((r) => r[name] as string) })),
      { name: "FAIL_TO_PASS", data: rows.map((r) => r.FAIL_TO_PASS as string[]) },
      { name: "PASS_TO_PASS", data: rows.map((r) => r.PASS_TO_PASS as string[]) },
    ],
  });
  const insts = await loadDataset(file);
  assert.equal(insts.length, 2);
  for (const inst of insts) {
    assert.equal(inst.task_format, "swesmith");
    assert.equal(inst.repo, "swesmith/oauthlib__oauthlib.1fd52536");
    assert.equal(inst.upstream_repo, "oauthlib/oauthlib");
    assert.equal(inst.base_commit, "main", "no pinned snapshot: the mirror's main branch is the snapshot");
    assert.equal(inst.bug_patch, PATCH);
    assert.equal(inst.patch, reversePatch(PATCH));
    assert.equal(inst.test_patch, "");
    assert.deepEqual(inst.PASS_TO_PASS, ["tests/test_a.py::test_y", "tests/test_b.py::test_z"]);
    assert.equal(inst.image_name, "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536");
  }
});

test("SWE-smith JSON: gather output (old repo form, base_commit = bug branch) and pinned snapshots", async () => {
  const [a, b] = sweSmithRows();
  const old = { ...a!, repo: "oauthlib__oauthlib.1fd52536", base_commit: "b".repeat(40), version: "3.2" };
  const pinned = { ...b!, snapshot_commit: "c".repeat(40) };
  const insts = await loadDataset(write("smith.json", JSON.stringify([old, pinned])));
  assert.equal(insts[0]!.repo, "swesmith/oauthlib__oauthlib.1fd52536");
  assert.equal(insts[0]!.bug_commit, "b".repeat(40));
  assert.equal(insts[0]!.base_commit, "main");
  assert.equal(insts[0]!.version, "3.2");
  assert.equal(insts[1]!.base_commit, "c".repeat(40));
  // Normalizing a normalized row again must not reverse the gold patch back into the bug.
  const again = normalizeInstance(JSON.parse(JSON.stringify(insts[1])), "again");
  assert.equal(again.patch, insts[1]!.patch);
  assert.equal(again.bug_patch, PATCH);
  // An upstream repo name with a SWE-smith instance id and image is still recognized.
  const upstreamNamed = normalizeInstance({ ...b!, repo: "oauthlib/oauthlib" }, "row");
  assert.equal(upstreamNamed.task_format, "swesmith");
  assert.equal(upstreamNamed.repo, "swesmith/oauthlib__oauthlib.1fd52536");
  // Forcing the SWE-bench format makes the missing base_commit an error.
  await assert.rejects(
    loadDataset(join(tmp, "smith.json"), { format: "swebench" }),
    /smith\.json row 2 .*missing "base_commit"/,
  );
  // A SWE-smith row needs a bug patch.
  assert.throws(() => normalizeInstance({ ...b!, patch: "" }, "row 9"), /row 9 .*no bug patch/);
});

test("selection by instance id keeps dataset order; missing ids are named", async () => {
  const file = write("sel.json", JSON.stringify(swebenchRows()));
  const picked = await loadDataset(file, { instanceIds: ["sympy__sympy-1003", "sympy__sympy-1001"] });
  assert.deepEqual(
    picked.map((i) => i.instance_id),
    ["sympy__sympy-1001", "sympy__sympy-1003"],
  );
  await assert.rejects(
    loadDataset(file, { instanceIds: ["sympy__sympy-1001", "nope-1", "nope-2"] }),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, "not_found");
      assert.match(e.message, /2 instance ids not found in .*sel\.json \(3 instances\): nope-1, nope-2/);
      return true;
    },
  );
});

test("malformed input: errors name the file and the line or row", async () => {
  const rows = swebenchRows();
  const badJson = JSON.stringify(rows, null, 2).replace('"version": "1.1",\n', '"version": "1.1",,\n');
  await assert.rejects(loadDataset(write("bad.json", badJson)), /bad\.json: invalid JSON at line \d+ column \d+/);

  const lines = rows.map((r) => JSON.stringify(r));
  lines[1] = lines[1]!.slice(0, -1);
  await assert.rejects(loadDataset(write("bad.jsonl", lines.join("\n"))), /bad\.jsonl line 2: invalid JSON/);

  const noId = [{ ...rows[0]!, instance_id: undefined }];
  await assert.rejects(
    loadDataset(write("noid.json", JSON.stringify(noId))),
    /noid\.json row 1: missing "instance_id"/,
  );

  const badList = [rows[0], { ...rows[1]!, FAIL_TO_PASS: "test_a2" }];
  await assert.rejects(
    loadDataset(write("badlist.jsonl", badList.map((r) => JSON.stringify(r)).join("\n"))),
    /badlist\.jsonl line 2 \(sympy__sympy-1002\): FAIL_TO_PASS is a string but not a JSON list/,
  );
  const numbers = [{ ...rows[0]!, PASS_TO_PASS: [1, 2] }];
  await assert.rejects(
    loadDataset(write("nums.json", JSON.stringify(numbers))),
    /row 1 .*PASS_TO_PASS must be a list of test names/,
  );

  const noBase = [rows[0], rows[1], { ...rows[2]!, base_commit: undefined }];
  await assert.rejects(
    loadDataset(write("nobase.json", JSON.stringify(noBase))),
    /nobase\.json row 3 \(sympy__sympy-1003\): missing "base_commit"/,
  );

  const dup = [rows[0], rows[0]];
  await assert.rejects(
    loadDataset(write("dup.json", JSON.stringify(dup))),
    /duplicate instance_id sympy__sympy-1001 \(dup\.json row 1 and dup\.json row 2\)/,
  );

  await assert.rejects(loadDataset(write("obj.json", '[1, "x"]')), /obj\.json row 1: expected an object/);
  await assert.rejects(loadDataset(write("empty.jsonl", "\n\n")), /empty dataset/);
  await assert.rejects(
    loadDataset(write("pretty.jsonl", JSON.stringify(rows[0], null, 2))),
    /line 1: invalid JSON .*one object per line/,
  );
  await assert.rejects(
    loadDataset(write("corrupt.parquet", "PAR1 this is not parquet")),
    /corrupt\.parquet: cannot read parquet/,
  );
  await assert.rejects(
    loadDataset(join(tmp, "missing.json")),
    (e: Error & { code?: string }) => e.code === "not_found",
  );

  // Parquet errors name the row.
  const pq = join(tmp, "nobase.parquet");
  parquetWriteFile({
    filename: pq,
    columnData: [
      { name: "instance_id", data: ["a__b-1", "a__b-2"], type: "STRING" },
      { name: "repo", data: ["a/b", "a/b"], type: "STRING" },
      { name: "base_commit", data: ["f".repeat(40), null], type: "STRING" },
    ],
  });
  await assert.rejects(loadDataset(pq), /nobase\.parquet row 2 \(a__b-2\): missing "base_commit"/);
});

test("versions exported as numbers become strings; null optional fields are dropped", () => {
  const inst = normalizeInstance({ ...swebenchRows()[0]!, version: 1.1, hints_text: null, spec: null }, "row 1");
  assert.equal(inst.version, "1.1");
  assert.equal("hints_text" in inst, false);
  assert.equal("spec" in inst, false);
  assert.throws(() => normalizeInstance({ ...swebenchRows()[0]!, spec: [1] }, "row 1"), /"spec" must be an object/);
  assert.throws(() => normalizeInstance({ ...swebenchRows()[0]!, patch: 5 }, "row 1"), /"patch" must be a string/);
});

// ------------------------------------------------------------------------------------------------ reversePatch

async function gitRepo(dir: string) {
  mkdirSync(dir, { recursive: true });
  const env = { ...process.env, GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1" };
  const git = (...args: string[]) =>
    runOk("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: dir, env });
  await git("init", "-q", "-b", "main");
  return git;
}

test("reversePatch equals git's reverse for edits, adds, deletes, renames, modes, no-newline ends", async () => {
  const dir = join(tmp, "rev");
  const git = await gitRepo(dir);
  const lines = (n: number, tag: string) => `${Array.from({ length: n }, (_, i) => `line ${i} ${tag}`).join("\n")}\n`;
  writeFileSync(join(dir, "edit.py"), lines(40, "a"));
  writeFileSync(join(dir, "gone.py"), "bye\n");
  writeFileSync(join(dir, "old_name.py"), lines(20, "r"));
  writeFileSync(join(dir, "run.sh"), "echo hi\n");
  writeFileSync(join(dir, "tail.txt"), "no newline at end");
  await git("add", "-A");
  await git("commit", "-q", "-m", "a");

  const edited = lines(40, "a").split("\n");
  edited[3] = "changed 3";
  edited.splice(10, 2, "replaced 10", "replaced 11", "inserted");
  edited[30] = "changed 30";
  writeFileSync(join(dir, "edit.py"), edited.join("\n"));
  rmSync(join(dir, "gone.py"));
  writeFileSync(join(dir, "new.py"), "hello\nworld\n");
  renameSync(join(dir, "old_name.py"), join(dir, "new_name.py"));
  writeFileSync(join(dir, "new_name.py"), lines(20, "r").replace("line 5 r", "line 5 R"));
  chmodSync(join(dir, "run.sh"), 0o755);
  writeFileSync(join(dir, "tail.txt"), "still no newline, changed");
  await git("add", "-A");
  await git("commit", "-q", "-m", "b");

  const forward = await git("diff", "-M", "HEAD~1", "HEAD");
  // The reverse of A->B is B->A (`git diff -R` is the same but labels the sides b/ then a/).
  const reverse = await git("diff", "-M", "HEAD", "HEAD~1");
  for (const marker of ["new file mode", "deleted file mode", "rename from", "old mode", "\\ No newline"]) {
    assert.ok(forward.includes(marker), `test diff exercises ${marker}`);
  }
  assert.equal(reversePatch(forward), reverse);
  assert.equal(reversePatch(reversePatch(forward)), forward, "reversing twice is the identity");

  // And it applies: HEAD + reverse = HEAD~1.
  await runOk("git", ["apply", "--index", "-"], { cwd: dir, input: reversePatch(forward) });
  assert.equal((await git("diff", "--cached", "--stat", "HEAD~1")).trim(), "");
});

test("reversePatch refuses binary patches and copies", () => {
  assert.throws(
    () => reversePatch("diff --git a/x.bin b/x.bin\nindex 1..2 100644\nGIT binary patch\nliteral 1\n"),
    /binary/,
  );
  assert.throws(() => reversePatch("diff --git a/x.bin b/x.bin\nBinary files a/x.bin and b/x.bin differ\n"), /binary/);
  assert.throws(() => reversePatch("diff --git a/a b/b\nsimilarity index 100%\ncopy from a\ncopy to b\n"), /copy/);
});
