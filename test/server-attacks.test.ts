/**
 * Attacks on a real `minisandbox serve` process (the CLI, spawned), each answered with a refusal: status and body
 * checked, the host unchanged, the server's memory bounded, nothing left running.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RemoteSandbox } from "../src/client/index.js";
import { buildZip } from "../src/client/zip.js";
import { cgroupTreePids } from "../src/sandbox/limits.js";
import { processesMatching, tempDir, tempHome } from "./helpers.js";
import { call, rssBytes, runCli, startServe, type Json, type ServeProcess } from "./serve-process.js";

const MiB = 1024 ** 2;

async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function tokensFile(dir: string, tokens: Json[]): string {
  const file = join(dir, "tokens.json");
  writeFileSync(file, JSON.stringify({ tokens }), { mode: 0o600 });
  return file;
}

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";
const OPS = "ops-token-0123456789abcdef";
const TOKENS = [
  { name: "alice", token: ALICE, max_sandboxes: 2 },
  { name: "bob", token: BOB },
  { name: "ops", token: OPS, admin: true },
];

async function sandbox(s: ServeProcess, key: string, body: Json = {}): Promise<string> {
  const r = await call(s.url, "POST", "/sandboxes", { key, body });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

const exec = (s: ServeProcess, key: string, id: string, command: string, extra: Json = {}) =>
  call(s.url, "POST", `/sandboxes/${id}/execute`, { key, body: { command, shell: true, ...extra } });

test("no --auth-token: a strong token in an owner-only file; --no-auth is loopback only", async () => {
  const home = tempHome("msb-atk-auth-");
  const s = await startServe(home, []);
  const file = join(home, "server", "token");
  assert.match(s.stderr(), new RegExp(`token in ${file}, readable by its owner only`));
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const { readTokenFile } = await import("../src/wire/token-file.js");
  const token = readTokenFile(home)!;
  assert.ok(token.length >= 40, "32 random bytes");
  // The attack: a local client without the token creating a sandbox over the host's /root.
  const open = await call(s.url, "POST", "/sandboxes", { body: { dir: "/root" } });
  assert.deepEqual([open.status, open.json], [403, { detail: "Not authenticated" }]);
  const wrong = await call(s.url, "POST", "/sandboxes", { key: "guess", body: { dir: "/root" } });
  assert.deepEqual([wrong.status, wrong.json], [401, { detail: "Invalid API Key" }]);
  const withToken = await call(s.url, "POST", "/sandboxes", { key: token, body: { dir: "/root" } });
  assert.equal(withToken.status, 403);
  assert.equal(withToken.json.code, "forbidden");
  assert.match(withToken.json.detail, /--allow-dir/);
  // The SDK finds the token through the same home.
  assert.deepEqual(await RemoteSandbox.list({ url: s.url, home }), []);
  const wide = await runCli(home, ["serve", "--no-auth", "--host", "0.0.0.0", "--port", "0"]);
  assert.equal(wide.code, 2, wide.stderr);
  assert.match(wide.stderr, /--no-auth is for loopback only/);
  const anon = await startServe(tempHome("msb-atk-open-"), ["--no-auth"]);
  assert.match(anon.stderr(), /WARNING: no authentication/);
  assert.equal((await call(anon.url, "GET", "/sandboxes")).status, 200);
});

test("a sandbox with network cannot reach the token nor use the server without it", async () => {
  const home = tempHome("msb-atk-net-");
  const s = await startServe(home, []);
  const { readTokenFile, tokenFilePath } = await import("../src/wire/token-file.js");
  const token = readTokenFile(home)!;
  const id = await sandbox(s, token, { network: true });
  const probe = `
import json, urllib.request, urllib.error
req = urllib.request.Request("${s.url}/sandboxes", data=json.dumps({"dir": "/root"}).encode(), method="POST",
                             headers={"content-type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=10)
    print("CREATED")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`;
  const r = await exec(s, token, id, `python3 -c '${probe}'; cat ${tokenFilePath(home)}`);
  assert.match(r.json.stdout, /^403 \{"detail":"Not authenticated"\}\n$/);
  assert.match(r.json.stderr, /No such file or directory/, "the server's home is not visible inside");
});

test("{dir}: refused without --allow-dir, outside the roots, via symlinks; a flipping symlink never wins", async () => {
  const root = tempDir("msb-atk-root-");
  const forbidden = tempDir("msb-atk-forbidden-");
  writeFileSync(join(forbidden, "marker"), "FORBIDDEN\n");
  mkdirSync(join(root, "good"));
  writeFileSync(join(root, "good", "marker"), "GOOD\n");
  symlinkSync(forbidden, join(root, "escape"));
  const home = tempHome("msb-atk-dir-");
  const s = await startServe(home, ["--allow-dir", root, "--tokens-file", tokensFile(root, TOKENS)]);
  // The root itself holds the tokens file: it is never mounted (its subdirectories are).
  for (const dir of [
    "/root",
    forbidden,
    `${root}/../${forbidden.split("/").pop()}`,
    join(root, "escape"),
    "good",
    root,
  ]) {
    const r = await call(s.url, "POST", "/sandboxes", { key: ALICE, body: { dir } });
    assert.equal(r.status, 403, dir);
    assert.deepEqual(Object.keys(r.json).sort(), ["code", "detail"]);
    assert.equal(r.json.code, "forbidden");
  }
  const missing = await call(s.url, "POST", "/sandboxes", { key: ALICE, body: { dir: join(root, "nope") } });
  assert.equal(missing.status, 403, "a missing path answers like a forbidden one (no probing of the host)");
  // A root that holds the server's own home: the home (token file) and its ancestors are never mounted.
  const parent = tempDir("msb-atk-parent-");
  mkdirSync(join(parent, "home"));
  mkdirSync(join(parent, "work"));
  const s2 = await startServe(join(parent, "home"), ["--allow-dir", parent, "--tokens-file", tokensFile(root, TOKENS)]);
  for (const dir of [parent, join(parent, "home"), join(parent, "home", "server")])
    assert.equal((await call(s2.url, "POST", "/sandboxes", { key: ALICE, body: { dir } })).status, 403, dir);
  assert.equal(
    (await call(s2.url, "POST", "/sandboxes", { key: ALICE, body: { dir: join(parent, "work") } })).status,
    201,
  );
  const good = await sandbox(s, ALICE, { dir: join(root, "good") });
  assert.equal((await exec(s, ALICE, good, "cat /testbed/marker")).json.stdout, "GOOD\n");
  await call(s.url, "DELETE", `/sandboxes/${good}`, { key: ALICE });
  // A symlink flipped in a loop between the allowed dir and the forbidden one while sandboxes are created.
  const loop = `cd ${root} && while :; do ln -sfn good link; ln -sfn ${forbidden} link; done`;
  const flipper = spawn("sh", ["-c", loop], { detached: true, stdio: "ignore" });
  const flipperGone = new Promise((r) => flipper.once("exit", r));
  let created = 0;
  let refused = 0;
  try {
    // Until a few creations won the race (each attempt loses it when the link flips between checks): a loaded
    // machine may take many tries.
    for (let i = 0; i < 400 && created < 3; i++) {
      const r = await call(s.url, "POST", "/sandboxes", { key: ALICE, body: { dir: join(root, "link") } });
      if (r.status === 403) {
        refused++;
        continue;
      }
      assert.equal(r.status, 201, r.text);
      created++;
      assert.equal((await exec(s, ALICE, r.json.id, "cat /testbed/marker")).json.stdout, "GOOD\n");
      await call(s.url, "DELETE", `/sandboxes/${r.json.id}`, { key: ALICE });
    }
  } finally {
    process.kill(-flipper.pid!, "SIGKILL"); // its whole group: no `ln` finishes after this
    await flipperGone;
  }
  assert.ok(created > 0, `some creations got the allowed dir (created ${created}, refused ${refused})`);
});

/** A path no other test uses, so the host-wide process check sees only this test's readers. */
const SWAP = "/tmp/swapped-under-the-reader";

test("read_file of /dev/zero, a FIFO, a huge file: refused or capped at once, nothing left running", async (t) => {
  const home = tempHome("msb-atk-read-");
  const s = await startServe(home, [
    "--tokens-file",
    tokensFile(home, TOKENS),
    "--max-read",
    "1M",
    "--file-timeout",
    "2",
  ]);
  const id = await sandbox(s, ALICE);
  const P = `/sandboxes/${id}`;
  await exec(s, ALICE, id, "mkfifo /tmp/fifo && truncate -s 2G /tmp/huge && ln -s /dev/zero /tmp/zero-link");
  const rss0 = rssBytes(s.pid);
  for (let round = 0; round < 5; round++) {
    for (const path of ["/dev/zero", "/tmp/fifo", "/tmp/zero-link", "/dev/urandom"]) {
      const r = await call(s.url, "POST", `${P}/read_file`, { key: ALICE, body: { path } });
      assert.equal(r.status, 511, r.text);
      assert.equal(r.json.swerexception.class_path, "builtins.OSError");
      assert.match(r.json.swerexception.message, /is not a regular file/);
      const raw = await call(s.url, "GET", `${P}/files?path=${encodeURIComponent(path)}`, { key: ALICE });
      assert.equal(raw.status, 400, raw.text);
    }
    const huge = await call(s.url, "POST", `${P}/read_file`, { key: ALICE, body: { path: "/tmp/huge" } });
    assert.match(huge.json.swerexception.message, /^\[Errno 27\] File too large/);
    const raw = await call(s.url, "GET", `${P}/files?path=/tmp/huge`, { key: ALICE });
    assert.deepEqual([raw.status, raw.json.code], [429, "limit_reached"], "over the read cap: the read budget");
  }
  // A regular file swapped for a FIFO between the check and the read: the deadline ends the reader.
  await exec(s, ALICE, id, `(while :; do echo x > ${SWAP}; rm -f ${SWAP}; mkfifo ${SWAP}; rm -f ${SWAP}; done) &`);
  for (let i = 0; i < 10; i++) {
    const r = await call(s.url, "POST", `${P}/read_file`, { key: ALICE, body: { path: SWAP } });
    assert.ok([200, 511].includes(r.status), r.text);
  }
  await exec(s, ALICE, id, `pkill -f 'mkfifo ${SWAP}' ; kill %1 2>/dev/null; pkill sh; true`);
  const rss1 = rssBytes(s.pid);
  t.diagnostic(
    `server RSS before ${(rss0 / MiB).toFixed(1)} MiB, ` +
      `after 40 refused and 10 capped reads ${(rss1 / MiB).toFixed(1)} MiB`,
  );
  assert.ok(rss1 - rss0 < 64 * MiB, `server memory grew by ${((rss1 - rss0) / MiB).toFixed(1)} MiB`);
  // Matched by the swapped path: other tests running alongside read files with `head -c` too.
  await waitFor(() => processesMatching(`-- ${SWAP}`).length === 0, 5000, "no reader left running");
  const ps = await exec(s, ALICE, id, "ps -eo comm= | grep -E '^(head|cat)$' || true");
  assert.equal(ps.json.stdout, "", "no reader left inside the sandbox");
});

/** A multipart upload whose body stops after its first part until aborted (a client that hangs or goes away). */
function hangingUpload(url: string, key: string, abort: AbortController): Promise<unknown> {
  const boundary = "----msbhang";
  const head = `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="x"\r\n\r\n${"x".repeat(1024)}`;
  const body = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode(head));
    },
  });
  return fetch(url, {
    method: "POST",
    headers: { "X-API-Key": key, "content-type": `multipart/form-data; boundary=${boundary}` },
    body,
    signal: abort.signal,
    duplex: "half",
  } as RequestInit).catch(() => undefined);
}

function form(fields: Record<string, string>, data: Buffer, name: string): FormData {
  const f = new FormData();
  f.append("file", new Blob([data]), name);
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  return f;
}

test("uploads: zip bomb refused before extraction; size, concurrency bounded; aborts leave nothing", async (t) => {
  const home = tempHome("msb-atk-upload-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS), "--max-upload", "4M"]);
  const id = await sandbox(s, ALICE);
  const P = `/sandboxes/${id}`;
  const scratch = join(home, "server", "uploads");
  const tmpBefore = readdirSync(tmpdir()).filter((n) => n.startsWith("msb-upload-")).length;
  const zeros = Buffer.alloc(64 * MiB);
  const bomb = buildZip(Array.from({ length: 16 }, (_, i) => ({ name: `z${i}.bin`, data: zeros })));
  t.diagnostic(`zip bomb: ${bomb.length} bytes unpacking to ${16 * 64} MiB`);
  const rss0 = rssBytes(s.pid);
  const r = await call(s.url, "POST", `${P}/upload`, {
    key: ALICE,
    body: form({ target_path: "/tmp/bomb", unzip: "true" }, bomb, "bomb.zip"),
  });
  assert.equal(r.status, 511, r.text);
  assert.equal(r.json.swerexception.class_path, "builtins.ValueError");
  assert.match(r.json.swerexception.message, /nothing was extracted: archive unpacks to more than 100 times/);
  const rss1 = rssBytes(s.pid);
  t.diagnostic(`server RSS before the zip bomb ${(rss0 / MiB).toFixed(1)} MiB, after ${(rss1 / MiB).toFixed(1)} MiB`);
  assert.ok(rss1 - rss0 < 64 * MiB);
  assert.equal((await exec(s, ALICE, id, "test -e /tmp/bomb")).json.exit_code, 1, "nothing reached the sandbox");
  assert.deepEqual(readdirSync(scratch), [], "nothing left in the server's scratch");
  assert.equal(
    readdirSync(tmpdir()).filter((n) => n.startsWith("msb-upload-")).length,
    tmpBefore,
    "host /tmp untouched",
  );
  const big = await call(s.url, "POST", `${P}/upload`, {
    key: ALICE,
    body: form({ target_path: "/tmp/big", unzip: "false" }, Buffer.alloc(5 * MiB), "big"),
  });
  assert.equal(big.status, 413, big.text);
  // Four uploads that never finish hold the server's budget: a fifth is told to retry.
  const aborts = Array.from({ length: 4 }, () => new AbortController());
  const hanging = aborts.map((a) => hangingUpload(`${s.url}${P}/upload`, ALICE, a));
  await waitFor(() => readdirSync(scratch).length === 4, 10_000, "four uploads in progress");
  const fifth = await call(s.url, "POST", `${P}/upload`, {
    key: ALICE,
    body: form({ target_path: "/tmp/five" }, Buffer.from("5"), "five"),
  });
  assert.equal(fifth.status, 429, fifth.text);
  assert.equal(fifth.json.code, "limit_reached");
  assert.match(fifth.json.detail, /4 uploads are in progress/);
  assert.ok(Number(fifth.headers.get("retry-after")) >= 1);
  for (const a of aborts) a.abort();
  await Promise.all(hanging);
  await waitFor(() => readdirSync(scratch).length === 0, 10_000, "aborted uploads cleaned up");
  const ok = await call(s.url, "POST", `${P}/upload`, {
    key: ALICE,
    body: form({ target_path: "/tmp/after/ok.txt" }, Buffer.from("fine\n"), "ok.txt"),
  });
  assert.equal(ok.status, 200, ok.text);
  assert.equal((await exec(s, ALICE, id, "cat /tmp/after/ok.txt")).json.stdout, "fine\n");
});

test("a pack that unpacks far beyond its size is refused before anything is written", async () => {
  const home = tempHome("msb-atk-pack-");
  const pack = join(tempDir("msb-atk-packfile-"), "bomb.pack");
  await writeZstdTarBomb(pack, 1024 * MiB);
  const size = statSync(pack).size;
  assert.ok(size < 256 * 1024, `the pack is small (${size} bytes)`);
  const r = await runCli(home, ["store", "import", pack]);
  assert.equal(r.code, 2, r.stderr); // bad input
  assert.match(
    r.stderr,
    /invalid pack .*: it unpacks to more than 200 times its \d+ bytes \(stopped before writing objects\//,
  );
  assert.deepEqual(readdirSync(join(home, "store", "tmp")), []);
});

/** A zstd tar holding a valid pack header and one object entry of `bytes` zeros (streamed, never in memory). */
async function writeZstdTarBomb(file: string, bytes: number): Promise<void> {
  const header = (name: string, size: number): Buffer => {
    const h = Buffer.alloc(512);
    h.write(name, 0);
    h.write("0000644\0", 100);
    h.write("0000000\0", 108);
    h.write("0000000\0", 116);
    h.write(`${size.toString(8).padStart(11, "0")}\0`, 124);
    h.write("00000000000\0", 136);
    h.write("        ", 148);
    h.write("0", 156);
    h.write("ustar\0", 257);
    h.write("00", 263);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148);
    return h;
  };
  const pad = (n: number): Buffer => Buffer.alloc((512 - (n % 512)) % 512);
  const z = spawn("zstd", ["-q", "-c", "-o", file], { stdio: ["pipe", "ignore", "inherit"] });
  const write = (b: Buffer): Promise<void> =>
    new Promise((r) => (z.stdin!.write(b) ? r() : z.stdin!.once("drain", () => r())));
  const meta = Buffer.from(`${JSON.stringify({ format: "minisandbox-pack", version: 1, layers: [] })}\n`);
  await write(header("msb-pack.json", meta.length));
  await write(Buffer.concat([meta, pad(meta.length)]));
  await write(header(`objects/ab/${"c".repeat(62)}`, bytes));
  const chunk = Buffer.alloc(MiB);
  for (let done = 0; done < bytes; done += chunk.length) await write(chunk);
  await write(Buffer.alloc(1024));
  z.stdin!.end();
  await new Promise((r) => z.once("exit", r));
}

test("clients kept apart: another token's sandbox is a 404 like a missing one; admins see all; caps", async () => {
  const home = tempHome("msb-atk-own-");
  const dir = tempDir("msb-atk-own-dir-");
  const loose = join(dir, "loose.json");
  writeFileSync(loose, JSON.stringify({ tokens: TOKENS }));
  chmodSync(loose, 0o644);
  const refused = await runCli(home, ["serve", "--tokens-file", loose, "--port", "0"]);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /readable by others/);
  const s = await startServe(home, ["--tokens-file", tokensFile(dir, TOKENS)]);
  const a = await sandbox(s, ALICE);
  const missing = await call(s.url, "GET", "/sandboxes/sb-000000000000", { key: BOB });
  for (const [method, path, body] of [
    ["GET", `/sandboxes/${a}`, undefined],
    ["DELETE", `/sandboxes/${a}`, undefined],
    ["POST", `/sandboxes/${a}/exec`, { command: "id" }],
    ["POST", `/sandboxes/${a}/execute`, { command: "id" }],
    ["GET", `/sandboxes/${a}/is_alive`, undefined],
    ["GET", `/sandboxes/${a}/files?path=/etc/hostname`, undefined],
  ] as const) {
    const r = await call(s.url, method, path, { key: BOB, body });
    assert.equal(r.status, 404, `${method} ${path}: ${r.text}`);
    assert.deepEqual(r.json, { ...missing.json, detail: missing.json.detail.replace("sb-000000000000", a) });
  }
  assert.deepEqual((await call(s.url, "GET", "/sandboxes", { key: BOB })).json.sandboxes, []);
  assert.deepEqual(
    (await call(s.url, "GET", "/sandboxes", { key: ALICE })).json.sandboxes.map((x: Json) => [x.id, x.owner]),
    [[a, "alice"]],
  );
  assert.ok((await call(s.url, "GET", "/sandboxes", { key: OPS })).json.sandboxes.some((x: Json) => x.id === a));
  assert.equal((await exec(s, OPS, a, "echo admin")).json.stdout, "admin\n");
  await sandbox(s, ALICE);
  const third = await call(s.url, "POST", "/sandboxes", { key: ALICE, body: {} });
  assert.equal(third.status, 429);
  assert.match(third.json.detail, /alice holds 2 of at most 2 sandboxes/);
  assert.equal((await call(s.url, "GET", "/metrics", { key: ALICE })).status, 403);
  const metrics = await call(s.url, "GET", "/metrics", { key: OPS });
  const { defaultMaxSandboxes } = await import("../src/server/options.js");
  // Derived from the memory available when the server started, which moves a little on a busy host since.
  const max = Number(/^minisandbox_sandboxes_max (\d+)$/m.exec(metrics.text)?.[1]);
  assert.ok(Math.abs(max - defaultMaxSandboxes()) <= 1, `sandboxes_max ${max}, derived now ${defaultMaxSandboxes()}`);
  assert.equal((await call(s.url, "GET", "/healthz")).text, '{"status":"ok"}', "the open probe says nothing");
});

test("rate limit per token: 429 with Retry-After, other tokens unaffected", async () => {
  const home = tempHome("msb-atk-rate-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS), "--rate-limit", "5"]);
  const burst = await Promise.all(Array.from({ length: 30 }, () => call(s.url, "GET", "/sandboxes", { key: ALICE })));
  const limited = burst.filter((r) => r.status === 429);
  assert.ok(limited.length >= 15, `${limited.length} of 30 limited`);
  assert.ok(burst.filter((r) => r.status === 200).length <= 12);
  assert.equal(limited[0]!.json.code, "limit_reached");
  assert.match(limited[0]!.json.detail, /rate limit of alice exceeded/);
  assert.ok(Number(limited[0]!.headers.get("retry-after")) >= 1);
  assert.equal((await call(s.url, "GET", "/sandboxes", { key: BOB })).status, 200);
});

test("X-Request-ID replays only the same method, full URL, token and body", async () => {
  const home = tempHome("msb-atk-replay-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS)]);
  const id = await sandbox(s, ALICE);
  const P = `/sandboxes/${id}`;
  await exec(s, ALICE, id, "echo A > /tmp/a; echo B > /tmp/b");
  const rid = (v: string) => ({ "X-Request-ID": v });
  const ga = await call(s.url, "GET", `${P}/files?path=/tmp/a`, { key: ALICE, headers: rid("r1") });
  const gb = await call(s.url, "GET", `${P}/files?path=/tmp/b`, { key: ALICE, headers: rid("r1") });
  assert.deepEqual([ga.text, gb.text], ["A\n", "B\n"]);
  const ra = await call(s.url, "POST", `${P}/read_file`, { key: ALICE, body: { path: "/tmp/a" }, headers: rid("r2") });
  const rb = await call(s.url, "POST", `${P}/read_file`, { key: ALICE, body: { path: "/tmp/b" }, headers: rid("r2") });
  assert.deepEqual([ra.json.content, rb.json.content], ["A\n", "B\n"]);
  await call(s.url, "POST", `${P}/create_session`, { key: ALICE, body: {} });
  const bump = { command: "n=$((n+1)); echo $n" };
  const run = (key: string) => call(s.url, "POST", `${P}/run_in_session`, { key, body: bump, headers: rid("r3") });
  assert.equal((await run(ALICE)).json.output, "1\n");
  assert.equal((await run(ALICE)).json.output, "1\n", "the same request is replayed, not run again");
  assert.equal((await run(OPS)).json.output, "2\n", "another token's request with the same id runs");
});

test("validation errors are 422 naming the field, never a 500", async () => {
  const home = tempHome("msb-atk-422-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS)]);
  const cases: [Json, string, string][] = [
    [{ limits: { pids: 1.5 } }, "body.limits.pids", "int_from_float"],
    [{ limits: { memory_bytes: "lots" } }, "body.limits.memory_bytes", "int_parsing"],
    [{ limits: { cpu_seconds: -1 } }, "body.limits.cpu_seconds", "greater_than"],
    [{ limits: { disk_bytes: 1e30 } }, "body.limits.disk_bytes", "less_than_equal"],
    [{ ttl_seconds: "soon" }, "body.ttl_seconds", "float_parsing"],
    [{ labels: [1] }, "body.labels", "dict_type"],
  ];
  for (const [body, loc, type] of cases) {
    const r = await call(s.url, "POST", "/sandboxes", { key: ALICE, body });
    assert.equal(r.status, 422, `${JSON.stringify(body)}: ${r.text}`);
    assert.deepEqual([r.json.detail[0].loc.join("."), r.json.detail[0].type], [loc, type]);
  }
  const id = await sandbox(s, ALICE);
  const bad = await call(s.url, "POST", `/sandboxes/${id}/exec`, {
    key: ALICE,
    body: { command: "true", timeout_ms: "x" },
  });
  assert.equal(bad.status, 422);
  assert.equal(bad.json.detail[0].loc.join("."), "body.timeout_ms");
  const huge = { command: "true", output_limit_bytes: 2 ** 40 };
  assert.equal((await call(s.url, "POST", `/sandboxes/${id}/exec`, { key: ALICE, body: huge })).status, 400);
});

test("the host cannot be overcommitted: limits above the maxima are 422s naming field and maximum", async () => {
  const home = tempHome("msb-atk-max-");
  const carol = {
    name: "carol",
    token: "carol-token-0123456789abcdef",
    limits: { memory_bytes: 256 * MiB, cpus: 0.5 },
  };
  const s = await startServe(home, ["--tokens-file", tokensFile(home, [...TOKENS, carol])]);
  const TiB = 1024 ** 4;
  const cases: [Json, string][] = [
    [{ memory_bytes: TiB }, "memory_bytes"],
    [{ pids: 4194304 }, "pids"],
    [{ pids: 1e9 }, "pids"],
    [{ disk_bytes: TiB }, "disk_bytes"],
    [{ cpus: 1000 }, "cpus"],
  ];
  for (const [limits, field] of cases) {
    const r = await call(s.url, "POST", "/sandboxes", { key: ALICE, body: { limits } });
    assert.equal(r.status, 422, `${JSON.stringify(limits)}: ${r.text}`);
    assert.deepEqual(r.json.detail[0].loc, ["body", "limits", field]);
    assert.match(r.json.detail[0].msg, new RegExp(`limits\\.${field} \\S+ is above this server's maximum \\d+`));
  }
  // What a client gets without asking: derived from the machine, so that every admitted sandbox fits it at once.
  const { hostBudget } = await import("../src/sandbox/capacity.js");
  const budget = hostBudget();
  const metrics = await call(s.url, "GET", "/metrics", { key: OPS });
  const admitted = Number(/^minisandbox_sandboxes_max (\d+)$/m.exec(metrics.text)?.[1]);
  const id = await sandbox(s, ALICE);
  const { limits } = (await call(s.url, "GET", `/sandboxes/${id}`, { key: ALICE })).json;
  // (Measured at the server's start: what is available now may differ a little.)
  const fits = limits.memory_bytes * admitted <= budget.memoryBytes * 1.1;
  assert.ok(fits, `${limits.memory_bytes} x ${admitted} of ${budget.memoryBytes} bytes`);
  assert.ok(limits.pids * admitted <= budget.pids, `${limits.pids} x ${admitted} of ${budget.pids} pids`);
  // A principal's own maxima (the tokens file) are below the server's: its defaults too.
  const c = await call(s.url, "POST", "/sandboxes", {
    key: carol.token,
    body: { limits: { memory_bytes: 512 * MiB } },
  });
  assert.equal(c.status, 422);
  assert.match(c.json.detail[0].msg, new RegExp(`maximum ${256 * MiB}`));
  const cid = await sandbox(s, carol.token);
  const cl = (await call(s.url, "GET", `/sandboxes/${cid}`, { key: carol.token })).json.limits;
  assert.deepEqual([cl.memory_bytes, cl.cpus], [256 * MiB, 0.5]);
});

test("serving rollouts, every sandbox fits the host at its maxima: plain, rollouts, warm pool, rewards", async () => {
  const home = tempHome("msb-atk-maxpool-");
  const dataset = join(home, "dataset.json");
  writeFileSync(dataset, "[]");
  const args = ["--tokens-file", tokensFile(home, TOKENS), "--dataset", dataset, "--warm-pool", "4"];
  const s = await startServe(home, [...args, "--max-sandboxes", "6", "--max-rollouts", "10"]);
  const { limits } = (await call(s.url, "GET", `/sandboxes/${await sandbox(s, ALICE)}`, { key: ALICE })).json;
  const { defaultBesideSandboxes, hostBudget } = await import("../src/sandbox/capacity.js");
  const budget = hostBudget();
  // Plain sandboxes, rollouts, the warm pool, and the sandboxes started beside them: fresh rewards (the engine's)
  // and the dataset provider's grading and diffing.
  const admitted = 6 + 10 + 4 + 2 * defaultBesideSandboxes();
  assert.ok(limits.pids * admitted <= budget.pids, `${limits.pids} x ${admitted} of ${budget.pids} pids`);
  const fits = limits.memory_bytes * admitted <= budget.memoryBytes * 1.1;
  assert.ok(fits, `${limits.memory_bytes} x ${admitted} of ${budget.memoryBytes} bytes`);
});

test("a host out of memory kills sandboxes first: the server scores below every sandbox process", async () => {
  const home = tempHome("msb-atk-oom-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS)]);
  const id = await sandbox(s, ALICE);
  const r = await exec(s, ALICE, id, "sleep 120 >/dev/null 2>&1 & cat /proc/self/oom_score_adj");
  assert.equal(r.json.stdout, "1000\n", r.text);
  // A process may end while it is read (the next command's helper, started ahead): "" then.
  const proc = (pid: number, file: string): string => {
    try {
      return readFileSync(`/proc/${pid}/${file}`, "utf8");
    } catch {
      return "";
    }
  };
  const score = (pid: number): number => Number(proc(pid, "oom_score_adj").trim() || Number.NaN);
  const helper = join(import.meta.dirname, "..", "native", "msb-helper");
  const floor = spawnSync(helper, ["check"], { encoding: "utf8" }).stdout.includes("oom_floor yes");
  // Where root may (CAP_SYS_RESOURCE) the server lowers its own; elsewhere it keeps what it was started with.
  const server = score(s.pid);
  assert.equal(server, floor ? -500 : score(process.pid), `the server's oom_score_adj (floor: ${floor})`);
  // Every process of the sandbox, as the host's OOM killer sees it.
  const { cgroups } = JSON.parse(readFileSync(join(home, "sandboxes", id, "state.json"), "utf8"));
  const scores = new Map(
    cgroupTreePids(cgroups.pids)
      .map((pid) => [pid, score(pid)] as const)
      .filter(([, v]) => !Number.isNaN(v)),
  );
  const sleeper = [...scores.keys()].find((pid) => proc(pid, "cmdline") === "sleep\x00120\x00");
  assert.ok(sleeper, "the command's background job is in the sandbox's group");
  assert.equal(scores.get(sleeper), 1000, "what a command leaves running scores 1000 too");
  const seen = JSON.stringify([...scores]);
  // With the floor every process of the sandbox scores 1000; without it pid 1 keeps its caller's score, the server's.
  for (const v of scores.values()) assert.ok(floor ? v === 1000 : v >= server, `server ${server}, sandbox ${seen}`);
});

test("network: true only for principals the operator allows (403 for others), admins included", async () => {
  const home = tempHome("msb-atk-netperm-");
  const dave = { name: "dave", token: "dave-token-0123456789abcdef", network: true };
  const s = await startServe(home, ["--tokens-file", tokensFile(home, [...TOKENS, dave])]);
  const refused = await call(s.url, "POST", "/sandboxes", { key: BOB, body: { network: true } });
  assert.equal(refused.status, 403, refused.text);
  assert.equal(refused.json.code, "forbidden");
  assert.match(refused.json.detail, /principal bob may not give sandboxes the host's network.*"network": true/);
  assert.equal((await call(s.url, "GET", "/sandboxes", { key: BOB })).json.sandboxes.length, 0, "nothing was made");
  for (const key of [dave.token, OPS]) {
    const id = await sandbox(s, key, { network: true });
    assert.equal((await call(s.url, "GET", `/sandboxes/${id}`, { key })).json.network, true);
  }
  // Without asking, nobody needs the permission.
  assert.equal((await call(s.url, "GET", `/sandboxes/${await sandbox(s, BOB)}`, { key: BOB })).json.network, false);
});

test("output written a byte at a time keeps the server's memory bounded, and a stream sends few lines", async () => {
  const home = tempHome("msb-atk-bytes-");
  const s = await startServe(home, ["--tokens-file", tokensFile(home, TOKENS)]);
  const id = await sandbox(s, ALICE);
  await exec(s, ALICE, id, "true");
  const rss0 = rssBytes(s.pid);
  // 1 MiB of "x", one byte per write.
  const body = { command: "head -c 1048576 /dev/zero | tr '\\0' x | dd bs=1 status=none", timeout_ms: 300_000 };
  const streamed = await call(s.url, "POST", `/sandboxes/${id}/exec/stream`, { key: ALICE, body });
  const lines = streamed.text
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Json);
  const text = lines.map((l) => l.stdout ?? "").join("");
  assert.equal(text.length, MiB);
  assert.match(text, /^x+$/);
  assert.equal(lines.at(-1).result.exit_code, 0);
  // Gathered as it comes: tens of lines a second at most, not one per read of the pipe.
  assert.ok(lines.length < 2000, `${lines.length} lines for ${MiB} bytes`);
  const plain = await call(s.url, "POST", `/sandboxes/${id}/exec`, { key: ALICE, body });
  assert.equal(plain.json.stdout.length, MiB);
  const grown = (rssBytes(s.pid) - rss0) / MiB;
  assert.ok(grown < 64, `the server grew by ${grown.toFixed(0)} MiB for 2 MiB of output`);
});

test("serve --specs: refused at start, one line, when it cannot apply", async () => {
  const home = tempHome("msb-atk-specs-");
  const alone = await runCli(home, ["serve", "--specs", join(home, "specs.json"), "--port", "0"]);
  assert.equal(alone.code, 2, alone.stderr);
  assert.match(alone.stderr, /--specs applies to the instances of --dataset: give --dataset FILE too/);
  const dataset = join(home, "dataset.json");
  writeFileSync(dataset, "[]");
  const missing = await runCli(home, ["serve", "--dataset", dataset, "--specs", join(home, "no.json"), "--port", "0"]);
  assert.equal(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, /specs file not found: .*no\.json/);
  writeFileSync(join(home, "bad.json"), JSON.stringify({ "*": ["history"] }));
  const bad = await runCli(home, ["serve", "--dataset", dataset, "--specs", join(home, "bad.json"), "--port", "0"]);
  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /"\*" must be an object of spec fields/);
});
