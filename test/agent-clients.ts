/**
 * What the tests that run the agent ecosystem's real clients share: their sources from bare git mirrors (never
 * copied into this repository), venvs built from the local package index plus those mirrors (cached per machine),
 * and one prepared fixture dataset (3 instances, built once per machine).
 *
 * Mirrors: `$MINISANDBOX_MIRRORS/<owner>+<name>/repo` (default: `.mirror` next to this checkout), or one variable
 * per mirror (e.g. `MINI_SWE_AGENT_MIRROR`). A test whose mirror is absent is skipped with the reason.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { join } from "node:path";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { runOk } from "../src/util/run.js";
import { CLI, cachedDir } from "./helpers.js";
import { runCli } from "./serve-process.js";

const MIRRORS = process.env.MINISANDBOX_MIRRORS ?? join(import.meta.dirname, "..", "..", "..", ".mirror");

/** A mirror's git directory, from its own variable or `$MINISANDBOX_MIRRORS`; undefined when absent. */
export function mirror(ownerName: string, variable: string): string | undefined {
  const dir = process.env[variable] ?? join(MIRRORS, ownerName.replace("/", "+"), "repo");
  return existsSync(join(dir, "HEAD")) || existsSync(join(dir, ".git")) ? dir : undefined;
}

/** `node:test`'s skip option: false when every mirror is there, else the reason naming what is missing. */
export function skipUnlessMirrors(needed: Record<string, string>): false | string {
  const missing = Object.entries(needed).filter(([name, variable]) => !mirror(name, variable));
  if (missing.length === 0) return false;
  const list = missing.map(([name, v]) => `${name} (set ${v} or MINISANDBOX_MIRRORS)`).join(", ");
  return `SKIPPED LOUDLY: git mirror(s) not found: ${list}`;
}

/** Check out `ref` of a mirror into `dest`, leaving out blobs the mirror lacks (large files it was fetched without). */
export async function checkout(gitDir: string, dest: string, ref = "HEAD"): Promise<string> {
  const git = (...args: string[]) => runOk("git", ["--git-dir", gitDir, ...args], { timeoutMs: 120_000 });
  mkdirSync(dest, { recursive: true });
  const listing = await git("ls-tree", "-r", "-z", ref);
  const present: string[] = [];
  for (const entry of listing.split("\0").filter(Boolean)) {
    const [meta, path] = entry.split("\t") as [string, string];
    const [mode, type, sha] = meta.split(" ");
    if (type !== "blob" || mode === "160000") continue;
    present.push(`${sha} ${path}`);
  }
  const missing = new Set(
    (
      await runOk("git", ["--git-dir", gitDir, "cat-file", "--batch-check=%(objectname) %(objecttype)"], {
        input: present.map((p) => p.split(" ")[0]).join("\n"),
      })
    )
      .split("\n")
      .filter((l) => l.endsWith(" missing"))
      .map((l) => l.split(" ")[0]),
  );
  const paths = present.filter((p) => !missing.has(p.split(" ")[0]!)).map((p) => p.slice(p.indexOf(" ") + 1));
  const list = join(dest, "..", `.${dest.split("/").pop()}-paths`);
  writeFileSync(list, paths.join("\0"));
  // A private index: the mirror itself is never written.
  const env = { ...process.env, GIT_INDEX_FILE: `${list}.index` };
  const args = ["--git-dir", gitDir, "--work-tree", dest, "checkout", ref, "--pathspec-from-file", list];
  await runOk("git", [...args, "--pathspec-file-nul"], { timeoutMs: 120_000, env });
  rmSync(`${list}.index`, { force: true });
  return dest;
}

export interface PreparedFixture {
  home: string;
  dataset: string;
  /** The same rows as a directory Hugging Face `datasets` loads (splits dev and test). */
  hfDir: string;
  instances: { instance_id: string; base_commit: string; patch: string }[];
}

/** The 3-instance fixture dataset with its environments built, in a minisandbox home shared by test files. */
export async function preparedFixture(): Promise<PreparedFixture> {
  const root = await cachedDir(
    "agents-fixture",
    { fixture: 1, cli: CLI },
    async (dir) => {
      const f = await makeFixtureDataset(join(dir, "fixture"), { instances: 3 });
      const hf = join(dir, "hf");
      mkdirSync(hf);
      const rows = JSON.parse(readFileSync(f.datasetPath, "utf8")) as object[];
      writeFileSync(join(hf, "data.jsonl"), `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
      writeFileSync(
        join(hf, "README.md"),
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: dev\n    path: data.jsonl\n" +
          "  - split: test\n    path: data.jsonl\n---\n",
      );
    },
    60_000,
  );
  const home = join(root, "home");
  const dataset = join(root, "fixture", "dataset.json");
  // Resumable: instant once built; a run after a change of the environment code builds what changed. One test
  // file at a time (they run concurrently).
  await withLock(`${root}.prepare.lock`, async () => {
    const r = await runCli(home, ["prepare", "--dataset", dataset, "--repos", join(root, "fixture", "repos")]);
    if (r.code !== 0) throw new Error(`prepare failed: ${r.stderr}\n${r.stdout}`);
  });
  const instances = JSON.parse(readFileSync(dataset, "utf8")) as PreparedFixture["instances"];
  return { home, dataset, hfDir: join(root, "hf"), instances };
}

/** Run `fn` holding a mkdir lock (a stale lock, older than 10 minutes, is broken). */
async function withLock<T>(lock: string, fn: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
      } catch {
        /* released meanwhile */
      }
      await sleep(250);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}
