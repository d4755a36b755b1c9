/**
 * Python string semantics the harness relies on. The SWE-bench harness is Python; its parsers split, strip and
 * sort with Python's rules, and its files are written by `json.dumps`. Where JavaScript's built-ins differ (which
 * characters count as whitespace, UTF-16 vs code-point ordering, ASCII escaping), verdicts or bytes would drift,
 * so these helpers reproduce Python exactly.
 */

/**
 * Characters Python treats as whitespace in `str.split()`, `str.strip()` and regex `\s` (JS `\s` differs: it lacks
 * \x1c-\x1f and \x85 and adds \ufeff). A regex character-class body.
 */
export const PY_WS =
  "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const WS_RUN = new RegExp(`[${PY_WS}]+`);
const LEADING_WS = new RegExp(`^[${PY_WS}]+`);
const TRAILING_WS = new RegExp(`[${PY_WS}]+$`);

/** Python `s.split()` (no argument): split on whitespace runs, no empty strings. */
export function pySplit(s: string): string[] {
  return s.split(WS_RUN).filter((t) => t.length > 0);
}

/** Python `s.strip()`. */
export function pyStrip(s: string): string {
  return pyLstrip(s).replace(TRAILING_WS, "");
}

/** Python `s.lstrip()`. */
export function pyLstrip(s: string): string {
  return s.replace(LEADING_WS, "");
}

/** Python's `sorted()` order for strings: by code point (JS's default sort compares UTF-16 code units). */
export function pyCompare(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done || y.done) return x.done === y.done ? 0 : x.done ? -1 : 1;
    const cx = x.value.codePointAt(0)!;
    const cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

export function pySorted(items: Iterable<string>): string[] {
  return [...items].sort(pyCompare);
}

/**
 * `json.dumps(value, indent=indent)`: same layout as JSON.stringify with an indent, plus Python's default
 * `ensure_ascii=True` (every non-ASCII UTF-16 unit written as \uXXXX), so files are byte-identical to the harness's.
 * Only for JSON-safe data without non-integer numbers (Python writes 1.0 where JS writes 1).
 */
export function pyJsonDumps(value: unknown, indent: number): string {
  return JSON.stringify(value, null, indent).replace(
    /[\u0080-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
