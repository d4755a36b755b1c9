/**
 * Host-side checks around the derivation of an image's chronological `.git` (`image-history.ts`), none of which
 * runs git or follows a link: the image's repository before it (a real directory, nothing in it that would make git
 * read outside it), the derived repository after it (only what the derivation writes: regular files and
 * directories under known names), and the config the derived repository gets, written here from checked values.
 */
import { lstatSync, readdirSync, readFileSync, rmSync, writeFileSync, type Stats } from "node:fs";
import { join, posix } from "node:path";
import { ImageInvalidError } from "../errors.js";
import { KEPT_CONFIG, type DeriveReport } from "./image-history-script.js";

/** A walk of the image's `.git` stops here: more entries than any real repository's metadata has. */
const MAX_SOURCE_ENTRIES = 5_000_000;

/** Files whose presence would make git read outside the repository, or another repository. */
const SOURCE_REFUSED: Record<string, string> = {
  "objects/info/alternates": "objects borrowed from another repository (objects/info/alternates)",
  "objects/info/http-alternates": "objects borrowed from another repository (objects/info/http-alternates)",
  "info/grafts": "grafts, which rewrite its history (info/grafts)",
  commondir: "a worktree of another repository (commondir)",
};

function lstat(path: string): Stats | undefined {
  return lstatSync(path, { throwIfNoEntry: false });
}

/**
 * Where an image may keep its repository, in order: `/testbed` (SWE-bench's images and most others), then the
 * image's `WorkingDir` (SWE-bench Pro's `/app`).
 */
export function repositoryCandidates(workingDir: string | undefined): string[] {
  const dir = workingDir && posix.normalize(workingDir).replace(/\/+$/, "");
  return dir && dir !== TESTBED && dir.startsWith("/") ? [TESTBED, dir] : [TESTBED];
}

const TESTBED = "/testbed";

/**
 * Whether `dir` (absolute, inside the image) is a real directory of the materialized root `root` with a `.git`
 * entry. Each component is checked without following links: a link there would point into the host, not the image.
 */
export function hasRepositoryAt(root: string, dir: string, what: string): boolean {
  let path = root;
  for (const part of dir.split("/").filter(Boolean)) {
    if (part === "." || part === "..") throw new ImageInvalidError(`image ${what}: ${dir} is not a plain path`);
    path = join(path, part);
    const st = lstat(path);
    if (!st) return false;
    if (st.isSymbolicLink()) throw new ImageInvalidError(`image ${what}: ${dir} has a symbolic link on its path`);
    if (!st.isDirectory()) return false;
  }
  return lstat(join(path, ".git")) !== undefined;
}

/**
 * The image's repository `dir` (`hasRepositoryAt`) in the materialized root `root`, checked to derive from.
 * Refused (`ImageInvalidError`): a linked `.git`, a `.git` file (a worktree's or a submodule's), a link anywhere
 * under `.git` but its hooks, alternates, grafts, submodules.
 */
export function sourceRepository(root: string, dir: string, what: string): string {
  const repo = join(root, dir);
  const refuse = (why: string) => new ImageInvalidError(`image ${what}: ${dir}${why}`);
  const git = lstat(join(repo, ".git"));
  if (!git) throw refuse(" has no .git");
  if (git.isSymbolicLink()) throw refuse("/.git is a symbolic link");
  if (!git.isDirectory()) throw refuse("/.git is a file (a worktree's or a submodule's link to another repository)");
  walkSource(join(repo, ".git"), "", refuse);
  return repo;
}

function walkSource(dir: string, rel: string, refuse: (why: string) => Error, seen = { n: 0 }): void {
  for (const name of readdirSync(dir)) {
    const path = rel ? `${rel}/${name}` : name;
    if (path === "hooks") continue; // never run: every git call sets core.hooksPath=/dev/null
    if (++seen.n > MAX_SOURCE_ENTRIES) throw refuse(`/.git has more than ${MAX_SOURCE_ENTRIES} entries`);
    const st = lstatSync(join(dir, name));
    if (st.isSymbolicLink()) throw refuse(`/.git/${path} is a symbolic link`);
    const why = SOURCE_REFUSED[path];
    if (why) throw refuse(`/.git has ${why}`);
    if (path === "modules" && st.isDirectory() && readdirSync(join(dir, name)).length > 0)
      throw refuse("/.git has submodules (modules/), whose repositories are not carried");
    if (st.isDirectory()) walkSource(join(dir, name), path, refuse, seen);
  }
}

/** What the report lines say, each checked; anything else in them is refused. */
export function parseReport(stdout: string, what: string): DeriveReport {
  const bad = (line: string) =>
    new ImageInvalidError(`image ${what}: the derivation of its history reported ${JSON.stringify(line)}`);
  const report: Partial<DeriveReport> & { config: Record<string, string> } = { config: {} };
  for (const line of stdout.split("\n").filter(Boolean)) {
    const [word, ...rest] = line.split(" ");
    const value = rest.join(" ");
    if (word === "head" && /^([0-9a-f]{40}|[0-9a-f]{64})$/.test(value)) report.head = value;
    else if (word === "branch" && (value === "" || isBranchRef(value))) {
      if (value) report.branch = value;
    } else if (word === "format" && (value === "sha1" || value === "sha256")) report.format = value;
    else if (word === "config" && isKeptValue(rest[0] ?? "", rest.slice(1).join(" ")))
      report.config[rest[0]!] = rest.slice(1).join(" ");
    else throw bad(line);
  }
  if (report.head === undefined || report.format === undefined) throw bad(stdout.slice(0, 200));
  return report as DeriveReport;
}

/** `refs/heads/<name>` with a name git itself would accept (its rules, narrowed to plain characters). */
function isBranchRef(ref: string): boolean {
  const name = ref.slice("refs/heads/".length);
  return (
    ref.startsWith("refs/heads/") &&
    /^[A-Za-z0-9._/+-]{1,200}$/.test(name) &&
    !name.split("/").some((p) => p === "" || p.startsWith(".") || p.endsWith(".lock")) &&
    !name.includes("..") &&
    !name.endsWith(".")
  );
}

function isKeptValue(key: string, value: string): boolean {
  return (KEPT_CONFIG as readonly string[]).includes(key) && value.length <= 256 && !/[\x00-\x1f\x7f]/.test(value);
}

/** Top-level names of the derived `.git`, and what each may be. */
const DERIVED_TOP: Record<string, "file" | "dir"> = {
  HEAD: "file",
  config: "file",
  index: "file",
  shallow: "file",
  objects: "dir",
  refs: "dir",
  info: "dir",
};

/**
 * The derived repository (`dir/.git`, as copied out of its sandbox) is exactly what the derivation writes: refused
 * otherwise, as the image's doing.
 */
export function checkDerived(dir: string, report: DeriveReport, what: string): void {
  const refuse = (why: string) =>
    new ImageInvalidError(`image ${what}: the history derived from its repository ${why}`);
  const entries = (p: string): string[] => readdirSync(p);
  if (entries(dir).join() !== ".git") throw refuse("is not one .git directory");
  const git = join(dir, ".git");
  kindIs(git, "dir", ".git", refuse);
  for (const name of entries(git)) {
    const want = DERIVED_TOP[name];
    if (!want) throw refuse(`has an unexpected ${name}`);
    kindIs(join(git, name), want, name, refuse);
  }
  checkObjects(join(git, "objects"), report, refuse);
  checkRefs(join(git, "refs"), report, refuse);
  for (const name of lstat(join(git, "info")) ? entries(join(git, "info")) : [])
    if (name !== "exclude" && name !== "attributes") throw refuse(`has an unexpected info/${name}`);
    else kindIs(join(git, "info", name), "file", `info/${name}`, refuse);
  const head = readFileSync(join(git, "HEAD"), "utf8");
  if (head !== (report.branch ? `ref: ${report.branch}\n` : `${report.head}\n`)) throw refuse("has another HEAD");
  const shallow = lstat(join(git, "shallow")) ? readFileSync(join(git, "shallow"), "utf8") : "";
  if (shallow !== "" && shallow !== `${report.head}\n`) throw refuse("has a shallow file naming other commits");
}

function kindIs(path: string, want: "file" | "dir", name: string, refuse: (why: string) => Error): void {
  const st = lstatSync(path);
  const ok = want === "file" ? st.isFile() : st.isDirectory();
  if (!ok) throw refuse(`has ${name} that is not a ${want === "file" ? "regular file" : "directory"}`);
}

/** Loose objects only (`xx/<rest of the id>`), an empty `info/` and `pack/`. */
function checkObjects(objects: string, report: DeriveReport, refuse: (why: string) => Error): void {
  const rest = report.format === "sha1" ? 38 : 62;
  for (const name of readdirSync(objects)) {
    const path = join(objects, name);
    kindIs(path, "dir", `objects/${name}`, refuse);
    const inside = readdirSync(path);
    if (name === "info" || name === "pack") {
      if (inside.length > 0) throw refuse(`has objects/${name}/${inside[0]}`);
      continue;
    }
    if (!/^[0-9a-f]{2}$/.test(name)) throw refuse(`has an unexpected objects/${name}`);
    for (const o of inside) {
      if (o.length !== rest || !/^[0-9a-f]+$/.test(o)) throw refuse(`has an unexpected objects/${name}/${o}`);
      kindIs(join(path, o), "file", `objects/${name}/${o}`, refuse);
    }
  }
}

/** HEAD's branch alone (or no ref at all, detached), and the empty `tags/` git init makes. */
function checkRefs(refs: string, report: DeriveReport, refuse: (why: string) => Error): void {
  const files: string[] = [];
  const walk = (dir: string, rel: string): void => {
    for (const name of readdirSync(dir)) {
      const path = `${rel}/${name}`;
      const st = lstatSync(join(dir, name));
      if (st.isDirectory()) walk(join(dir, name), path);
      else if (st.isFile()) files.push(path);
      else throw refuse(`has ${path} that is neither a file nor a directory`);
    }
  };
  walk(refs, "refs");
  const want = report.branch ? [report.branch] : [];
  if (files.join() !== want.join())
    throw refuse(`has refs ${files.join(", ") || "none"}, not ${want.join() || "none"}`);
  if (report.branch && readFileSync(join(refs, "..", report.branch), "utf8") !== `${report.head}\n`)
    throw refuse(`has ${report.branch} elsewhere than HEAD's commit`);
}

/**
 * The derived repository's config, written here: its format, what built testbeds set (only mtime and size decide
 * whether a file changed: sandboxes see other inodes and ctimes), no automatic gc (its objects stay loose, as a
 * task's setup needs), no root diffs, and the image's kept values. Nothing else of the image's: no remote, no hook,
 * no filter.
 */
export function writeConfig(dir: string, report: DeriveReport): void {
  const sha256 = report.format === "sha256";
  const sections: Record<string, Record<string, string>> = {
    core: {
      repositoryformatversion: sha256 ? "1" : "0",
      filemode: "true",
      bare: "false",
      logallrefupdates: "true",
      checkStat: "minimal",
      trustctime: "false",
    },
    gc: { auto: "0" },
    // HEAD is the boundary: `git show` of it prints its message, not its whole tree as one diff against nothing.
    log: { showRoot: "false" },
    ...(sha256 ? { extensions: { objectformat: "sha256" } } : {}),
  };
  for (const [key, value] of Object.entries(report.config)) {
    const [section, name] = key.split(".") as [string, string];
    sections[section] = { ...sections[section], [name]: value };
  }
  const quote = (v: string): string => `"${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
  const text = Object.entries(sections)
    .map(
      ([s, kv]) =>
        `[${s}]\n${Object.entries(kv)
          .map(([k, v]) => `\t${k} = ${quote(v)}\n`)
          .join("")}`,
    )
    .join("");
  const file = join(dir, ".git", "config");
  rmSync(file, { force: true });
  writeFileSync(file, text, { mode: 0o644 });
}
