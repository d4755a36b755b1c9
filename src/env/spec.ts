/**
 * Instance -> EnvSpec, and the spec's key.
 *
 * Sources, merged field by field (later wins):
 *   1. the built-in table `data/swebench-python-specs.json` (SWE-bench harness constants), by repo and version;
 *      SWE-smith snapshots, which that table does not know, start from SWE-smith's Python profile defaults;
 *   2. a `--specs FILE` override: `{"*": {fields}}` (every instance, applied first),
 *      `{"<owner>/<name>": {"<version>" | "*": {fields}}}` ("*" = every version, applied before the exact version)
 *      and/or `{"<instance_id>": {fields}}` (applied after the repo entries); `--base IMAGE` is one more `"*"`
 *      entry, `{"base": IMAGE}`, after the file's;
 *   3. the dataset row's own `spec` object.
 * Field mapping onto EnvSpec: python, packages, pip_packages, pre_install, install, eval_commands, test_cmd
 * (a list is joined with " && "), env (plus the table's env_vars_test), repo/commit (default: the instance's
 * repo and base_commit); every other field goes to `extra`, which also records where requirement files live
 * (reqs_paths / env_yml_paths) and the instance's environment_setup_commit when `packages` names such a file.
 * A table entry without test_cmd (dbt-core) yields test_cmd "".
 */
import { readFileSync, statSync, existsSync } from "node:fs";
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { HISTORY_CHOICES, isHistoryPolicy, type EnvSpec, type HistoryPolicy } from "./types.js";
import { InvalidInputError, NotFoundError } from "../errors.js";
import { canonicalReference } from "./images/reference.js";
import type { Instance } from "../tasks/types.js";

export type SpecFields = Record<string, unknown>;

/** The shape of data/swebench-python-specs.json (only what we read). */
export interface SpecTable {
  specs: Record<string, Record<string, SpecFields>>;
  reqs_paths?: Record<string, string[]>;
  env_yml_paths?: Record<string, string[]>;
}

/** A parsed `--specs` file. */
export interface SpecOverrides {
  /** File name, for error messages. */
  source: string;
  /** `"*"`: fields for every instance (e.g. `{"history": "full"}`), applied before the repo entries. */
  all?: SpecFields;
  repos: Record<string, Record<string, SpecFields>>;
  instances: Record<string, SpecFields>;
}

export interface SpecOptions {
  /** Path of a `--specs` override file (parsed once per path and mtime). */
  specsFile?: string;
  /** Already parsed overrides (instead of, or in addition to, specsFile: these apply after the file's). */
  overrides?: SpecOverrides;
  /** Use this table instead of the built-in one. */
  table?: SpecTable;
  /**
   * Every instance's base image (`--base`): `{"*": {"base": …}}` applied after the overrides' own `"*"`, so a repo or
   * instance entry, or the row's `spec`, naming another (or `"base": null`, the host) still wins for its rows.
   */
  base?: string;
}

/**
 * SWE-smith's PythonProfile defaults (python 3.10, `python -m pip install -e .`, its pytest flags); pytest is
 * listed because SWE-smith's per-repo conda exports are not published with the dataset, and -rA is added so
 * the standard SWE-bench pytest log parser reads the result. Override per snapshot with --specs.
 */
export const SWESMITH_DEFAULTS: Readonly<SpecFields> = Object.freeze({
  python: "3.10",
  install: "python -m pip install -e .",
  pip_packages: ["pytest"],
  test_cmd: "pytest --disable-warnings --color=no --tb=no --verbose -rA",
});

const TABLE_FILE = "data/swebench-python-specs.json";
/** Bump when the meaning of a spec field for the builder changes, so old layers are not reused. */
const KEY_SCHEMA = "minisandbox-env-v2";
/** The schema of full-history layers: their keys stay what they were before testbeds became chronological. */
const FULL_HISTORY_SCHEMA = "minisandbox-env-v1";
const MAPPED = new Set([
  "repo",
  "commit",
  "python",
  "packages",
  "pip_packages",
  "pre_install",
  "install",
  "eval_commands",
  "test_cmd",
  "env",
  "env_vars_test",
  "extra",
  "history",
  "base",
]);

let builtinTable: SpecTable | undefined;

/** Locate data/ by walking up from this module: works from src/env (ts) and dist/src/env (compiled). */
export function builtinTablePath(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 6; up++) {
    const candidate = join(dir, TABLE_FILE);
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new NotFoundError(`built-in spec table ${TABLE_FILE} not found above ${fileURLToPath(import.meta.url)}`);
}

/** The shipped SWE-bench table (parsed once). */
export function builtinSpecTable(): SpecTable {
  if (!builtinTable) {
    const parsed = parseJsonFile(builtinTablePath());
    if (!isRecord(parsed) || !isRecord(parsed.specs))
      throw new InvalidInputError(`${builtinTablePath()}: no "specs" object`);
    builtinTable = parsed as unknown as SpecTable;
  }
  return builtinTable;
}

/** Versions the table knows for a repo, in natural order ([] if the repo is unknown). */
export function knownVersions(repo: string, table: SpecTable = builtinSpecTable()): string[] {
  return Object.keys(table.specs[repo] ?? {}).sort(compareVersions);
}

function compareVersions(a: string, b: string): number {
  const pa = a.replace(/^v/, "").split(".").map(Number);
  const pb = b.replace(/^v/, "").split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? -1) - (pb[i] ?? -1);
    if (d !== 0 && !Number.isNaN(d)) return d;
  }
  return a.localeCompare(b);
}

// ---------------------------------------------------------------------------------------------- overrides

const overrideCache = new Map<string, { stamp: string; value: SpecOverrides }>();

/** Parse a `--specs` file. Keys with "/" are repos (version -> fields), others instance ids; "_*" keys are comments. */
export function loadSpecOverrides(file: string): SpecOverrides {
  let stamp: string;
  try {
    const st = statSync(file);
    stamp = `${st.mtimeMs}:${st.size}`;
  } catch {
    throw new NotFoundError(`specs file not found: ${file}`);
  }
  const cached = overrideCache.get(file);
  if (cached && cached.stamp === stamp) return cached.value;
  const value = parseOverrides(parseJsonFile(file), file);
  overrideCache.set(file, { stamp, value });
  return value;
}

/** Validate an already-parsed override object (same format as the file). */
export function parseOverrides(data: unknown, source = "specs"): SpecOverrides {
  if (!isRecord(data)) throw new InvalidInputError(`${source}: expected a JSON object`);
  const out: SpecOverrides = { source, repos: {}, instances: {} };
  const addRepo = (repo: string, versions: unknown) => {
    if (!isRecord(versions)) throw new InvalidInputError(`${source}: "${repo}" must map versions to spec objects`);
    for (const [version, fields] of Object.entries(versions)) {
      if (!isRecord(fields)) {
        throw new InvalidInputError(
          `${source}: "${repo}" -> "${version}" must be an object of spec fields ` +
            `(repo entries map a version, or "*" for all versions, to fields: {"${repo}": {"*": {"${version}": …}}})`,
        );
      }
    }
    out.repos[repo] = { ...(out.repos[repo] ?? {}), ...(versions as Record<string, SpecFields>) };
  };
  for (const [key, value] of Object.entries(data)) {
    if (key.startsWith("_")) continue;
    if (key === "specs" && isRecord(value)) {
      // The built-in table's own format: {"specs": {repo: {version: fields}}}.
      for (const [repo, versions] of Object.entries(value)) addRepo(repo, versions);
    } else if (key === "*") {
      if (!isRecord(value)) throw new InvalidInputError(`${source}: "*" must be an object of spec fields`);
      out.all = { ...(out.all ?? {}), ...value };
    } else if (key.includes("/")) {
      addRepo(key, value);
    } else {
      if (!isRecord(value))
        throw new InvalidInputError(`${source}: instance entry "${key}" must be an object of spec fields`);
      out.instances[key] = value;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- lookup

interface Layer {
  from: string;
  fields: SpecFields;
}

/** Build the EnvSpec of an instance (see the module comment for sources and precedence). */
export function specForInstance(instance: Instance, opts: SpecOptions = {}): EnvSpec {
  const table = opts.table ?? builtinSpecTable();
  const { layers, overrides, own } = specLayers(instance, opts, table);
  // "*" alone is no spec: an instance still needs a source of its own.
  if (own === 0) throw new NotFoundError(unknownSpecMessage(instance, table, overrides));
  return toEnvSpec(instance, layers, table);
}

/**
 * The testbed's history an instance asks for: its spec's `history` from the same sources, in the same precedence,
 * `"chronological"` when none says `"full"`. Also for a row with no whole spec (one that runs on an image).
 */
export function historyForInstance(instance: Instance, opts: SpecOptions = {}): HistoryPolicy {
  const { layers } = specLayers(instance, opts, opts.table ?? builtinSpecTable());
  return historyField(new SpecFieldReader(instance, layers));
}

/** Every source of an instance's spec that has something for it, lowest precedence first; `own`: those not "*". */
function specLayers(
  instance: Instance,
  opts: SpecOptions,
  table: SpecTable,
): { layers: Layer[]; overrides: SpecOverrides[]; own: number } {
  const overrides = [opts.specsFile ? loadSpecOverrides(opts.specsFile) : undefined, opts.overrides].filter(
    (o): o is SpecOverrides => o !== undefined,
  );
  const { repo, version, instance_id: id } = instance;
  const layers: Layer[] = [];
  const tableEntry = version !== undefined ? table.specs[repo]?.[version] : undefined;
  if (tableEntry) layers.push({ from: `built-in table ${repo} ${version}`, fields: tableEntry });
  else if (instance.task_format === "swesmith")
    layers.push({ from: "SWE-smith defaults", fields: { ...SWESMITH_DEFAULTS } });
  for (const o of overrides) {
    const entry = o.repos[repo];
    if (entry?.["*"]) layers.push({ from: `${o.source} ${repo} *`, fields: entry["*"] });
    if (version !== undefined && entry?.[version])
      layers.push({ from: `${o.source} ${repo} ${version}`, fields: entry[version] });
  }
  for (const o of overrides) {
    if (o.instances[id]) layers.push({ from: `${o.source} ${id}`, fields: o.instances[id] });
  }
  if (instance.spec) layers.push({ from: `row spec of ${id}`, fields: instance.spec });
  const own = layers.length;
  // Fields for every instance go right above the table or SWE-smith defaults: everything more specific wins.
  const all = overrides.flatMap((o) => (o.all ? [{ from: `${o.source} *`, fields: o.all }] : []));
  if (opts.base !== undefined) all.push({ from: "the base option (--base)", fields: { base: opts.base } });
  const base = tableEntry || instance.task_format === "swesmith" ? 1 : 0;
  layers.splice(base, 0, ...all);
  return { layers, overrides, own };
}

function unknownSpecMessage(instance: Instance, table: SpecTable, overrides: SpecOverrides[]): string {
  const { repo, version, instance_id: id } = instance;
  const example = `{"${repo}": {"${version ?? "*"}": {"python": "3.x", …}}}`;
  const hint = `; give one with --specs FILE (${example}) or a "spec" field in the row`;
  if (version === undefined)
    return `instance ${id} has no "version", so no environment spec can be looked up for ${repo}${hint}`;
  const fromOverrides = overrides.flatMap((o) => Object.keys(o.repos[repo] ?? {}));
  const known = [...new Set([...knownVersions(repo, table), ...fromOverrides])].sort(compareVersions);
  if (known.length > 0)
    return (
      `no environment spec for ${repo} version ${version} (instance ${id}); ` +
      `known versions of ${repo}: ${known.join(", ")}${hint}`
    );
  const repos = Object.keys(table.specs).sort();
  const table_ = `the built-in table knows ${repos.length} repositories (${repos.join(", ")})`;
  return `no environment spec for ${repo} (instance ${id}): ${table_}${hint}`;
}

function toEnvSpec(instance: Instance, layers: Layer[], table: SpecTable): EnvSpec {
  const fields = new SpecFieldReader(instance, layers);
  const python = fields.str("python");
  if (!python) {
    const sources = layers.map((l) => l.from).join(", ");
    throw new InvalidInputError(
      `no python version in the environment spec of ${instance.instance_id} (sources: ${sources})`,
    );
  }
  const repo = fields.str("repo") ?? instance.repo;
  const packages = fields.str("packages");
  const extra = extraFields(fields, { instance, table, repo, packages });
  const spec: EnvSpec = {
    repo,
    commit: fields.str("commit") ?? instance.base_commit,
    python,
    pip_packages: fields.list("pip_packages"),
    pre_install: fields.list("pre_install"),
    eval_commands: fields.list("eval_commands"),
    test_cmd: fields.command("test_cmd") ?? "",
    env: { ...fields.envMap("env_vars_test"), ...fields.envMap("env") },
  };
  if (packages !== undefined) spec.packages = packages;
  const install = fields.command("install");
  if (install !== undefined) spec.install = install;
  if (Object.keys(extra).length > 0) spec.extra = extra;
  if (historyField(fields) === "full") spec.history = "full";
  const base = fields.str("base");
  if (base !== undefined) spec.base = baseImage(base, fields);
  return spec;
}

function historyField(fields: SpecFieldReader): HistoryPolicy {
  const history = fields.str("history") ?? "chronological";
  if (!isHistoryPolicy(history)) throw fields.bad("history", HISTORY_CHOICES);
  return history;
}

/** A spec's base image, by its canonical name (so that `debian:12` and `docker.io/library/debian:12` share a key). */
function baseImage(ref: string, fields: SpecFieldReader): string {
  try {
    return canonicalReference(ref);
  } catch {
    throw fields.bad("base", `an image reference such as docker.io/library/debian:12, not ${JSON.stringify(ref)}`);
  }
}

/** The layers merged field by field (later ones win), read with the type each field must have. */
class SpecFieldReader {
  readonly merged: SpecFields = {};
  private readonly origin = new Map<string, string>();

  constructor(
    private readonly instance: Instance,
    layers: Layer[],
  ) {
    for (const layer of layers) {
      for (const [k, v] of Object.entries(layer.fields)) {
        if (v === undefined) continue;
        this.merged[k] = v;
        this.origin.set(k, layer.from);
      }
    }
  }

  bad(field: string, want: string): InvalidInputError {
    const from = this.origin.get(field);
    return new InvalidInputError(
      `spec field "${field}" for ${this.instance.instance_id} must be ${want} (from ${from})`,
      { field },
    );
  }

  str(f: string): string | undefined {
    const v = this.merged[f];
    if (v === undefined || v === null) return undefined;
    if (typeof v === "string") return v;
    if (typeof v === "number" && f === "python") return String(v);
    throw this.bad(f, "a string");
  }

  list(f: string): string[] {
    const v = this.merged[f];
    if (v === undefined || v === null) return [];
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return [...v];
    throw this.bad(f, "a list of strings");
  }

  /** A command, or a list of them joined with ` && `. */
  command(f: string): string | undefined {
    const v = this.merged[f];
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v.join(" && ");
    return this.str(f);
  }

  envMap(f: string): Record<string, string> {
    const v = this.merged[f];
    if (v === undefined || v === null) return {};
    if (!isRecord(v)) throw this.bad(f, "an object of environment variables");
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => {
        if (typeof x !== "string" && typeof x !== "number" && typeof x !== "boolean")
          throw this.bad(f, "an object of string values");
        return [k, String(x)];
      }),
    );
  }
}

/** Fields with no EnvSpec member, `extra` itself, and where SWE-bench reads requirement files from. */
function extraFields(
  fields: SpecFieldReader,
  o: { instance: Instance; table: SpecTable; repo: string; packages: string | undefined },
): Record<string, unknown> {
  const { instance, table, repo, packages } = o;
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields.merged)) if (!MAPPED.has(k)) extra[k] = v;
  if (fields.merged.extra !== undefined) {
    if (!isRecord(fields.merged.extra)) throw fields.bad("extra", "an object");
    Object.assign(extra, fields.merged.extra);
  }
  // SWE-bench reads requirements.txt / environment.yml from these paths at environment_setup_commit.
  if (packages === "requirements.txt" && table.reqs_paths?.[repo]) extra.reqs_paths ??= table.reqs_paths[repo];
  if (packages === "environment.yml" && table.env_yml_paths?.[repo]) extra.env_yml_paths ??= table.env_yml_paths[repo];
  if ((packages === "requirements.txt" || packages === "environment.yml") && instance.environment_setup_commit) {
    extra.environment_setup_commit ??= instance.environment_setup_commit;
  }
  return extra;
}

// ---------------------------------------------------------------------------------------------- key

/**
 * Hex sha256 naming the layer a spec builds. Covers what changes the built trees: repo, commit, python,
 * packages, pip_packages, pre_install, install, env, extra, the base image (when there is one: keys without it are
 * unchanged), and the history policy (through the schema tag: a
 * chronological testbed and a full-history one never share a key, and full-history keys are the ones layers had
 * before chronological testbeds, so such stores stay valid). Not test_cmd or eval_commands: they run at
 * evaluation time, so specs differing only there share a layer. A builder that wants more in the key (e.g.
 * the exact interpreter patch version) can put it in `extra` before keying.
 */
export function specKey(spec: EnvSpec): string {
  const full = spec.history === "full";
  const keyed = {
    schema: full ? FULL_HISTORY_SCHEMA : KEY_SCHEMA,
    repo: spec.repo,
    commit: spec.commit,
    python: spec.python,
    packages: spec.packages,
    pip_packages: spec.pip_packages,
    pre_install: spec.pre_install,
    install: spec.install,
    env: spec.env,
    extra: spec.extra && Object.keys(spec.extra).length > 0 ? spec.extra : undefined,
    base: spec.base,
  };
  return createHash("sha256").update(canonicalJson(keyed)).digest("hex");
}

/** JSON with object keys sorted at every level and undefined members dropped. */
export function canonicalJson(value: unknown): string {
  if (value === undefined) return "null";
  if (value === null || typeof value !== "object") {
    if (typeof value === "bigint") return JSON.stringify(value.toString());
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v)).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
}

// ---------------------------------------------------------------------------------------------- helpers

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function parseJsonFile(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new NotFoundError(`cannot read ${file}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new InvalidInputError(`${file}: invalid JSON (${(e as Error).message})`);
  }
}
