/**
 * Sandboxes on images: a SWE-bench-style instance image (Debian root, a venv, the fixture repository at /testbed,
 * files owned by a second user) imported into the store, then run through the one door. The image's own root
 * filesystem is `/` (copy-on-write: nothing reaches the store or another sandbox), its config's Env, WorkingDir and
 * User apply, owners stay as the image has them, and the isolation is every sandbox's.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { importImage } from "../src/env/images/index.js";
import { openStore } from "../src/env/store/index.js";
import { openSandbox, resolveWorkspace } from "../src/env/workspace.js";
import { NotFoundError } from "../src/errors.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { homeLayout } from "../src/util/home.js";
import { tempDir } from "./helpers.js";
import { derivedLayout } from "./oci.js";
import { call, startServe } from "./serve-process.js";

const CLI = fileURLToPath(new URL("../src/cli/index.js", import.meta.url));
const dir = tempDir("msb-img-run-");
let layouts = 0;
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const instance = set.images.find((i) => i.kind === "instance")!;
const store = openStore(homeLayout(home).store);
const imported = await importImage(store, set.layout, { name: instance.name });
const ref = imported.refs[0]!;

/** Lease files of the home's node cache (each sandbox on an image holds one while it lives). */
function leaseFiles(): string[] {
  const leases = join(home, "cache", "leases");
  if (!existsSync(leases)) return [];
  return readdirSync(leases, { recursive: true })
    .map(String)
    .filter((f) => f.includes("/lease-"));
}

/** The same image with its config edited (a layout of its own whose blobs are links to the fixture's). */
function withConfig(edit: (config: Record<string, unknown>) => void): string {
  const out = join(dir, `layout-${++layouts}`);
  return derivedLayout(set.layout, instance.name, out, ({ config }) => edit(config.config));
}

test("a sandbox on an image: its root filesystem, owners, Env and WorkingDir; none of the host's system", async () => {
  await using sb = await openSandbox({ home, image: ref });
  const r = await sb.exec(
    "pwd; id -u; echo $PATH; cat /etc/debian_version; stat -c %u:%g:%a /home/nonroot; " +
      "python -c 'import calc, sys; print(calc.__file__, sys.prefix)'; git -C /testbed rev-parse HEAD",
  );
  assert.equal(r.exitCode, 0, r.stderr);
  const [cwd, uid, path, debian, owner, python, head] = r.stdout.trim().split("\n");
  assert.equal(cwd, "/testbed", "WorkingDir");
  assert.equal(uid, "0", "no User: root");
  assert.match(path!, /^\/opt\/venv\/bin:/, "the image's PATH");
  assert.match(debian!, /^12\./);
  assert.equal(owner, "1000:1000:700", "nonroot's home stays nonroot's");
  assert.equal(python, "/testbed/calc/__init__.py /opt/venv", "the image's venv, the image's testbed");
  const base = set.instances.find((i) => i.instance_id === instance.instanceId)!.base_commit;
  assert.equal(head, base);
  // Nothing of the host's system: its node binary (the test runs under it) is not in the image.
  assert.equal((await sb.exec(["test", "-e", process.execPath])).exitCode, 1);
  assert.equal(sb.labels.image, ref);
  const sec = sb.security();
  assert.equal(sec.seccomp, true);
  assert.equal(sec.noNewPrivileges, true);
});

test("writes are copy-on-write: the image, the store and a neighbour on the same image never see them", async () => {
  const ws = await resolveWorkspace({ home, image: ref });
  try {
    const a = await ws.start();
    const b = await ws.start();
    try {
      const w = await a.exec("echo mine > /etc/planted && rm /testbed/setup.py && echo ok");
      assert.equal(w.stdout.trim(), "ok", w.stderr);
      assert.equal((await a.exec(["cat", "/etc/planted"])).stdout, "mine\n");
      assert.equal((await b.exec(["test", "-e", "/etc/planted"])).exitCode, 1);
      assert.equal((await b.exec(["test", "-e", "/testbed/setup.py"])).exitCode, 0);
      const [child] = await a.fork(1);
      try {
        assert.equal((await child!.exec(["cat", "/etc/planted"])).stdout, "mine\n", "a fork starts from a's state");
        const owner = await child!.exec(["stat", "-c", "%u:%g", "/home/nonroot"]);
        assert.equal(owner.stdout.trim(), "1000:1000", "the image's owners in the fork too");
      } finally {
        await child!.close();
      }
    } finally {
      await a.close();
      await b.close();
    }
  } finally {
    ws.release();
  }
  await using again = await openSandbox({ home, image: ref });
  assert.equal((await again.exec(["test", "-e", "/etc/planted"])).exitCode, 1);
});

test("the config's User applies (name, home from the image's passwd); the caller's options go over it", async () => {
  const layout = withConfig((c) => {
    c.User = "nonroot";
    c.WorkingDir = "/home/nonroot";
    c.Env = [...(c.Env as string[]), "FROM_IMAGE=yes"];
  });
  const r = await importImage(store, layout, { tags: ["msb-test/as-nonroot:1"] });
  await using sb = await openSandbox({ home, image: r.refs[0]! });
  const x = await sb.exec("id -u; id -g; echo $HOME; pwd; echo $FROM_IMAGE; cat ~/.config/inputrc; touch /root/x");
  const lines = x.stdout.trim().split("\n");
  assert.deepEqual(lines, ["1000", "1000", "/home/nonroot", "/home/nonroot", "yes", "set -o vi"], x.stderr);
  assert.notEqual(x.exitCode, 0, "nonroot cannot write root's home");
  assert.match(x.stderr, /Permission denied/);
  await using own = await openSandbox({ home, image: r.refs[0]!, uid: 0, cwd: "/", env: { FROM_IMAGE: "mine" } });
  const y = await own.exec("id -u; pwd; echo $FROM_IMAGE");
  assert.deepEqual(y.stdout.trim().split("\n"), ["0", "/", "mine"]);
  const bad = withConfig((c) => {
    c.User = "nobody-here";
  });
  const b = await importImage(store, bad, { tags: ["msb-test/bad-user:1"] });
  await assert.rejects(
    openSandbox({ home, image: b.refs[0]! }),
    /User "nobody-here": no user nobody-here in the image/,
  );
});

test("an image not in the store: one line saying how to get it (API and CLI, exit 2)", async () => {
  await assert.rejects(openSandbox({ home, image: "docker.io/library/absent:1" }), (e: Error) => {
    assert.ok(e instanceof NotFoundError);
    assert.match(e.message, /image docker\.io\/library\/absent:1 is not in the store; run: minisandbox images pull/);
    return true;
  });
  const cli = (args: string[]) => spawnSync(process.execPath, [CLI, "--home", home, ...args], { encoding: "utf8" });
  const missing = cli(["exec", "--image", "absent:1", "--", "true"]);
  assert.equal(missing.status, 2, missing.stderr);
  assert.equal(missing.stderr.trim().split("\n").length, 1);
  const ok = cli(["exec", "--image", ref, "--", "sh", "-c", "pwd; cat /etc/debian_version"]);
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^\/testbed\n12\./);
  assert.ok(existsSync(join(home, "cache")), "the root filesystem was materialized in the node cache");
});

test("a server's sandbox on an image (POST /sandboxes {image}): the image's root; one source at most", async () => {
  const server = await startServe(home, ["--auth-token", "tok"]);
  const key = "tok";
  const made = await call(server.url, "POST", "/sandboxes", { key, body: { image: ref } });
  assert.equal(made.status, 201, made.text);
  assert.equal(made.json.source, "image");
  const id = made.json.id;
  const r = await call(server.url, "POST", `/sandboxes/${id}/exec`, {
    key,
    body: { command: "pwd; cat /etc/debian_version" },
  });
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.stdout, /^\/testbed\n12\./);
  assert.deepEqual(
    leaseFiles()
      .map((f) => f.split("/")[0]!.replace(/-[0-9a-f]{64}$/, ""))
      .sort(),
    ["rootfs", "testbed-git-1"],
    "the live sandbox holds its image's root filesystem and its testbed's chronological history",
  );
  await call(server.url, "POST", "/sandboxes", { key, body: { image: ref } }); // left for the shutdown to close
  const two = await call(server.url, "POST", "/sandboxes", { key, body: { image: ref, env_key: "x" } });
  assert.equal(two.status, 422);
  assert.match(two.text, /at most one of dir, instance_id, env_key, image/);
  const absent = await call(server.url, "POST", "/sandboxes", { key, body: { image: "absent:1" } });
  assert.equal(absent.status, 404);
  assert.equal(await server.stop(), 0);
  assert.deepEqual(leaseFiles(), [], "no lease outlives the server");
});
