/**
 * Pulls from the real reference registry (docker-registry) on 127.0.0.1: anonymous, htpasswd basic auth, bearer
 * tokens from a token service run the way Docker Hub's works; indexes and platforms; mirrors; and a registry that
 * misbehaves (429, 5xx, 401/403/404, cut, stalled and altered answers, a kill -9 mid-pull, a full disk). Every
 * failure is one line, cause first, and leaves the store as it was.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { importImage, pullImage, type ImageEvent, type PullOptions } from "../src/env/images/index.js";
import { gcStore, imageDirs, listImages, openStore, verifyStore, type Store } from "../src/env/store/index.js";
import {
  DiskFullError,
  ImageInvalidError,
  ImageNotFoundError,
  RegistryDeniedError,
  RegistryError,
} from "../src/errors.js";
import {
  buildImage,
  buildIndex,
  FaultProxy,
  makeTar,
  pushImage,
  putManifest,
  TestRegistry,
  TokenServer,
  type BuiltImage,
  type Fault,
} from "./oci.js";
import { tempDir } from "./helpers.js";

const CLI = fileURLToPath(new URL("../src/cli/index.js", import.meta.url));
const dir = tempDir("msb-img-reg-");
let n = 0;
const newStore = (): Store => openStore(join(dir, `store-${++n}`));
/** No credentials but those a test gives: never the machine's own ~/.docker or auth.json. */
const noCreds = { HOME: join(dir, "nohome"), REGISTRY_AUTH_FILE: join(dir, "none.json") };

const small = (tag: string, top: "zstd" | "gzip" = "zstd"): BuiltImage =>
  buildImage({
    layers: [
      {
        tar: makeTar([
          { name: "etc/os-release", data: "ID=test\n" },
          { name: "bin/sh", data: "#!", mode: 0o755 },
        ]),
      },
      { tar: makeTar([{ name: `app/${tag}`, data: tag }]), compression: top },
    ],
  });
const big = buildImage({
  layers: [{ tar: makeTar([{ name: "blob", data: randomBytes(6 << 20) }]), compression: "none" }],
});

// Started at load (not in a before hook) so that they live as long as the file's tests.
const plain = await TestRegistry.start(join(dir, "plain"));
const proxy = await FaultProxy.start(plain.host);
await pushImage(plain.host, "test/small", "1", small("one"));
await pushImage(plain.host, "test/small", "2", small("two"));
await pushImage(plain.host, "test/big", "1", big);
await pushImage(plain.host, "library/mirrored", "1", small("mirror"));
await pushImage(plain.host, "test/gzip", "1", small("gzip", "gzip"));
const wide = buildImage({
  layers: Array.from({ length: 6 }, (_, i) => ({ tar: makeTar([{ name: `l${i}`, data: `${i}` }]) })),
});
await pushImage(plain.host, "test/wide", "1", wide);
{
  const arm = buildImage({ layers: [{ tar: makeTar([{ name: "arch", data: "arm64" }]) }], architecture: "arm64" });
  const amd = buildImage({ layers: [{ tar: makeTar([{ name: "arch", data: "amd64" }]) }] });
  await pushImage(plain.host, "test/multi", "arm-only", arm);
  await pushImage(plain.host, "test/multi", "amd", amd);
  const both = [
    { image: arm, architecture: "arm64" },
    { image: amd, architecture: "amd64" },
  ];
  await putManifest(plain.host, "test/multi", "1", buildIndex(both));
  await putManifest(plain.host, "test/multi", "arm", buildIndex([both[0]!]));
}

function pull(store: Store, ref: string, opts: PullOptions = {}) {
  return pullImage(store, ref, { env: noCreds, ...opts });
}

function blobGets(from: number): string[] {
  return proxy.seen
    .slice(from)
    .filter((s) => s.method === "GET" && s.path.includes("/blobs/"))
    .map((s) => s.path);
}

/** Nothing half-written: no image, no scratch, no download; everything left verifies and goes with gc. */
async function assertClean(store: Store): Promise<void> {
  assert.deepEqual(await listImages(store), []);
  assert.deepEqual(readdirSync(store.tmpDir), []);
  const downloads = imageDirs(store).downloads;
  assert.deepEqual(existsSync(downloads) ? readdirSync(downloads) : [], []);
  assert.equal((await verifyStore(store)).ok, true);
}

function oneLine(e: Error, type: new (...a: never[]) => Error, pattern: RegExp): true {
  assert.ok(e instanceof type, `${e.name}: ${e.message}`);
  assert.match(e.message, pattern);
  assert.doesNotMatch(e.message, /\n/);
  return true;
}

test("pull by tag and digest; a repository's 2nd image fetches its new layer only; a repeat: nothing", async () => {
  const store = newStore();
  const from = proxy.seen.length;
  const first = await pull(store, `${proxy.host}/test/small:1`);
  assert.equal(first.ref, `${proxy.host}/test/small:1`);
  assert.equal(first.image.platform.architecture, "amd64");
  assert.equal(blobGets(from).length, 3, "config and two layers");
  const mark = proxy.seen.length;
  const second = await pull(store, `${proxy.host}/test/small:2`);
  assert.deepEqual(
    second.layers.map((l) => l.stored),
    [false, true],
  );
  assert.equal(blobGets(mark).length, 2, "config and the one new layer");
  const again = proxy.seen.length;
  const byDigest = await pull(store, `${proxy.host}/test/small@${small("one").manifest.digest}`);
  assert.equal(byDigest.cached, true);
  assert.equal(byDigest.image.id, first.image.id);
  assert.deepEqual(
    blobGets(again).filter((p) => !p.includes(first.image.id)),
    [],
    "no layer fetched again",
  );
  assert.equal((await verifyStore(store)).ok, true);
});

test("an index picks linux/amd64, or --platform; an image without it is refused, naming what it has", async () => {
  const store = newStore();
  const amd = await pull(store, `${plain.host}/test/multi:1`);
  assert.equal(amd.image.platform.architecture, "amd64");
  const arm = await pull(store, `${plain.host}/test/multi:1`, { platform: { os: "linux", architecture: "arm64" } });
  assert.equal(arm.image.platform.architecture, "arm64");
  await assert.rejects(pull(newStore(), `${plain.host}/test/multi:arm`), (e: Error) =>
    oneLine(e, ImageInvalidError, /has no linux\/amd64 image \(it has: linux\/arm64\); see --platform/),
  );
});

test("basic auth (htpasswd), credentials from REGISTRY_AUTH_FILE or ~/.docker; none or wrong: denied", async () => {
  const htpasswd = join(dir, "htpasswd");
  writeFileSync(htpasswd, execFileSync("htpasswd", ["-Bbn", "alice", "s3cret"]));
  const reg = await TestRegistry.start(join(dir, "basic"), { htpasswd });
  const auth = `Basic ${Buffer.from("alice:s3cret").toString("base64")}`;
  await pushImage(reg.host, "team/app", "1", small("basic"), auth);
  const ref = `${reg.host}/team/app:1`;
  await assert.rejects(pull(newStore(), ref), (e: Error) =>
    oneLine(e, RegistryDeniedError, /needs credentials \(401\)/),
  );
  const authFile = join(dir, "auth.json");
  const entry = (pw: string) => ({ auths: { [reg.host]: { auth: Buffer.from(`alice:${pw}`).toString("base64") } } });
  writeFileSync(authFile, JSON.stringify(entry("s3cret")));
  assert.equal((await pull(newStore(), ref, { env: { ...noCreds, REGISTRY_AUTH_FILE: authFile } })).cached, false);
  const home = join(dir, "home");
  mkdirSync(join(home, ".docker"), { recursive: true });
  writeFileSync(join(home, ".docker", "config.json"), JSON.stringify(entry("s3cret")));
  assert.equal((await pull(newStore(), ref, { env: { HOME: home } })).ref, ref);
  writeFileSync(authFile, JSON.stringify(entry("wrong")));
  await assert.rejects(pull(newStore(), ref, { env: { ...noCreds, REGISTRY_AUTH_FILE: authFile } }), (e: Error) =>
    oneLine(e, RegistryDeniedError, /refused the credentials from .*auth\.json \(401/),
  );
});

test("bearer tokens as Docker Hub issues them: anonymous for public repositories, else credentials", async () => {
  const users = { alice: "pw-alice", bob: "pw-bob" };
  const tokens = await TokenServer.start(join(dir, "tokens"), users, (user, repo) =>
    repo.startsWith("public/") || user === "alice" ? ["pull", "push"] : [],
  );
  const reg = await TestRegistry.start(join(dir, "token"), {
    token: { realm: tokens.url, service: TokenServer.service, issuer: TokenServer.issuer, certFile: tokens.certFile },
  });
  for (const repo of ["public/app", "private/app"]) {
    await pushImage(reg.host, repo, "1", small(repo), `Bearer ${tokens.mint("alice", repo, ["pull", "push"])}`);
  }
  const pub = await pull(newStore(), `${reg.host}/public/app:1`);
  assert.equal(pub.cached, false);
  assert.ok(tokens.requests.some((r) => r.user === undefined && r.scope === "repository:public/app:pull"));
  await assert.rejects(pull(newStore(), `${reg.host}/private/app:1`), (e: Error) =>
    oneLine(e, RegistryDeniedError, /needs credentials/),
  );
  const authFile = join(dir, "token-auth.json");
  const as = (user: string, pw: string) => {
    const auth = Buffer.from(`${user}:${pw}`).toString("base64");
    writeFileSync(authFile, JSON.stringify({ auths: { [reg.host]: { auth } } }));
    return { env: { ...noCreds, REGISTRY_AUTH_FILE: authFile } };
  };
  assert.equal((await pull(newStore(), `${reg.host}/private/app:1`, as("alice", "pw-alice"))).cached, false);
  assert.ok(tokens.requests.some((r) => r.user === "alice" && r.scope === "repository:private/app:pull"));
  await assert.rejects(pull(newStore(), `${reg.host}/private/app:1`, as("alice", "nope")), (e: Error) =>
    oneLine(e, RegistryDeniedError, /the token service 127\.0\.0\.1:\d+ refused the credentials from .*\(401\)/),
  );
  await assert.rejects(pull(newStore(), `${reg.host}/private/app:1`, as("bob", "pw-bob")), (e: Error) =>
    oneLine(e, RegistryDeniedError, /refused the credentials from .*token-auth\.json \(401/),
  );
});

test("429 waits for its Retry-After; one too long fails at once; 5xx retried with backoff, then reported", async () => {
  const events: ImageEvent[] = [];
  let manifestCalls = 0;
  proxy.rule = ({ path }) => {
    if (!path.includes("/manifests/")) return undefined;
    manifestCalls++;
    if (manifestCalls === 1) return { kind: "status", status: 429, headers: { "retry-after": "1" } };
    if (manifestCalls <= 3) return { kind: "status", status: 503 };
    return undefined;
  };
  try {
    const started = Date.now();
    await pull(newStore(), `${proxy.host}/test/small:1`, { onEvent: (e) => events.push(e) });
    assert.ok(Date.now() - started >= 1000, "the Retry-After second was waited");
    const retries = events.filter((e) => e.type === "retry");
    assert.equal(retries.length, 3);
    assert.equal(retries[0]?.type === "retry" && retries[0].waitMs, 1000);
    proxy.rule = ({ path }) =>
      path.includes("/manifests/") ? { kind: "status", status: 429, headers: { "retry-after": "3600" } } : undefined;
    const t = Date.now();
    await assert.rejects(pull(newStore(), `${proxy.host}/test/small:1`), (e: Error) =>
      oneLine(e, RegistryError, /rate limit \(429\) after 1 attempt\(s\); it asks to retry after 3600 s/),
    );
    assert.ok(Date.now() - t < 5000);
    proxy.rule = ({ path }) => (path.includes("/manifests/") ? { kind: "status", status: 500 } : undefined);
    await assert.rejects(pull(newStore(), `${proxy.host}/test/small:1`, { attempts: 2 }), (e: Error) =>
      oneLine(e, RegistryError, /server error \(500 TEST: injected\) after 2 attempt/),
    );
  } finally {
    proxy.rule = () => undefined;
  }
});

test("401, 403 and 404 are one clear line each, cause first", async () => {
  const store = newStore();
  try {
    await assert.rejects(pull(store, `${proxy.host}/test/absent:1`), (e: Error) =>
      oneLine(e, ImageNotFoundError, /manifest of .*test\/absent:1: not found on .* \(404 MANIFEST_UNKNOWN/),
    );
    proxy.rule = ({ path }) => (path.includes("/manifests/") ? { kind: "status", status: 403 } : undefined);
    await assert.rejects(pull(store, `${proxy.host}/test/small:1`), (e: Error) =>
      oneLine(e, RegistryDeniedError, /denies access \(403 TEST: injected\)/),
    );
    proxy.rule = ({ path }) =>
      path.includes("/manifests/")
        ? { kind: "status", status: 401, headers: { "www-authenticate": 'Basic realm="x"' } }
        : undefined;
    await assert.rejects(pull(store, `${proxy.host}/test/small:1`), (e: Error) =>
      oneLine(e, RegistryDeniedError, /needs credentials \(401\) and none were found/),
    );
  } finally {
    proxy.rule = () => undefined;
  }
  await assertClean(store);
});

test("a cut blob is resumed with Range; a lying manifest or blob is refused and nothing of it is kept", async () => {
  const layer = big.layers[0]!.digest;
  let cuts = 0;
  proxy.rule = ({ path }) => (path.endsWith(layer) && cuts++ === 0 ? { kind: "cut", afterBytes: 2 << 20 } : undefined);
  try {
    const from = proxy.seen.length;
    await pull(newStore(), `${proxy.host}/test/big:1`);
    const resumed = proxy.seen.slice(from).filter((s) => s.range && s.status === 206);
    assert.equal(resumed.length, 1, "one ranged request continued the cut blob");
    assert.match(resumed[0]!.range!, /^bytes=[1-9]\d*-$/);
    const flip = (b: Buffer) => Buffer.concat([b.subarray(0, 100), Buffer.from([b[100]! ^ 1]), b.subarray(101)]);
    proxy.rule = ({ path }) => (path.endsWith(layer) ? { kind: "rewrite", body: flip } : undefined);
    let store = newStore();
    await assert.rejects(pull(store, `${proxy.host}/test/big:1`), (e: Error) =>
      oneLine(e, ImageInvalidError, /content hashes to sha256:\w+, not to its digest/),
    );
    await assertClean(store);
    store = newStore(); // the same, the layer unpacked on a thread of its own
    await assert.rejects(pull(store, `${proxy.host}/test/big:1`, { unpackThreadMinBytes: 0 }), (e: Error) =>
      oneLine(e, ImageInvalidError, /content hashes to sha256:\w+, not to its digest/),
    );
    await assertClean(store);
    const shrink = (b: Buffer) =>
      Buffer.from(b.toString().replace(/"size":(\d+)\}\]/, (_, s) => `"size":${Number(s) - 7}}]`));
    proxy.rule = ({ path }) =>
      path.includes("/manifests/") ? { kind: "rewrite", body: shrink, dropDigestHeader: true } : undefined;
    store = newStore();
    await assert.rejects(pull(store, `${proxy.host}/test/big:1`), (e: Error) =>
      oneLine(e, ImageInvalidError, /announces \d+ bytes where the manifest's size leaves \d+/),
    );
    await assertClean(store);
    proxy.rule = ({ path }) => (path.includes("/manifests/") ? { kind: "rewrite", body: shrink } : undefined);
    await assert.rejects(pull(newStore(), `${proxy.host}/test/big:1`), (e: Error) =>
      oneLine(e, ImageInvalidError, /the manifest hashes to sha256:\w+, not to the sha256:\w+ the registry gives/),
    );
    proxy.rule = ({ path }) =>
      path.endsWith(layer)
        ? { kind: "status", status: 307, headers: { location: "http://10.255.255.1/x" } }
        : undefined;
    await assert.rejects(pull(newStore(), `${proxy.host}/test/big:1`), (e: Error) =>
      oneLine(e, RegistryDeniedError, /refusing http:\/\/10\.255\.255\.1 \(plain http only for loopback/),
    );
  } finally {
    proxy.rule = () => undefined;
  }
});

test("layers download in parallel, at most --jobs at a time", async () => {
  const layer = (path: string) => wide.layers.some((l) => path.endsWith(l.digest));
  proxy.rule = ({ path }) => (layer(path) ? { kind: "delay", ms: 300 } : undefined);
  try {
    for (const jobs of [2, 4]) {
      proxy.peakBlobs = 0;
      const r = await pull(newStore(), `${proxy.host}/test/wide:1`, { jobs });
      assert.equal(r.layers.filter((l) => l.stored).length, 6);
      assert.equal(proxy.peakBlobs, jobs, `${jobs} layers at once, never more`);
    }
  } finally {
    proxy.rule = () => undefined;
  }
});

test("a registry that keeps cutting a blob short: one line; the bytes kept, the next pull completes them", async () => {
  const layer = big.layers[0]!.digest;
  const store = newStore();
  proxy.rule = ({ path }) => (path.endsWith(layer) ? { kind: "cut", afterBytes: 1 << 20 } : undefined);
  try {
    await assert.rejects(pull(store, `${proxy.host}/test/big:1`, { attempts: 2 }), (e: Error) =>
      oneLine(e, RegistryError, /kept cutting the blob short \([1-9]\d* of 6\d{6} bytes\)/),
    );
    assert.deepEqual(await listImages(store), []);
    const partial = join(imageDirs(store).downloads, layer.slice(7));
    const kept = statSync(partial).size;
    assert.ok(kept > 1 << 20, "the bytes of both attempts are kept for a resume");
    proxy.rule = () => undefined;
    const from = proxy.seen.length;
    await pull(store, `${proxy.host}/test/big:1`);
    assert.ok(proxy.seen.slice(from).some((s) => s.range === `bytes=${kept}-` && s.status === 206));
    assert.deepEqual(readdirSync(imageDirs(store).downloads), []);
    assert.equal((await verifyStore(store)).ok, true);
  } finally {
    proxy.rule = () => undefined;
  }
});

test("a Docker schema 1 manifest or an unknown manifest type: refused, saying what to do", async () => {
  const schema1 = JSON.stringify({ schemaVersion: 1, name: "test/small", tag: "1", fsLayers: [], history: [] });
  const answer = (type: string, body: string): Fault => ({
    kind: "status",
    status: 200,
    headers: { "content-type": type },
    body,
  });
  try {
    proxy.rule = ({ path }) =>
      path.includes("/manifests/")
        ? answer("application/vnd.docker.distribution.manifest.v1+prettyjws", schema1)
        : undefined;
    await assert.rejects(pull(newStore(), `${proxy.host}/test/small:1`), (e: Error) =>
      oneLine(e, ImageInvalidError, /is a Docker schema 1 manifest .*push the image again/),
    );
    proxy.rule = ({ path }) =>
      path.includes("/manifests/") ? answer("application/vnd.example.thing+json", '{"schemaVersion":2}') : undefined;
    await assert.rejects(pull(newStore(), `${proxy.host}/test/small:1`), (e: Error) =>
      oneLine(e, ImageInvalidError, /unsupported media type "application\/vnd\.example\.thing\+json" \(not an image/),
    );
  } finally {
    proxy.rule = () => undefined;
  }
});

test("mirrors are tried first, in order: a dead one is skipped and the next serves docker.io's image", async () => {
  const store = newStore();
  const dead = "http://127.0.0.1:9"; // discard port: nothing listens
  const r = await pull(store, "mirrored:1", {
    // docker.io itself is blocked: whatever happens, nothing leaves the machine.
    registries: { mirrors: { "docker.io": [dead, `http://${plain.host}`] }, blocked: ["docker.io"] },
    attempts: 1,
  });
  assert.equal(r.ref, "docker.io/library/mirrored:1");
  assert.equal(r.from, `http://${plain.host}`);
});

/** Run the CLI; resolves with its exit status and output. */
function cli(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, ...noCreds, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  const done = new Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }>((r) =>
    child.once("close", (code, signal) => r({ code, signal, stdout, stderr })),
  );
  return { child, done };
}

test("kill -9 mid-pull keeps the partial blob; the next pull resumes it with Range and verifies it", async () => {
  const home = join(dir, `home-kill-${++n}`);
  const layer = big.layers[0]!.digest;
  const partial = join(home, "store", "images", "downloads", layer.slice(7));
  proxy.rule = ({ path }) => (path.endsWith(layer) ? { kind: "stall", afterBytes: 3 << 20 } : undefined);
  try {
    const run = cli(["--home", home, "images", "pull", `${proxy.host}/test/big:1`]);
    for (let i = 0; i < 600 && !(existsSync(partial) && statSync(partial).size >= 3 << 20); i++)
      await new Promise((r) => setTimeout(r, 50));
    run.child.kill("SIGKILL");
    assert.equal((await run.done).signal, "SIGKILL");
    assert.equal(statSync(partial).size, 3 << 20, "the partial blob is kept");
    const tmp = join(home, "store", "tmp");
    assert.match(readdirSync(tmp).join(), /^obj-\d+-/, "the killed pull left the object it was writing");
    proxy.rule = () => undefined;
    const from = proxy.seen.length;
    const again = await cli(["--home", home, "images", "pull", "--json", `${proxy.host}/test/big:1`]).done;
    assert.equal(again.code, 0, again.stderr);
    assert.equal(JSON.parse(again.stdout).refs[0], `${proxy.host}/test/big:1`);
    assert.ok(proxy.seen.slice(from).some((s) => s.range === `bytes=${3 << 20}-` && s.status === 206));
    assert.equal(existsSync(partial), false);
    const store = openStore(join(home, "store"));
    assert.equal((await verifyStore(store)).ok, true);
    assert.deepEqual(readdirSync(store.tmpDir), []);
  } finally {
    proxy.rule = () => undefined;
  }
});

test("a disk that fills mid-pull: one line, nothing half-written kept, the store usable after", {
  skip: process.getuid?.() !== 0,
}, async () => {
  const mount = join(dir, `small-fs-${++n}`);
  mkdirSync(mount);
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mount]);
  try {
    const store = openStore(join(mount, "store"));
    for (const thread of [{}, { unpackThreadMinBytes: 0 }]) {
      await assert.rejects(pull(store, `${plain.host}/test/big:1`, thread), (e: Error) =>
        oneLine(e, DiskFullError, /no space left on the store's filesystem while .*layer 1\/1/),
      );
      await assertClean(store);
    }
    assert.equal((await pull(store, `${plain.host}/test/small:1`)).cached, false, "the store still works");
  } finally {
    execFileSync("umount", [mount]);
  }
});

test("CLI: exit 2 for bad input (a bad reference, an unknown image), 0 and JSON on success; ls, rm, gc", async () => {
  const home = join(dir, `home-cli-${++n}`);
  const bad = await cli(["--home", home, "images", "pull", "Not/Lower"]).done;
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim(), 'minisandbox: invalid image reference "Not/Lower": repository names are lowercase');
  const missing = await cli(["--home", home, "images", "pull", `${plain.host}/test/absent:1`]).done;
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /^minisandbox: manifest of .*: not found on/);
  const ok = await cli(["--home", home, "images", "pull", `${plain.host}/test/small:1`]).done;
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(
    ok.stdout,
    /^pulled 127\.0\.0\.1:\d+\/test\/small:1 from http:\/\/127\.0\.0\.1:\d+: sha256:\w{12}, 2 layers, 2 unpacked/,
  );
  // Off a terminal: one line per layer with the bytes so far, of all, and the ETA from the byte rate.
  assert.match(ok.stderr, /: 2\/2 layers sha256:\w+: \d+ new files \([\d.]+ \w*B\/[\d.]+ \w*B, ETA (\d+s|\?)\)/);
  const ls = JSON.parse((await cli(["--home", home, "images", "ls", "--json"]).done).stdout);
  assert.deepEqual(ls[0].refs, [
    `${plain.host}/test/small:1`,
    `${plain.host}/test/small@${small("one").manifest.digest}`,
  ]);
  const rm = await cli(["--home", home, "images", "rm", `${plain.host}/test/small:1`]).done;
  assert.equal(rm.code, 0, rm.stderr);
  const rm2 = await cli(["--home", home, "images", "rm", ls[0].record.id]).done;
  assert.match(rm2.stdout, /image sha256:\w+ removed/);
  const gc = await gcStore(openStore(join(home, "store")));
  assert.ok(gc.removedObjects >= 3);
  assert.equal((await cli(["--home", home, "images", "rm", "gone:1"]).done).code, 2);
});

test("import: skopeo copies (oci-archive, docker-archive, OCI layout) of a registry's image are it", async () => {
  const store = newStore();
  const pulled = await pull(store, `${plain.host}/test/gzip:1`);
  const sources: string[] = [];
  for (const [i, dest] of [
    `oci-archive:${dir}/s.oci.tar`,
    `docker-archive:${dir}/s.docker.tar`,
    `oci:${dir}/s.oci`,
  ].entries()) {
    const tagged = dest.startsWith("docker-archive") ? `${dest}:test/gzip:1` : dest;
    execFileSync("skopeo", ["copy", "--quiet", "--src-tls-verify=false", `docker://${plain.host}/test/gzip:1`, tagged]);
    sources.push(i === 0 ? dest : dest.split(":").slice(1).join(":"));
  }
  for (const source of sources) {
    const other = newStore();
    const r = await importImage(other, source, { tags: ["imported/small:2"] });
    assert.equal(r.image.id, pulled.image.id, source);
    assert.equal(r.image.rootfs, pulled.image.rootfs, `${source}: same layers, same root filesystem`);
    assert.deepEqual(r.refs, ["docker.io/imported/small:2"]);
  }
});
