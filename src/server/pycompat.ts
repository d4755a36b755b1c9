/**
 * Python behaviours the SWE-ReX protocol leaks onto the wire: float repr in messages (`1.0`, not `1`), `repr()` of
 * strings and lists, `shlex.split`, `bytes.decode(errors="backslashreplace")`, `errno` messages of OSError.
 */
import { pyRepr } from "../session/errors.js";
import { MinisandboxError } from "../errors.js";

export { pyRepr };

/** Python's repr() of a float (what f"{t}" prints for a pydantic `float` field). */
export function pyFloat(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const abs = Math.abs(x);
  if (abs !== 0 && (abs >= 1e16 || abs < 1e-4)) {
    // Python: 1e+16, 1.5e-05 (two-digit exponent at least).
    const [mant, exp] = x.toExponential().split("e") as [string, string];
    const sign = exp.startsWith("-") ? "-" : "+";
    const digits = exp.replace(/^[+-]/, "").padStart(2, "0");
    return `${mant}e${sign}${digits}`;
  }
  if (Number.isInteger(x)) return `${x}.0`;
  return String(x);
}

/** repr() of a str or a list of str, as in `{command!r}`. */
export function pyReprValue(v: string | string[]): string {
  return typeof v === "string" ? pyRepr(v) : `[${v.map(pyRepr).join(", ")}]`;
}

export class ShlexError extends Error {}

/** `shlex.split(s)` (POSIX mode, no comments). Raises ShlexError like Python's ValueError. */
export function shlexSplit(s: string): string[] {
  const out: string[] = [];
  let token = "";
  let inToken = false;
  let i = 0;
  const ws = " \t\r\n";
  while (i < s.length) {
    const c = s[i]!;
    if (ws.includes(c)) {
      if (inToken) {
        out.push(token);
        token = "";
        inToken = false;
      }
      i++;
    } else if (c === "'") {
      inToken = true;
      const end = s.indexOf("'", i + 1);
      if (end < 0) throw new ShlexError("No closing quotation");
      token += s.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      inToken = true;
      i++;
      for (;;) {
        if (i >= s.length) throw new ShlexError("No closing quotation");
        const d = s[i]!;
        if (d === '"') {
          i++;
          break;
        }
        if (d === "\\") {
          if (i + 1 >= s.length) throw new ShlexError("No closing quotation");
          const n = s[i + 1]!;
          // In double quotes a backslash escapes only the quote and itself.
          token += n === '"' || n === "\\" ? n : `\\${n}`;
          i += 2;
          continue;
        }
        token += d;
        i++;
      }
    } else if (c === "\\") {
      if (i + 1 >= s.length) throw new ShlexError("No escaped character");
      inToken = true;
      token += s[i + 1];
      i += 2;
    } else {
      inToken = true;
      token += c;
      i++;
    }
  }
  if (inToken) out.push(token);
  return out;
}

/** `bytes.decode("utf-8", errors="backslashreplace")`: invalid bytes become `\xNN`. */
export function decodeBackslashReplace(buf: Buffer): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(buf);
  } catch {
    /* slow path below */
  }
  let out = "";
  let start = 0;
  let i = 0;
  const flush = (end: number): void => {
    if (end > start) out += buf.subarray(start, end).toString("utf8");
  };
  while (i < buf.length) {
    const n = validUtf8Length(buf, i);
    if (n > 0) {
      i += n;
      continue;
    }
    flush(i);
    out += `\\x${buf[i]!.toString(16).padStart(2, "0")}`;
    i++;
    start = i;
  }
  flush(i);
  return out;
}

/** Length of the valid UTF-8 sequence starting at `i`, or 0. */
function validUtf8Length(b: Buffer, i: number): number {
  const c = b[i]!;
  if (c < 0x80) return 1;
  const cont = (k: number, lo = 0x80, hi = 0xbf): boolean => i + k < b.length && b[i + k]! >= lo && b[i + k]! <= hi;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c === 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if ((c >= 0xe1 && c <= 0xec) || c === 0xee || c === 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (c === 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (c === 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c === 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

/** Decode file bytes as Python's `Path.read_text(encoding, errors)` would (universal newlines included). */
export function pyReadText(buf: Buffer, encoding: string | null, errors: string | null): string {
  const enc = (encoding ?? "utf-8").toLowerCase().replace(/_/g, "-");
  const mode = errors ?? "strict";
  let text: string;
  if (["utf-8", "utf8", "u8", "utf"].includes(enc)) {
    if (mode === "strict") {
      try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
      } catch {
        const pos = firstInvalidUtf8(buf);
        throw new PyError(
          "builtins.UnicodeDecodeError",
          `'utf-8' codec can't decode byte 0x${buf[pos]!.toString(16).padStart(2, "0")} ` +
            `in position ${pos}: invalid start byte`,
        );
      }
    } else if (mode === "replace") text = buf.toString("utf8");
    else if (mode === "ignore") text = buf.toString("utf8").replace(/\ufffd/g, "");
    else if (mode === "backslashreplace" || mode === "surrogateescape") text = decodeBackslashReplace(buf);
    else throw new PyError("builtins.LookupError", `unknown error handler name '${mode}'`);
  } else if (["latin-1", "latin1", "iso-8859-1", "iso8859-1", "l1"].includes(enc)) {
    text = buf.toString("latin1");
  } else if (["ascii", "us-ascii"].includes(enc)) {
    const bad = buf.findIndex((b) => b > 0x7f);
    if (bad >= 0 && mode === "strict") {
      throw new PyError(
        "builtins.UnicodeDecodeError",
        `'ascii' codec can't decode byte 0x${buf[bad]!.toString(16)} in position ${bad}: ordinal not in range(128)`,
      );
    }
    text = [...buf]
      .map((b) =>
        b > 0x7f
          ? mode === "ignore"
            ? ""
            : mode === "replace"
              ? "\ufffd"
              : `\\x${b.toString(16)}`
          : String.fromCharCode(b),
      )
      .join("");
  } else {
    throw new PyError("builtins.LookupError", `unknown encoding: ${encoding}`);
  }
  return text.replace(/\r\n?/g, "\n");
}

function firstInvalidUtf8(buf: Buffer): number {
  let i = 0;
  while (i < buf.length) {
    const n = validUtf8Length(buf, i);
    if (n === 0) return i;
    i += n;
  }
  return 0;
}

/**
 * An error to report with a given Python class path (the 511 body's `class_path`). Its `code` (what the native API's
 * status comes from) is given by whoever raises it: `not_found` for a missing file, `invalid_input` otherwise.
 */
export class PyError extends MinisandboxError {
  constructor(
    readonly classPath: string,
    message: string,
    readonly extraInfo: Record<string, unknown> = {},
    code = "invalid_input",
  ) {
    super(code, message);
    this.name = classPath.slice(classPath.lastIndexOf(".") + 1);
  }
}

const ERRNO: Record<string, [number, string, string]> = {
  "No such file or directory": [2, "No such file or directory", "builtins.FileNotFoundError"],
  "Is a directory": [21, "Is a directory", "builtins.IsADirectoryError"],
  "Not a directory": [20, "Not a directory", "builtins.NotADirectoryError"],
  "Permission denied": [13, "Permission denied", "builtins.PermissionError"],
  "Operation not permitted": [1, "Operation not permitted", "builtins.PermissionError"],
  "Read-only file system": [30, "Read-only file system", "builtins.OSError"],
  "No space left on device": [28, "No space left on device", "builtins.OSError"],
  "File exists": [17, "File exists", "builtins.FileExistsError"],
  "File name too long": [36, "File name too long", "builtins.OSError"],
  "Disk quota exceeded": [122, "Disk quota exceeded", "builtins.OSError"],
};

/** Turn a tool's error text (cat, sh, tar) about `path` into the OSError Python would raise, when recognisable. */
export function osErrorFrom(text: string, path: string): PyError | undefined {
  for (const [needle, [errno, strerror, cls]] of Object.entries(ERRNO)) {
    if (text.includes(needle))
      return new PyError(
        cls,
        `[Errno ${errno}] ${strerror}: ${pyRepr(path)}`,
        {},
        errno === 2 ? "not_found" : undefined,
      );
  }
  return undefined;
}
