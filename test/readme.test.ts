/**
 * The README as a newcomer types it: every shell block and code snippet of README.md, in order, as written, in one
 * shell (what one block exports or starts, the next one has), on the bundled example. Shell blocks start at the
 * root of the clone; a `ts` snippet is saved as `main.mjs` where the shell is and run with node, then compiled as
 * `main.ts` with `tsc --init`'s settings and run again; a `python` snippet runs with the `python` on PATH.
 *
 * A block is skipped only when the line above it says so: `<!-- readme-test: skip KIND (why) -->`, KIND one of
 * `setup` (installs this machine and runs this very suite: CI's own steps), `mirrors` (agents and trainers installed
 * from their sources: mini-swe-agent, SWE-agent, SWE-ReX, verl, SkyRL), `cluster` (a Ray cluster) and `registry`
 * (images from Docker Hub: nothing leaves this machine) — each said on stderr.
 *
 * Everything runs in network and pid namespaces of its own (only loopback up, so nothing leaves the machine and the
 * README's fixed ports are free; every process goes when the shell ends), with a fresh HOME. The machine's part
 * is given, not written into the README: `minisandbox` on PATH by `scripts/install-cli.sh` (into an npm prefix of
 * the test's own), a venv first on PATH for `pip install` with the machine's pip configuration, the example's
 * environments already in the store (so the demo builds nothing), and an OpenAI-compatible policy on
 * 127.0.0.1:8001 that submits at once.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { envFor } from "../src/env/environments.js";
import { pipSettings } from "../src/env/pip-config.js";
import { openStore, pullLayer } from "../src/env/store/index.js";
import { loadDataset } from "../src/tasks/index.js";
import { runOk } from "../src/util/run.js";
import { preparedFixture } from "./agent-clients.js";
import { tempDir } from "./helpers.js";

const REPO = join(import.meta.dirname, "..", "..");
const SKIP_KINDS = new Set(["setup", "mirrors", "cluster", "registry"]);

interface Block {
  line: number;
  lang: string;
  text: string;
  skip?: { kind: string; why: string };
}

/** The fenced blocks of a Markdown text, each with the skip marker on the line above it, if any. */
function readmeBlocks(markdown: string): Block[] {
  const lines = markdown.split("\n");
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w+)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((l, k) => k > i && l.startsWith("```"));
    const marker = /^<!-- readme-test: skip (\w+) \((.+)\) -->$/.exec(lines[i - 1] ?? "");
    blocks.push({
      line: i + 1,
      lang: open[1]!,
      text: lines.slice(i + 1, end).join("\n"),
      ...(marker ? { skip: { kind: marker[1]!, why: marker[2]! } } : {}),
    });
    i = end;
  }
  return blocks;
}

/** A policy that submits at once (the README's Python snippet needs one on 127.0.0.1:8001). */
const POLICY = `import { createServer } from "node:http";
createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const j = JSON.parse(body);
    const content = "THOUGHT: done.\\n\\n\`\`\`bash\\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\n\`\`\`";
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ id: "c", object: "chat.completion", model: j.model,
      choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
  });
}).listen(8001, "127.0.0.1");
`;

/** One shell script: the machine's part, then every block (each announced, so a failure names its block). */
function script(blocks: Block[], root: string, work: string): string {
  const tsc = join(REPO, "node_modules", ".bin", "tsc");
  const out = [
    "set -eo pipefail",
    `cd ${root}`,
    "scripts/install-cli.sh",
    'echo "@@ minisandbox on PATH at $(command -v minisandbox)"',
    `node ${join(work, "policy.mjs")} &`,
  ];
  blocks.forEach((b, n) => {
    out.push(`echo "@@ block ${n} (README.md:${b.line}, ${b.lang}) at $SECONDS s"`);
    if (b.lang === "bash") out.push(`cd ${root}`, b.text);
    else if (b.lang === "ts")
      out.push(
        `cat > main.mjs <<'README_SNIPPET'\n${b.text}\nREADME_SNIPPET`,
        "node main.mjs",
        `cp main.mjs main.ts && rm -f tsconfig.json && ${tsc} --init >/dev/null && ${tsc} -p . && node main.js`,
      );
    else if (b.lang === "python")
      out.push(`cat > readme_${n}.py <<'README_SNIPPET'\n${b.text}\nREADME_SNIPPET`, `python readme_${n}.py`);
    else throw new Error(`README.md:${b.line}: a ${b.lang} block cannot be run (only bash, ts and python)`);
    out.push(`echo "@@ block ${n} done at $SECONDS s"`);
  });
  // Whatever a block left running (the README's `serve ... &`) is stopped as a user would, closing its sandboxes.
  out.push('for job in $(jobs -p); do kill "$job"; done; wait', 'echo "@@ all done"');
  return `${out.join("\n")}\n`;
}

/** The clone's root as the blocks see it: links to the repository's entries, so what they write stays here. */
function cloneRoot(dir: string): string {
  mkdirSync(dir);
  for (const name of readdirSync(REPO)) if (name !== ".git") symlinkSync(join(REPO, name), join(dir, name));
  return dir;
}

/** The example's environments in `home`'s store (the demo then builds nothing), from a store built once per machine. */
async function seedStore(home: string): Promise<void> {
  const fx = await preparedFixture();
  const store = openStore(join(home, "store"));
  for (const instance of await loadDataset(fx.dataset))
    await pullLayer(store, join(fx.home, "store"), envFor(instance, {}).key);
}

/** Run the script in namespaces of its own; its output, interleaved, and its exit status. */
function runInNamespaces(file: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const child = spawn(
    "unshare",
    [
      ...["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--"],
      "sh",
      "-c",
      'ip link set lo up && bash "$1"',
      "sh",
      file,
    ],
    { env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, output })));
}

test("every block of README.md runs as written on the bundled example", { timeout: 600_000 }, async (t) => {
  const blocks = readmeBlocks(readFileSync(join(REPO, "README.md"), "utf8"));
  for (const b of blocks.filter((x) => x.skip)) {
    assert.ok(SKIP_KINDS.has(b.skip!.kind), `README.md:${b.line}: unknown skip kind ${b.skip!.kind}`);
    process.stderr.write(`SKIPPING README.md:${b.line} (${b.lang}): ${b.skip!.kind}: ${b.skip!.why}\n`);
  }
  if (process.getuid?.() !== 0) return t.skip("needs root (network and pid namespaces of its own)");
  const run = blocks.filter((b) => !b.skip);
  assert.deepEqual([...new Set(run.map((b) => b.lang))].sort(), ["bash", "python", "ts"]);
  const work = tempDir("msb-readme-");
  const home = join(work, "home");
  const defaultHome = join(home, ".local", "share", "minisandbox");
  mkdirSync(defaultHome, { recursive: true });
  await seedStore(defaultHome);
  const venv = join(work, "venv");
  await runOk("python3", ["-m", "venv", venv]);
  writeFileSync(join(work, "policy.mjs"), POLICY);
  // The desktop's browser: `--open` hands it each page, which it notes.
  mkdirSync(join(work, "desktop"));
  writeFileSync(join(work, "desktop", "xdg-open"), `#!/bin/sh\necho "$1" >> ${join(work, "opened.txt")}\n`, {
    mode: 0o755,
  });
  const file = join(work, "readme.sh");
  writeFileSync(file, script(run, cloneRoot(join(work, "clone")), work));
  const prefix = join(work, "npm-global");
  const env = {
    ...process.env,
    HOME: home,
    PATH: `${join(prefix, "bin")}:${join(venv, "bin")}:${join(work, "desktop")}:${process.env.PATH}`,
    npm_config_prefix: prefix,
    // This machine's pip configuration, which the new HOME would hide; no network here: no waiting on retries.
    ...(await pipSettings("python3")).env,
    PIP_RETRIES: "0",
    MINISANDBOX_HOME: "",
    XDG_DATA_HOME: "",
    MINISANDBOX_URL: "",
    MINISANDBOX_AUTH_TOKEN: "",
  };
  const { code, output } = await runInNamespaces(file, env);
  const failedAt = [...output.matchAll(/^@@ block (\d+) \(([^)]*)\) at /gm)].pop();
  assert.equal(code, 0, `README block ${failedAt?.[1]} (${failedAt?.[2]}) failed:\n${output.slice(-6000)}`);
  assert.match(output, new RegExp(`^@@ minisandbox on PATH at ${prefix}/bin/minisandbox$`, "m"));
  const timeline = output.split("\n").filter((l) => l.startsWith("@@ ")); // when each block started and ended
  t.diagnostic(timeline.join("; "));
  checkOutputs(output);
  const opened = readFileSync(join(work, "opened.txt"), "utf8").trim().split("\n");
  assert.deepEqual(
    opened.map((f) => f.replace(/^.*\//, "")),
    ["dashboard.html", "gold.demo-gold.html", "trajectories.html"],
    "each --open handed its page to the browser",
  );
});

/** What the blocks printed: the example evaluated, a sandbox on its task, the snippets' own lines. */
function checkOutputs(output: string): void {
  assert.match(output, /^Instances resolved: 3 \(100\.0%\)$/m, "the demo's gold run");
  const heads = [...output.matchAll(/^[0-9a-f]{7} Add unit conversions$/gm)].length;
  assert.equal(heads, 4, "the demo's sandbox, exec, then the snippet twice");
  assert.equal([...output.matchAll(/^39 passed in /gm)].length, 3, "the demo's sandbox, the snippet twice");
  assert.equal([...output.matchAll(/^0 Python 3\.11\.\d+$/gm)].length, 2, "its directory sandbox, both times");
  assert.equal([...output.matchAll(/^[0-9a-f]{64} +fixture\/calc@/gm)].length, 3, "store list: full keys");
  const trajectories = [...output.matchAll(/^(\S+) (scored|infra_failure) (\S+)$/gm)];
  assert.equal(trajectories.length, 8, `the RL snippet's group of 8:\n${output.slice(-3000)}`);
  assert.ok(
    trajectories.every((m) => m[2] === "scored" && Number(m[3]) === 0),
    "an agent that submits at once scores 0",
  );
  assert.match(output, /^@@ all done$/m);
}
