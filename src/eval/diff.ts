/**
 * What a unified diff touches, read the way the harness reads it: `unidiff.PatchSet` for modified/new files (which
 * decide what eval.sh resets) and a regex over `diff --git` headers for test directives. Hunk bodies are skipped
 * by their line counts, so a removed line that reads "--- x" is never taken for a file header.
 */

export interface DiffFile {
  /** Source side as written in the diff, e.g. "a/x.py" or "/dev/null". */
  source: string;
  /** Target side as written, e.g. "b/x.py" or "/dev/null". */
  target: string;
  /** Repository-relative paths (a/ or b/ prefix removed); null on the /dev/null side. */
  oldPath: string | null;
  newPath: string | null;
  binary: boolean;
}

const DEV_NULL = "/dev/null";
const HUNK_HEADER = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;

/** Files of a unified diff (git or plain), in order. Never throws: unparseable text yields fewer files. */
export function parseDiff(patch: string): DiffFile[] {
  const files: DiffFile[] = [];
  const lines = patch.split("\n");
  let current: { file: DiffFile; git: boolean; sawFileLines: boolean } | null = null;
  for (let i = 0; i < lines.length; i++) {
    const line = stripCr(lines[i]!);
    if (line.startsWith("diff --git ")) {
      const [source, target] = splitGitHeader(line.slice("diff --git ".length));
      current = { file: makeFile(source, target), git: true, sawFileLines: false };
      files.push(current.file);
      continue;
    }
    if (line.startsWith("--- ") && i + 1 < lines.length && lines[i + 1]!.startsWith("+++ ")) {
      const source = fileName(line.slice(4));
      const target = fileName(stripCr(lines[i + 1]!).slice(4));
      if (current?.git && !current.sawFileLines) {
        Object.assign(current.file, makeFile(source, target), { binary: current.file.binary });
        current.sawFileLines = true;
      } else {
        current = { file: makeFile(source, target), git: false, sawFileLines: true };
        files.push(current.file);
      }
      i++;
      continue;
    }
    const hunk = HUNK_HEADER.exec(line);
    if (hunk && current) {
      i = skipHunk(lines, i + 1, Number(hunk[1] ?? 1), Number(hunk[2] ?? 1)) - 1;
      continue;
    }
    if (!current?.git || current.sawFileLines) continue;
    // git extended header lines (before ---/+++).
    if (line.startsWith("new file mode")) Object.assign(current.file, makeFile(DEV_NULL, current.file.target));
    else if (line.startsWith("deleted file mode")) Object.assign(current.file, makeFile(current.file.source, DEV_NULL));
    else if (line.startsWith("GIT binary patch") || /^Binary files .* differ$/.test(line)) current.file.binary = true;
  }
  return files;
}

/** Index just past a hunk body that should hold `oldLeft` source and `newLeft` target lines. */
function skipHunk(lines: string[], start: number, oldLeft: number, newLeft: number): number {
  let i = start;
  while (i < lines.length && (oldLeft > 0 || newLeft > 0)) {
    const c = lines[i]![0];
    if (c === " " || c === undefined || lines[i] === "\r") {
      oldLeft--;
      newLeft--;
    } else if (c === "-") oldLeft--;
    else if (c === "+") newLeft--;
    else if (c !== "\\") break;
    i++;
  }
  while (i < lines.length && lines[i]!.startsWith("\\")) i++; // "\ No newline at end of file"
  return i;
}

function makeFile(source: string, target: string): DiffFile {
  return {
    source,
    target,
    oldPath: source === DEV_NULL ? null : stripPrefix(source, "a/"),
    newPath: target === DEV_NULL ? null : stripPrefix(target, "b/"),
    binary: false,
  };
}

const stripPrefix = (p: string, prefix: string): string => (p.startsWith(prefix) ? p.slice(prefix.length) : p);
const stripCr = (s: string): string => (s.endsWith("\r") ? s.slice(0, -1) : s);

/** The name on a ---/+++ line: up to a tab (timestamps follow it), C-unquoted when git quoted it. */
function fileName(raw: string): string {
  const name = raw.startsWith('"') ? raw : raw.split("\t")[0]!;
  return name.startsWith('"') ? unquoteC(name).value : name;
}

/** `a/X b/Y` of a `diff --git` line; paths may be C-quoted or contain spaces. */
function splitGitHeader(rest: string): [string, string] {
  if (rest.startsWith('"')) {
    const first = unquoteC(rest);
    const tail = rest.slice(first.length).trimStart();
    return [first.value, tail.startsWith('"') ? unquoteC(tail).value : tail];
  }
  const quoted = rest.indexOf(' "');
  if (quoted >= 0 && rest.endsWith('"')) return [rest.slice(0, quoted), unquoteC(rest.slice(quoted + 1)).value];
  // Same path on both sides (the common case) is unambiguous even with spaces: "a/P b/P".
  if ((rest.length - 1) % 2 === 0) {
    const half = (rest.length - 1) / 2;
    const a = rest.slice(0, half);
    const b = rest.slice(half + 1);
    if (a.startsWith("a/") && b.startsWith("b/") && a.slice(2) === b.slice(2)) return [a, b];
  }
  const at = rest.indexOf(" b/");
  return at >= 0 ? [rest.slice(0, at), rest.slice(at + 1)] : [rest, rest];
}

/** Decode a git C-quoted string starting at s[0] === '"'; `length` is how many characters it spans. */
function unquoteC(s: string): { value: string; length: number } {
  const bytes: number[] = [];
  const escapes: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, "\\": 92 };
  let i = 1;
  for (; i < s.length && s[i] !== '"'; i++) {
    const c = s[i]!;
    if (c !== "\\") {
      bytes.push(...Buffer.from(c, "utf8"));
      continue;
    }
    const next = s[i + 1] ?? "";
    if (/[0-7]/.test(next)) {
      const oct = /^[0-7]{1,3}/.exec(s.slice(i + 1))![0];
      bytes.push(parseInt(oct, 8));
      i += oct.length;
    } else {
      bytes.push(escapes[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return { value: Buffer.from(bytes).toString("utf8"), length: i + 1 };
}

/** Repository paths a diff touches (new path, or old path for deletions), first occurrence order. */
export function touchedFiles(patch: string): string[] {
  const out = new Set<string>();
  for (const f of parseDiff(patch)) {
    const p = f.newPath ?? f.oldPath;
    if (p !== null) out.add(p);
  }
  return [...out];
}

/** The harness's `get_modified_files`: files that exist before the patch (source not /dev/null, "a/" prefixed). */
export function modifiedFiles(patch: string): string[] {
  return parseDiff(patch)
    .filter((f) => f.source !== DEV_NULL && f.source.startsWith("a/"))
    .map((f) => f.source.slice(2));
}

/** The harness's `get_new_files`: files the patch creates (source /dev/null). */
export function newFiles(patch: string): string[] {
  return parseDiff(patch)
    .filter((f) => f.source === DEV_NULL)
    .map((f) => stripPrefix(f.target, "b/"));
}

/** Test-patch files that are not tests (SWE-bench NON_TEST_EXTS; note "csv" has no dot there). */
export const NON_TEST_EXTS: readonly string[] = [
  ".json",
  ".png",
  "csv",
  ".txt",
  ".md",
  ".jpg",
  ".jpeg",
  ".pkl",
  ".yml",
  ".yaml",
  ".toml",
];

/**
 * The harness's `get_test_directives`: the b/ paths of every `diff --git` line of the test patch (matched anywhere,
 * greedy, as its regex does), minus non-test files; django gets module names (no `tests/`, no `.py`, dots);
 * humaneval always runs test.py. Other repositories (sympy included) get the file paths.
 */
export function testDirectives(instance: { repo: string; test_patch: string }): string[] {
  if (instance.repo === "swe-bench/humaneval") return ["test.py"];
  const paths = [...instance.test_patch.matchAll(/diff --git a\/[^\n]* b\/([^\n]*)/g)].map((m) => m[1]!);
  const tests = paths.filter((p) => !NON_TEST_EXTS.some((ext) => p.endsWith(ext)));
  if (instance.repo !== "django/django") return tests;
  return tests.map((p) => {
    let d = p.endsWith(".py") ? p.slice(0, -3) : p;
    d = d.startsWith("tests/") ? d.slice("tests/".length) : d;
    return d.replaceAll("/", ".");
  });
}
