/**
 * Test-log parsers: ports of the SWE-bench 4.x harness parsers (`log_parsers/python.py`), rule for rule, quirks
 * included — a verdict only matches the harness's if the status map does. Written from the harness's documented
 * rules; where the harness would crash on a line (an IndexError on a lone status word) we skip the line instead.
 */
import { InvalidInputError } from "../errors.js";
import { PY_WS, pyLstrip, pySplit, pyStrip } from "./pystr.js";
import { TEST_STATUSES, type StatusMap } from "./types.js";

export type LogParser = (log: string) => StatusMap;

const startsWithStatus = (line: string): boolean => TEST_STATUSES.some((s) => line.startsWith(s));
const containsStatus = (line: string): boolean => TEST_STATUSES.some((s) => line.includes(s));

/** Builds the map: later lines overwrite earlier ones but keep their first position, like a Python dict. */
class Statuses {
  private readonly map = new Map<string, string>();
  set(name: string, status: string): void {
    this.map.set(name, status);
  }
  toObject(): StatusMap {
    // fromEntries defines own properties, so names like "__proto__" are stored, not swallowed.
    return Object.fromEntries(this.map);
  }
}

/**
 * `pytest -rA` summary lines: `STATUS name[ - message]`. For FAILED lines " - " is replaced by " " first; the name
 * is the second whitespace-separated token (so ids containing spaces are cut, as in the harness).
 */
function statusFirst(line: string): [name: string, status: string] | null {
  if (!startsWithStatus(line)) return null;
  if (line.startsWith("FAILED")) line = line.replaceAll(" - ", " ");
  const tokens = pySplit(line);
  return tokens.length >= 2 ? [tokens[1]!, tokens[0]!] : null;
}

export const parsePytest: LogParser = (log) => {
  const out = new Statuses();
  for (const line of log.split("\n")) {
    const hit = statusFirst(line);
    if (hit) out.set(hit[0], hit[1]);
  }
  return out.toObject();
};

/**
 * A parametrised name `main[option]` whose option is an absolute path (one leading "/", no "*") keeps only the
 * last path component: the harness's way to make tmp-path ids stable across machines.
 */
function normalizeOptionName(name: string): string {
  const m = /(.*?)\[(.*)\]/.exec(name);
  if (!m) return name;
  const main = m[1]!;
  let option = m[2]!;
  if (option.startsWith("/") && !option.startsWith("//") && !option.includes("*")) {
    option = `/${option.split("/").at(-1)!}`;
  }
  return `${main}[${option}]`;
}

export const parsePytestOptions: LogParser = (log) => {
  const out = new Statuses();
  for (const line of log.split("\n")) {
    const hit = statusFirst(line);
    if (hit) out.set(normalizeOptionName(hit[0]), hit[1]);
  }
  return out.toObject();
};

// Python's `\d` is any Unicode decimal digit.
const COLOR_CODE = /\[(\p{Nd}+)m/gu;
// chr(1)..chr(31): the harness deletes every control character (tabs included) after removing colour codes.
const CONTROL_CHARS = /[\x01-\x1f]/g;

/**
 * pytest v2: colour codes and control characters stripped first; then status-first lines as pytest, else lines
 * ending with a status word (older verbose pytest: `name STATUS`), else any line containing one (name first).
 */
export const parsePytestV2: LogParser = (log) => {
  const out = new Statuses();
  for (const raw of log.split("\n")) {
    const line = raw.replace(COLOR_CODE, "").replace(CONTROL_CHARS, "");
    const hit = statusFirst(line);
    if (hit) {
      out.set(hit[0], hit[1]);
    } else if (!startsWithStatus(line) && containsStatus(line)) {
      // The harness's "ends with a status" and "contains a status" branches record the same thing.
      const tokens = pySplit(line);
      if (tokens.length >= 2) out.set(tokens[0]!, tokens[1]!);
    }
  }
  return out.toObject();
};

/** matplotlib: pytest after mapping enum reprs that vary across versions to their values. */
export const parseMatplotlib: LogParser = (log) => {
  const out = new Statuses();
  for (const raw of log.split("\n")) {
    const line = raw.replaceAll("MouseButton.LEFT", "1").replaceAll("MouseButton.RIGHT", "3");
    const hit = statusFirst(line);
    if (hit) out.set(hit[0], hit[1]);
  }
  return out.toObject();
};

/** seaborn: `FAILED name`, `name PASSED ...` (verbose), `PASSED name`. */
export const parseSeaborn: LogParser = (log) => {
  const out = new Statuses();
  for (const line of log.split("\n")) {
    const tokens = pySplit(line);
    if (line.startsWith("FAILED")) {
      if (tokens.length >= 2) out.set(tokens[1]!, "FAILED");
    } else if (line.includes(" PASSED ")) {
      if (tokens.length >= 2 && tokens[1] === "PASSED") out.set(tokens[0]!, "PASSED");
    } else if (line.startsWith("PASSED")) {
      if (tokens.length >= 2) out.set(tokens[1]!, "PASSED");
    }
  }
  return out.toObject();
};

// `___ path.py:name ___` headers of sympy's failure/exception sections (searched anywhere, like re.findall).
const SYMPY_HEADER = /(_*) ([^\n]*)\.py:([^\n]*) (_*)/g;

/** sympy `bin/test -C --verbose`: failure headers mark `path.py:name` FAILED; then `test_x ok|F|E` lines. */
export const parseSympy: LogParser = (log) => {
  const out = new Statuses();
  const lines = log.split("\n");
  // A match never spans lines, so searching only lines with ".py:" finds the same headers, without the regex's
  // quadratic backtracking on long lines that have none.
  for (const line of lines) {
    if (!line.includes(".py:")) continue;
    for (const m of line.matchAll(SYMPY_HEADER)) out.set(`${m[2]}.py:${m[3]}`, "FAILED");
  }
  for (const raw of lines) {
    const line = pyStrip(raw);
    if (!line.startsWith("test_")) continue;
    const name = pySplit(line)[0]!;
    if (line.endsWith(" E")) out.set(name, "ERROR");
    if (line.endsWith(" F")) out.set(name, "FAILED");
    if (line.endsWith(" ok")) out.set(name, "PASSED");
  }
  return out.toObject();
};

const WS = `[${PY_WS}]`;
const BOL = "(?<=^|\\n)"; // Python MULTILINE `^`
const EOL = "(?=\\n|$)"; // Python MULTILINE `$`
/**
 * Django sometimes prints a multi-line message between a test's "..." and its "ok"; the harness recognises three
 * such shapes over the whole log. (The third never matches current Django, which ends the message with a period;
 * kept for parity.)
 */
const DJANGO_MULTILINE: readonly RegExp[] = [
  new RegExp(
    `${BOL}([^\\n]*?)${WS}\\.\\.\\.${WS}Testing against Django installed in ([\\s\\S]*?) silenced\\)\\.\\nok${EOL}`,
    "g",
  ),
  new RegExp(`${BOL}([^\\n]*?)${WS}\\.\\.\\.${WS}Internal Server Error: \\/([^\\n]*)\\/\\nok${EOL}`, "g"),
  new RegExp(`${BOL}([^\\n]*?)${WS}\\.\\.\\.${WS}System check identified no issues \\(0 silenced\\)\\nok${EOL}`, "g"),
];
const DJANGO_PASS_SUFFIXES = [" ... ok", " ... OK", " ...  OK"] as const;
// Exclusive harness fix for django__django-7188, whose migration output shares the test's line.
const DJANGO_7188_PREFIX = "Applying sites.0002_alter_domain_unique...test_no_migrations";
const VERSION_DOCSTRING = "--version is equivalent to version";

/** Text before the first occurrence of `sep` (Python `s.split(sep)[0]`). */
const before = (s: string, sep: string): string => {
  const i = s.indexOf(sep);
  return i < 0 ? s : s.slice(0, i);
};

/** django `runtests.py --verbosity 2` (unittest verbose output). */
export const parseDjango: LogParser = (log) => {
  const out = new Statuses();
  let prevTest: string | null = null;
  for (const raw of log.split("\n")) {
    let line = pyStrip(raw);
    // A docstring printed on the line after the test name: the harness names the test by it.
    if (line.includes(VERSION_DOCSTRING)) out.set(VERSION_DOCSTRING, "PASSED");
    // Remember the last test that started, for an "ok" printed on a later line.
    if (line.includes(" ... ")) prevTest = before(line, " ... ");
    for (const suffix of DJANGO_PASS_SUFFIXES) {
      if (!line.endsWith(suffix)) continue;
      if (pyStrip(line).startsWith(DJANGO_7188_PREFIX)) line = pyStrip(line.slice(line.indexOf("...") + 3));
      const at = line.lastIndexOf(suffix);
      out.set(at < 0 ? line : line.slice(0, at), "PASSED");
      break;
    }
    if (line.includes(" ... skipped")) out.set(before(line, " ... skipped"), "SKIPPED");
    if (line.endsWith(" ... FAIL")) out.set(before(line, " ... FAIL"), "FAILED");
    if (line.startsWith("FAIL:")) {
      const name = pySplit(line)[1];
      if (name !== undefined) out.set(pyStrip(name), "FAILED");
    }
    if (line.endsWith(" ... ERROR")) out.set(before(line, " ... ERROR"), "ERROR");
    if (line.startsWith("ERROR:")) {
      const name = pySplit(line)[1];
      if (name !== undefined) out.set(pyStrip(name), "ERROR");
    }
    if (pyLstrip(line).startsWith("ok") && prevTest !== null) out.set(prevTest, "PASSED");
  }
  for (const pattern of DJANGO_MULTILINE) {
    for (const m of log.matchAll(pattern)) out.set(m[1]!, "PASSED");
  }
  return out.toObject();
};

export const PARSER_NAMES = [
  "pytest",
  "pytest_options",
  "pytest_v2",
  "matplotlib",
  "seaborn",
  "sympy",
  "django",
] as const;
export type ParserName = (typeof PARSER_NAMES)[number];

export const PARSERS: Readonly<Record<ParserName, LogParser>> = {
  pytest: parsePytest,
  pytest_options: parsePytestOptions,
  pytest_v2: parsePytestV2,
  matplotlib: parseMatplotlib,
  seaborn: parseSeaborn,
  sympy: parseSympy,
  django: parseDjango,
};

/**
 * Repository -> parser: the harness's MAP_REPO_TO_PARSER_PY, plus the two repositories of the spec table that it
 * has no parser for (dbt-core runs pytest; humaneval runs `python test.py`), given the plain pytest parser.
 */
export const REPO_PARSERS: Readonly<Record<string, ParserName>> = {
  "astropy/astropy": "pytest_v2",
  "django/django": "django",
  "marshmallow-code/marshmallow": "pytest",
  "matplotlib/matplotlib": "matplotlib",
  "mwaskom/seaborn": "seaborn",
  "pallets/flask": "pytest",
  "psf/requests": "pytest_options",
  "pvlib/pvlib-python": "pytest",
  "pydata/xarray": "pytest",
  "pydicom/pydicom": "pytest_options",
  "pylint-dev/astroid": "pytest",
  "pylint-dev/pylint": "pytest_options",
  "pytest-dev/pytest": "pytest",
  "pyvista/pyvista": "pytest",
  "scikit-learn/scikit-learn": "pytest_v2",
  "sqlfluff/sqlfluff": "pytest",
  "sphinx-doc/sphinx": "pytest_v2",
  "sympy/sympy": "sympy",
  "dbt-labs/dbt-core": "pytest",
  "swe-bench/humaneval": "pytest",
};

/** Parser for repositories outside the table (SWE-Gym, SWE-smith, custom): nearly all run pytest. */
export const DEFAULT_PARSER: ParserName = "pytest";

/** The harness's per-repo function names (`parse_log_<alias>`), accepted as `log_parser` values. */
const PARSER_ALIASES: Readonly<Record<string, ParserName>> = {
  astroid: "pytest",
  flask: "pytest",
  marshmallow: "pytest",
  pvlib: "pytest",
  pyvista: "pytest",
  sqlfluff: "pytest",
  xarray: "pytest",
  pydicom: "pytest_options",
  requests: "pytest_options",
  pylint: "pytest_options",
  astropy: "pytest_v2",
  scikit: "pytest_v2",
  sphinx: "pytest_v2",
};

const isParserName = (s: string): s is ParserName => (PARSER_NAMES as readonly string[]).includes(s);

/**
 * Resolve a repository ("owner/name": table, else DEFAULT_PARSER) or a parser name ("pytest_v2",
 * "parse_log_pytest_v2", "parse_log_astropy", ...; unknown names throw InvalidInputError).
 */
export function resolveParser(repoOrParser: string): ParserName {
  if (repoOrParser.includes("/")) {
    const exact = REPO_PARSERS[repoOrParser];
    if (exact) return exact;
    const lower = repoOrParser.toLowerCase();
    const folded = Object.entries(REPO_PARSERS).find(([repo]) => repo.toLowerCase() === lower);
    return folded ? folded[1] : DEFAULT_PARSER;
  }
  const key = repoOrParser
    .trim()
    .toLowerCase()
    .replace(/^parse_log_/, "")
    .replaceAll("-", "_");
  if (isParserName(key)) return key;
  const alias = PARSER_ALIASES[key];
  if (alias) return alias;
  throw new InvalidInputError(
    `unknown log parser "${repoOrParser}" (known: ${[...PARSER_NAMES, ...Object.keys(PARSER_ALIASES)].join(", ")})`,
  );
}

/** The parser for a dataset row: its `log_parser` field when present, else its repository's. */
export function parserForInstance(instance: { repo: string; log_parser?: unknown }): ParserName {
  const named = instance.log_parser;
  if (typeof named === "string" && named.trim() !== "") return resolveParser(named);
  return resolveParser(instance.repo);
}

/** Apply a repository's (or a named) parser to some text, as is: no markers involved. */
export function parseLog(repoOrParser: string, text: string): StatusMap {
  return PARSERS[resolveParser(repoOrParser)](text);
}

/** Markers the harness writes into and looks for in test logs. */
export const MARKERS = {
  startTestOutput: ">>>>> Start Test Output",
  endTestOutput: ">>>>> End Test Output",
  applyPatchPass: ">>>>> Applied Patch",
  applyPatchFail: ">>>>> Patch Apply Failed",
  resetFailed: ">>>>> Reset Failed",
  testsError: ">>>>> Tests Errored",
  testsTimeout: ">>>>> Tests Timed Out",
} as const;

export type LogFailure =
  | "patch_apply_failed"
  | "reset_failed"
  | "tests_errored"
  | "tests_timed_out"
  | "missing_markers";

/** Outcome of reading a test log: a status map, or why there is none (the instance then counts as not applied). */
export type LogEval =
  | {
      found: true;
      statusMap: StatusMap /** nothing parsed between the markers, so the whole log was parsed */;
      wholeLog: boolean;
    }
  | { found: false; statusMap: null; reason: LogFailure };

const FAILURE_MARKERS: ReadonlyArray<readonly [string, LogFailure]> = [
  [MARKERS.applyPatchFail, "patch_apply_failed"],
  [MARKERS.resetFailed, "reset_failed"],
  [MARKERS.testsError, "tests_errored"],
  [MARKERS.testsTimeout, "tests_timed_out"],
];

/**
 * The harness's reading of a test log (`get_logs_eval`): a failure marker anywhere, or a missing start/end
 * marker, means no status map; otherwise parse the text between the first start marker and the next end marker,
 * falling back to the whole log when that parses to nothing. `repoOrParser` as for resolveParser.
 */
export function evalTestLog(repoOrParser: string, log: string): LogEval {
  for (const [marker, reason] of FAILURE_MARKERS) {
    if (log.includes(marker)) return { found: false, statusMap: null, reason };
  }
  const { startTestOutput: start, endTestOutput: end } = MARKERS;
  if (!log.includes(start) || !log.includes(end)) return { found: false, statusMap: null, reason: "missing_markers" };
  const section = log.split(start)[1]!.split(end)[0]!;
  const parse = PARSERS[resolveParser(repoOrParser)];
  const statusMap = parse(section);
  if (Object.keys(statusMap).length > 0) return { found: true, statusMap, wholeLog: false };
  return { found: true, statusMap: parse(log), wholeLog: true };
}
