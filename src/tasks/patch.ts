import { InvalidInputError } from "../errors.js";

/**
 * Reverse a unified diff (what `git apply -R` would apply), as text.
 *
 * Why here: SWE-smith rows carry the patch that *introduces* a bug; the gold fix is its reverse, and graders,
 * agents and reports want it as an ordinary forward patch. The output matches `git diff -R` for git diffs:
 * hunk ranges, +/- lines (removals first within each change block), /dev/null sides, new/deleted file modes,
 * mode changes, renames and `index a..b` lines are swapped. Binary patches and copies cannot be reversed as
 * text and raise InvalidInputError.
 */
export function reversePatch(patch: string): string {
  const lines = patch.split("\n");
  // A trailing newline produces one empty last element; keep it so the output ends the same way.
  const out: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.startsWith("diff --git ")) {
      i = reverseGitHeader(lines, i, out);
    } else if (line.startsWith("--- ") && i + 1 < lines.length && lines[i + 1]!.startsWith("+++ ")) {
      const [minus, plus] = swapFileLines(line.slice(4), lines[i + 1]!.slice(4));
      out.push(`--- ${minus}`, `+++ ${plus}`);
      i += 2;
    } else if (line.startsWith("@@ ")) {
      i = reverseHunk(lines, i, out);
    } else if (line.startsWith("GIT binary patch") || /^Binary files .* differ$/.test(line)) {
      throw new InvalidInputError("cannot reverse a binary patch (GIT binary patch / Binary files differ)");
    } else {
      out.push(line); // preamble or trailing text
      i++;
    }
  }
  return out.join("\n");
}

/** The extended header lines git writes between `diff --git` and the first `---`/`@@`. */
const EXTENDED_HEADER = new RegExp(
  "^(old mode|new mode|new file mode|deleted file mode|index |similarity index|dissimilarity index|" +
    "rename from|rename to|copy from|copy to)",
);

/** Reverse the `diff --git` line and its extended header lines (up to the first ---/@@/next diff). */
function reverseGitHeader(lines: string[], start: number, out: string[]): number {
  const header = lines[start]!;
  let i = start + 1;
  const ext: string[] = [];
  while (i < lines.length) {
    const l = lines[i]!;
    if (l.startsWith("--- ") || l.startsWith("@@ ") || l.startsWith("diff --git ")) break;
    if (l.startsWith("GIT binary patch") || /^Binary files .* differ$/.test(l)) {
      throw new InvalidInputError(`cannot reverse a binary patch (${header.slice(11)})`);
    }
    if (!EXTENDED_HEADER.test(l)) break;
    ext.push(l);
    i++;
  }
  let renameFrom: string | undefined;
  let renameTo: string | undefined;
  let oldMode: string | undefined;
  let newMode: string | undefined;
  const rest: string[] = [];
  for (const l of ext) {
    if (l.startsWith("copy from") || l.startsWith("copy to")) {
      throw new InvalidInputError(`cannot reverse a copy in a patch (${header.slice(11)})`);
    } else if (l.startsWith("rename from ")) renameFrom = l.slice(12);
    else if (l.startsWith("rename to ")) renameTo = l.slice(10);
    else if (l.startsWith("old mode ")) oldMode = l.slice(9);
    else if (l.startsWith("new mode ")) newMode = l.slice(9);
    else if (l.startsWith("new file mode ")) rest.push(`deleted file mode ${l.slice(14)}`);
    else if (l.startsWith("deleted file mode ")) rest.push(`new file mode ${l.slice(18)}`);
    else if (l.startsWith("index ")) {
      const m = /^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$/.exec(l);
      rest.push(m ? `index ${m[2]}..${m[1]}${m[3]}` : l);
    } else rest.push(l);
  }
  out.push(reverseDiffGitLine(header, renameFrom, renameTo));
  // git prints: old/new mode, deleted/new file mode, similarity, rename from/to, index.
  if (oldMode !== undefined && newMode !== undefined) out.push(`old mode ${newMode}`, `new mode ${oldMode}`);
  const similarity = rest.filter((l) => /^(dis)?similarity index/.test(l));
  const index = rest.filter((l) => l.startsWith("index "));
  const others = rest.filter((l) => !similarity.includes(l) && !index.includes(l));
  out.push(...others, ...similarity);
  if (renameFrom !== undefined && renameTo !== undefined)
    out.push(`rename from ${renameTo}`, `rename to ${renameFrom}`);
  out.push(...index);
  return i;
}

function reverseDiffGitLine(header: string, renameFrom?: string, renameTo?: string): string {
  if (renameFrom !== undefined && renameTo !== undefined) return `diff --git a/${renameTo} b/${renameFrom}`;
  const body = header.slice("diff --git ".length);
  // Same path on both sides (the common case): "a/P b/P" is symmetric, nothing to swap.
  const half = (body.length - 1) / 2;
  if (Number.isInteger(half) && body[half] === " " && body.slice(2, half) === body.slice(half + 3)) return header;
  const parts = body.split(" b/");
  if (parts.length === 2 && parts[0]!.startsWith("a/")) return `diff --git a/${parts[1]} b/${parts[0]!.slice(2)}`;
  return header;
}

/** Swap the paths of a `---`/`+++` pair, keeping the a/ b/ prefixes on the right sides. */
function swapFileLines(minus: string, plus: string): [string, string] {
  const strip = (p: string, prefix: string) => (p.startsWith(prefix) ? p.slice(prefix.length) : undefined);
  const isNull = (p: string) => p === "/dev/null" || p.startsWith("/dev/null\t");
  const plusPath = strip(plus, "b/");
  const minusPath = strip(minus, "a/");
  if (plusPath === undefined && !isNull(plus)) return [plus, minus]; // not a git-style patch: swap verbatim
  if (minusPath === undefined && !isNull(minus)) return [plus, minus];
  const newMinus = isNull(plus) ? plus : `a/${plusPath}`;
  const newPlus = isNull(minus) ? minus : `b/${minusPath}`;
  return [newMinus, newPlus];
}

/** Reverse one hunk; returns the index of the first line after it. */
function reverseHunk(lines: string[], start: number, out: string[]): number {
  const m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$/.exec(lines[start]!);
  if (!m) throw new InvalidInputError(`malformed hunk header in patch: ${JSON.stringify(lines[start])}`);
  const oldCount = m[2] === undefined ? 1 : Number(m[2]);
  const newCount = m[4] === undefined ? 1 : Number(m[4]);
  const range = (s: string, c: string | undefined) => (c === undefined ? s : `${s},${c}`);
  out.push(`@@ -${range(m[3]!, m[4])} +${range(m[1]!, m[2])} @@${m[5]}`);

  let oldLeft = oldCount;
  let newLeft = newCount;
  let removed: string[] = []; // original '-' lines (become '+')
  let added: string[] = []; // original '+' lines (become '-')
  const flush = () => {
    out.push(...added, ...removed);
    removed = [];
    added = [];
  };
  let i = start + 1;
  let last: string[] | undefined; // where a "\ No newline" marker attaches
  while (i < lines.length && (oldLeft > 0 || newLeft > 0 || lines[i]!.startsWith("\\"))) {
    const l = lines[i]!;
    if (l.startsWith("\\")) {
      (last ?? out).push(l);
    } else if (l.startsWith("-")) {
      removed.push(`+${l.slice(1)}`);
      last = removed;
      oldLeft--;
    } else if (l.startsWith("+")) {
      added.push(`-${l.slice(1)}`);
      last = added;
      newLeft--;
    } else if (l.startsWith(" ") || l === "") {
      // Some tools strip the lone space of an empty context line; treat "" as context.
      if (l === "" && i === lines.length - 1) break; // the file's final newline, not a line
      flush();
      out.push(l);
      last = out;
      oldLeft--;
      newLeft--;
    } else {
      break; // hunk shorter than its header says; let the caller carry on
    }
    i++;
  }
  flush();
  return i;
}
