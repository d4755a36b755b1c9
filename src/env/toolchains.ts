/**
 * Registry of host Python interpreters ("toolchains"), by version.
 *
 * A toolchain is bind-mounted read-only at the same path in every sandbox, so a venv built against it keeps
 * working (its `home =` and shebangs point at the host path). Sources, in order of precedence:
 *   1. `<home>/toolchains.json`: {"3.9": "/path/to/prefix" | "/path/to/bin/python3.9"} (explicit wins);
 *   2. pyenv: `$PYENV_ROOT/versions/X.Y.Z` (default ~/.pyenv);
 *   3. conda: ~/miniconda3, ~/anaconda3, ~/miniforge3, ~/mambaforge, /opt/conda, /opt/miniconda3 (base + envs/*);
 *   4. `pythonX.Y` on PATH (pyenv shims skipped: they are scripts that dispatch, not interpreters).
 * A request "3.9" matches the newest 3.9.x; "3.9.18" matches exactly.
 */
import { existsSync, readFileSync, readdirSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve, sep } from "node:path";
import { NotFoundError, InvalidInputError } from "../errors.js";
import { resolveHome } from "../util/home.js";
import { run } from "../util/run.js";

export type ToolchainSource = "config" | "pyenv" | "conda" | "path";

export interface Toolchain {
  /** Full version, e.g. "3.9.18". */
  version: string;
  /** Installation prefix (sys.prefix), as found (not symlink-resolved). */
  prefix: string;
  /** Absolute path of the interpreter binary. */
  python: string;
  /** Host directories to bind read-only at the same path in sandboxes (empty for system pythons under /usr). */
  mounts: string[];
  source: ToolchainSource;
}

export interface ToolchainOptions {
  /** minisandbox home (for toolchains.json); default resolveHome(). */
  home?: string;
  /** Explicit config file instead of <home>/toolchains.json. */
  configFile?: string;
  /** Environment to read PYENV_ROOT, PATH from (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** User home for ~/.pyenv, ~/miniconda3 … (default os.homedir()). */
  userHome?: string;
  /** Conda roots to scan instead of the defaults. */
  condaRoots?: string[];
}

/** Directories every sandbox already sees read-only; nothing under them needs its own mount. */
const SYSTEM_DIRS = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"];

interface Candidate {
  version: string;
  prefix: string;
  python: string;
  source: ToolchainSource;
}

/** Every interpreter found, config entries first, then newest version first within each source. */
export async function listToolchains(opts: ToolchainOptions = {}): Promise<Toolchain[]> {
  const found = await discover(opts);
  return Promise.all(found.map(async (c) => ({ ...c, mounts: await mountsFor(c.prefix, c.python) })));
}

/** The toolchain for a version ("3.9" -> newest 3.9.x; config entries win); NotFoundError lists what exists. */
export async function findToolchain(version: string, opts: ToolchainOptions = {}): Promise<Toolchain> {
  const want = String(version).trim();
  if (!/^\d+(\.\d+){0,2}$/.test(want))
    throw new InvalidInputError(`invalid Python version ${JSON.stringify(version)} (expected e.g. 3.9 or 3.9.18)`);
  const all = await discover(opts);
  const matches = all.filter((t) => versionMatches(t.version, want));
  const pick =
    matches.find((t) => t.source === "config") ?? matches.sort((a, b) => compareVersion(b.version, a.version))[0];
  if (!pick) {
    const available = [...new Set(all.map((t) => t.version))].sort(compareVersion);
    throw new NotFoundError(
      `Python ${want} is not installed; available: ${available.length ? available.join(", ") : "none"} ` +
        `(install it with pyenv, or map it in ${configPath(opts)}: {"${want}": "/path/to/prefix"})`,
    );
  }
  return { ...pick, mounts: await mountsFor(pick.prefix, pick.python) };
}

/** All candidates, deduplicated by the real path of the binary (e.g. /bin -> /usr/bin). */
async function discover(opts: ToolchainOptions): Promise<Candidate[]> {
  const env = opts.env ?? process.env;
  const userHome = opts.userHome ?? homedir();
  const pyenvRoot = env.PYENV_ROOT || join(userHome, ".pyenv");
  const seen = new Set<string>();
  const keep = (c: Candidate) => {
    const id = safeRealpath(c.python);
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  };
  const early = [
    ...(await fromConfig(opts)),
    ...fromPyenv(pyenvRoot),
    ...fromConda(opts.condaRoots ?? defaultCondaRoots(userHome)),
  ].filter(keep);
  // PATH entries cost a process each to learn their version: skip binaries already known.
  return [...early, ...(await fromPath(env.PATH ?? "", pyenvRoot, seen))];
}

function versionMatches(full: string, want: string): boolean {
  const f = full.split(".");
  return want.split(".").every((p, i) => f[i] === p);
}

function compareVersion(a: string, b: string): number {
  const pa = a.split(".").map((x) => parseInt(x, 10));
  const pb = b.split(".").map((x) => parseInt(x, 10));
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

function configPath(opts: ToolchainOptions): string {
  return opts.configFile ?? join(resolveHome(opts.home), "toolchains.json");
}

// ------------------------------------------------------------------------------------------------ sources

async function fromConfig(opts: ToolchainOptions): Promise<Candidate[]> {
  const file = configPath(opts);
  if (!existsSync(file)) return [];
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new InvalidInputError(`${file}: invalid JSON (${(e as Error).message})`);
  }
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new InvalidInputError(`${file}: expected {"<version>": "/path/to/prefix", …}`);
  }
  const out: Candidate[] = [];
  for (const [key, value] of Object.entries(data)) {
    if (typeof value !== "string" || !isAbsolute(value))
      throw new InvalidInputError(`${file}: "${key}" must map to an absolute path`);
    const python = interpreterIn(value, key);
    if (!python)
      throw new InvalidInputError(
        `${file}: "${key}" -> ${value}: no python interpreter there ` +
          `(looked for bin/python${key}, bin/python3, bin/python)`,
      );
    // Ask the interpreter itself: the key is a claim, the binary is the truth.
    const info = await interpreterInfo(python);
    if (!info) throw new InvalidInputError(`${file}: "${key}" -> ${python} does not run`);
    if (!versionMatches(info.version, key))
      throw new InvalidInputError(`${file}: "${key}" -> ${python} is Python ${info.version}`);
    out.push({
      version: info.version,
      prefix: statSync(value).isDirectory() ? value : info.prefix,
      python,
      source: "config",
    });
  }
  return out;
}

/** A prefix directory (bin/pythonX.Y…) or the binary itself. */
function interpreterIn(path: string, version: string): string | undefined {
  if (existsSync(path) && statSync(path).isFile()) return path;
  const minor = version.split(".").slice(0, 2).join(".");
  const major = version.split(".")[0];
  return [`python${minor}`, `python${major}`, "python"].map((n) => join(path, "bin", n)).find(isExecutableFile);
}

function fromPyenv(root: string): Candidate[] {
  const versions = join(root, "versions");
  const out: Candidate[] = [];
  for (const name of listDir(versions)) {
    const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(name); // skip virtualenvs, "system", dev builds like 3.14-dev
    if (!m) continue;
    const prefix = join(versions, name);
    const python = [`python${m[1]}.${m[2]}`, `python${m[1]}`, "python"]
      .map((n) => join(prefix, "bin", n))
      .find(isExecutableFile);
    if (python) out.push({ version: name, prefix, python, source: "pyenv" });
  }
  return out.sort((a, b) => compareVersion(b.version, a.version));
}

function defaultCondaRoots(userHome: string): string[] {
  return ["miniconda3", "anaconda3", "miniforge3", "mambaforge"]
    .map((d) => join(userHome, d))
    .concat(["/opt/conda", "/opt/miniconda3"]);
}

function fromConda(roots: string[]): Candidate[] {
  const out: Candidate[] = [];
  for (const root of roots) {
    const prefixes = [root, ...listDir(join(root, "envs")).map((e) => join(root, "envs", e))];
    for (const prefix of prefixes) {
      // conda-meta/python-3.10.13-h955ad1f_0.json names the interpreter version without running it.
      const meta = listDir(join(prefix, "conda-meta"))
        .map((f) => /^python-(\d+\.\d+\.\d+)-.*\.json$/.exec(f)?.[1])
        .find((v): v is string => v !== undefined);
      if (!meta) continue;
      const [maj, min] = meta.split(".");
      const python = [`python${maj}.${min}`, `python${maj}`, "python"]
        .map((n) => join(prefix, "bin", n))
        .find(isExecutableFile);
      if (python) out.push({ version: meta, prefix, python, source: "conda" });
    }
  }
  return out.sort((a, b) => compareVersion(b.version, a.version));
}

async function fromPath(pathVar: string, pyenvRoot: string, seen: Set<string>): Promise<Candidate[]> {
  const out: Candidate[] = [];
  const shims = resolve(pyenvRoot, "shims");
  for (const dir of pathVar.split(":").filter(Boolean)) {
    if (resolve(dir) === shims || dir.split(sep).includes("shims")) continue;
    for (const name of listDir(dir)) {
      if (!/^python\d\.\d+$/.test(name)) continue;
      const python = join(dir, name);
      if (!isExecutableFile(python) || seen.has(safeRealpath(python))) continue;
      seen.add(safeRealpath(python));
      const info = await interpreterInfo(python);
      // Use the real binary: a PATH entry is often a symlink into the installation, which is what must be mounted.
      if (info) out.push({ version: info.version, prefix: info.prefix, python: safeRealpath(python), source: "path" });
    }
  }
  return out.sort((a, b) => compareVersion(b.version, a.version));
}

/** Version and sys.prefix, from the interpreter (works on Python 2.7 too). */
async function interpreterInfo(python: string): Promise<{ version: string; prefix: string } | undefined> {
  const code = "import sys, json; print(json.dumps(['.'.join(map(str, sys.version_info[:3])), sys.prefix]))";
  try {
    const r = await run(python, ["-E", "-S", "-c", code], { timeoutMs: 10_000, env: { PATH: "/usr/bin:/bin" } });
    if (r.code !== 0) return undefined;
    const [version, prefix] = JSON.parse(r.stdout.trim()) as [string, string];
    return { version, prefix };
  } catch {
    return undefined;
  }
}

// ------------------------------------------------------------------------------------------------ mounts

/**
 * What a sandbox must see for this interpreter to run: its prefix (and the prefix's real location if it is
 * a symlink), the binary's directory, the real location of the binary when it lives elsewhere (conda/venv
 * symlinks), and the directories of shared libraries it loads from outside the system directories.
 */
async function mountsFor(prefix: string, python: string): Promise<string[]> {
  const dirs = [prefix, safeRealpath(prefix), dirname(python)]; // venvs record the binary's directory as `home`
  const realBin = safeRealpath(python);
  if (!isInside(realBin, safeRealpath(prefix))) dirs.push(dirname(dirname(realBin)));
  for (const lib of await sharedLibs(realBin)) dirs.push(dirname(lib));
  return minimalDirs(dirs.filter((d) => !SYSTEM_DIRS.some((s) => isInside(d, s))));
}

async function sharedLibs(binary: string): Promise<string[]> {
  try {
    const r = await run("ldd", [binary], { timeoutMs: 10_000 });
    if (r.code !== 0) return [];
    // "libpython3.9.so.1.0 => /opt/pyenv/versions/3.9.18/lib/libpython3.9.so.1.0 (0x…)"
    return [...r.stdout.matchAll(/=>\s+(\/\S+)/g)].map((m) => safeRealpath(m[1]!));
  } catch {
    return []; // no ldd (static or non-glibc systems): the prefix mount is the best we can do
  }
}

/** Drop duplicates and directories inside another listed directory. */
function minimalDirs(dirs: string[]): string[] {
  const unique = [...new Set(dirs.map((d) => resolve(d)))].sort();
  return unique.filter((d) => !unique.some((o) => o !== d && isInside(d, o)));
}

function isInside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);
}

function safeRealpath(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function isExecutableFile(p: string): boolean {
  try {
    const st = statSync(p);
    return st.isFile() && (st.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}
