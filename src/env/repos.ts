import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { run, runOk } from "../util/run.js";
import { InvalidInputError, NotFoundError } from "../errors.js";
import type { HistoryPolicy } from "./types.js";
import { CONVERSION_ATTRIBUTES, indexEntries, plainPaths, type IndexEntry } from "./source-links.js";

/**
 * Where a repository's history comes from: `--repos DIR` (local clones or bare mirrors at DIR/<owner>/<name>[.git]),
 * else a mirror in the home cloned once from GitHub.
 */
export async function repoSource(repo: string, opts: { reposDir?: string; home: string }): Promise<string> {
  if (!/^[\w.-]+\/[\w.-]+$/.test(repo))
    throw new InvalidInputError(`invalid repository name ${JSON.stringify(repo)} (expected owner/name)`);
  if (opts.reposDir) {
    for (const candidate of [join(opts.reposDir, repo), join(opts.reposDir, `${repo}.git`)]) {
      if (existsSync(candidate)) return candidate;
    }
    throw new NotFoundError(
      `repository ${repo} not found under --repos ${opts.reposDir} (looked for ${repo} and ${repo}.git)`,
    );
  }
  const mirror = join(opts.home, "repos", `${repo}.git`);
  if (!existsSync(mirror)) {
    mkdirSync(dirname(mirror), { recursive: true });
    const tmp = `${mirror}.tmp-${process.pid}`;
    const url = `https://github.com/${repo}.git`;
    const r = await run("git", ["clone", "--mirror", "--quiet", url, tmp]);
    if (r.code !== 0) {
      rmSync(tmp, { recursive: true, force: true });
      // git's last line, without its "fatal: unable to access '<url>': " preamble: the cause, first.
      const last = r.stderr.trim().split("\n").pop() ?? "";
      const why = last.replace(/^fatal: /, "").replace(/^unable to access '[^']*': /, "") || `git exit ${r.code}`;
      throw new Error(`repository ${repo} could not be cloned from ${url}: ${why}`);
    }
    await runOk("mv", [tmp, mirror]);
  }
  return mirror;
}

/**
 * A real checkout at `commit`, made like SWE-bench images: detached HEAD, no remote. `history: "full"` clones
 * every ref the source has (the old behaviour: the fix and later commits are one `git log --all` away).
 * `"chronological"` (the default) keeps only what the commit reaches, so nothing that postdates it is in the
 * testbed: no ref, tag, stash, note, reflog, remote, FETCH_HEAD/ORIG_HEAD, commit-graph or unreachable object.
 */
export async function checkoutTestbed(
  source: string,
  commit: string,
  dest: string,
  opts: {
    history?: HistoryPolicy;
    looseObjects?: boolean;
    step?: StepTimer;
    packs?: PackSource;
    sources?: FileSource;
  } = {},
): Promise<PackRange[]> {
  const step = opts.step ?? ((_name, fn) => fn());
  const resolved = (
    await runOk("git", ["-C", source, "rev-parse", "--verify", "--quiet", `${commit}^{commit}`], GIT_ENV).catch(
      () => "",
    )
  ).trim();
  if (!resolved) throw new NotFoundError(`commit ${commit} not found in ${source}`);
  const git = (...args: string[]): Promise<string> => runOk("git", ["-C", dest, ...args], GIT_ENV);
  let ranges: PackRange[] = [];
  if (opts.history === "full") {
    await step("history", () => runOk("git", ["clone", "--quiet", "--no-checkout", source, dest], GIT_ENV));
    await step("checkout", async () => {
      await git("checkout", "--quiet", "--detach", resolved);
      await git("remote", "remove", "origin");
      await configure(git);
    });
  } else {
    await step("history", async () => {
      await runOk("git", ["init", "--quiet", "--template=", dest], GIT_ENV);
      const packs = opts.looseObjects ? undefined : opts.packs;
      ranges = await packAncestry(source, resolved, join(dest, ".git", "objects", "pack"), packs);
      if (opts.looseObjects) await unpackObjects(dest);
    });
    await step("checkout", async () => {
      await git("-c", "core.logAllRefUpdates=false", "update-ref", "--no-deref", "HEAD", resolved);
      if (opts.sources && !opts.looseObjects) await checkoutWith(opts.sources, dest, git);
      else await git("read-tree", "-u", "--reset", "HEAD");
      for (const f of ["logs", "ORIG_HEAD", "FETCH_HEAD", "description"]) rmSync(join(dest, ".git", f), FORCE);
      await configure(git);
    });
  }
  return ranges;
}

/**
 * HEAD's tree into the work tree: the files `sources` links (`source-links.ts`: the very bytes of their blobs, where
 * git converts nothing), git writing the rest. The linked ones get their index stat data at the build's refresh.
 */
async function checkoutWith(
  sources: FileSource,
  dest: string,
  git: (...args: string[]) => Promise<string>,
): Promise<void> {
  await git("read-tree", "HEAD");
  const entries = indexEntries(await git("ls-files", "-s", "-z"));
  const eol = await git("config", "--get-regexp", "^core\\.(autocrlf|eol)$").catch(() => "");
  const converts = /^core\.autocrlf (true|yes|on|1)$|^core\.eol crlf$/im.test(eol);
  const input = (paths: string[]) => paths.map((p) => `${p}\0`).join("");
  const attrs = ["-C", dest, "check-attr", "-z", "--cached", "--stdin", ...CONVERSION_ATTRIBUTES];
  const paths = entries.map((e) => e.path);
  const plain = converts
    ? new Set<string>()
    : plainPaths(await runOk("git", attrs, { ...GIT_ENV, input: input(paths) }));
  const placed = sources.place(dest, entries, (p) => plain.has(p));
  const rest = paths.filter((p) => !placed.has(p));
  await runOk("git", ["-C", dest, "checkout-index", "-u", "-z", "--stdin"], { ...GIT_ENV, input: input(rest) });
}

/**
 * The testbed's own settings. Only mtime and size decide whether a file changed: materialized files get new inodes
 * and ctimes.
 */
async function configure(git: (...args: string[]) => Promise<string>): Promise<void> {
  await git("config", "core.checkStat", "minimal");
  await git("config", "core.trustctime", "false");
  await git("config", "user.email", "minisandbox@localhost");
  await git("config", "user.name", "minisandbox");
}

/** One pack of a testbed's history: the objects `tip` reaches and `prev` (if any) does not. */
export interface PackRange {
  prev?: string;
  tip: string;
  /** `pack-<hash>`, once written. */
  name?: string;
}

/** Packs written before, by range (`history-packs.ts`): placed into `packDir`, or undefined when there is none. */
export interface PackSource {
  place(range: PackRange, packDir: string): string | undefined;
}

/** Files of a commit's tree taken from earlier layers (`source-links.ts`): the paths placed. */
export interface FileSource {
  place(testbed: string, entries: readonly IndexEntry[], plain: (path: string) => boolean): Set<string>;
}

/** Times one named part of a longer job (a build's steps). */
export type StepTimer = <T>(name: string, fn: () => Promise<T>) => Promise<T>;

const FORCE = { recursive: true, force: true } as const;
/** Replace refs and grafts could make the source's history look other than it is. */
const GIT_ENV = { env: { ...process.env, GIT_NO_REPLACE_OBJECTS: "1", GIT_TERMINAL_PROMPT: "0" } };

/**
 * The commit's ancestry as a chain of packs cut at calendar years along its first-parent line, and at months within
 * the commit's own year: each pack holds what its last commit reaches and the previous one does not, and a last
 * pack the rest (at most a month of history: little to store and to delta-compress per commit). Packs are written
 * with one thread from the same source, so two commits of one repository share every pack they both reach byte for
 * byte (every year before their own; the months before theirs in the same year), and the store keeps one copy;
 * `packs` gives the ones written before.
 */
async function packAncestry(
  source: string,
  commit: string,
  packDir: string,
  packs: PackSource | undefined,
): Promise<PackRange[]> {
  const anchors = await calendarAnchors(source, commit);
  const ranges: PackRange[] = [];
  let prev: string | undefined;
  for (const tip of [...anchors, commit]) {
    const range: PackRange = prev ? { prev, tip } : { tip };
    range.name = packs?.place(range, packDir);
    if (range.name === undefined) {
      const revs = `${tip}\n${prev ? `^${prev}\n` : ""}`;
      const args = ["-C", source, "-c", "pack.threads=1", "pack-objects", "--revs", "--delta-base-offset", "-q"];
      const hash = (await runOk("git", [...args, join(packDir, "pack")], { ...GIT_ENV, input: revs })).trim();
      if (/^[0-9a-f]{40,64}$/.test(hash)) range.name = `pack-${hash}`;
    }
    ranges.push(range);
    prev = tip;
  }
  return ranges;
}

/**
 * The newest first-parent ancestor before the start of each month of the commit's year up to its own, then before
 * each year's start, oldest first (the commit itself never).
 */
async function calendarAnchors(source: string, commit: string): Promise<string[]> {
  const args = ["-C", source, "rev-list", "--first-parent", "--format=%H %ct", "--no-commit-header", commit];
  const out = await runOk("git", args, GIT_ENV);
  const chain = out
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const [sha, ct] = l.split(" ");
      return { sha: sha!, time: Number(ct) };
    });
  const anchors: string[] = [];
  const ownYear = yearStart(chain[0]!.time);
  let boundary = monthStart(chain[0]!.time);
  for (const c of chain.slice(1)) {
    if (c.time >= boundary) continue;
    if (anchors.at(-1) !== c.sha) anchors.push(c.sha);
    boundary = c.time >= ownYear ? monthStart(c.time) : yearStart(c.time);
  }
  return anchors.reverse();
}

/** Unix seconds of the start of the calendar month (UTC) that `time` is in. */
function monthStart(time: number): number {
  const d = new Date(time * 1000);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000;
}

/** Unix seconds of the start of the calendar year (UTC) that `time` is in. */
function yearStart(time: number): number {
  return Date.UTC(new Date(time * 1000).getUTCFullYear(), 0, 1) / 1000;
}

/**
 * Loose objects, for testbeds whose task rewrites the base commit at sandbox start (SWE-smith's bug): the objects
 * only the original commit had can then be deleted one by one, where a pack would keep them.
 */
async function unpackObjects(dest: string): Promise<void> {
  const packDir = join(dest, ".git", "objects", "pack");
  const packs = readdirSync(packDir).filter((f) => f.endsWith(".pack"));
  const moved = join(dest, ".git", "unpacking");
  mkdirSync(moved);
  for (const p of packs) {
    renameSync(join(packDir, p), join(moved, p));
    rmSync(join(packDir, p.replace(/\.pack$/, ".idx")), FORCE);
  }
  for (const p of packs)
    await runOk("git", ["-C", dest, "unpack-objects", "-q"], { ...GIT_ENV, input: readFileSync(join(moved, p)) });
  rmSync(moved, FORCE);
}
