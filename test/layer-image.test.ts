/**
 * Layer images: a layer mounted from its metadata image must look, from inside a sandbox, exactly like the same layer
 * materialized by hard links (every path's type, mode, owner, time, size, content, symlink target, xattrs and hard
 * link group), behave the same under writes, never let a write reach the store, and leave no mount behind.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { chooseLayerForm, NodeCache } from "../src/env/cache/index.js";
import { InvalidInputError } from "../src/errors.js";
import {
  findStoredLayerImage,
  gcStore,
  ingestLayer,
  layerImagesDir,
  openStore,
  removeLayer,
  removeTree,
  storeLayerImage,
  verifyStore,
  type LayerManifest,
} from "../src/env/store/index.js";
import { layerImage } from "../src/env/store/layer-image.js";
import { Sandbox } from "../src/index.js";
import { launchMode } from "../src/sandbox/host.js";
import { parseImageLower } from "../src/sandbox/plan.js";

const root = launchMode() === "root";

function tmpDir(t: TestContext): string {
  const dir = fs.mkdtempSync(join(os.tmpdir(), "msb-image-"));
  t.after(() => removeTree(dir));
  return dir;
}

/** A tree with what a layer can hold: odd modes, hard links, symlinks, byte names, big directories, a git index. */
function makeTree(dir: string): { testbed: string; venv: string } {
  const tb = join(dir, "testbed");
  const venv = join(dir, "venv");
  fs.mkdirSync(join(tb, "pkg", "deep", "er"), { recursive: true });
  fs.mkdirSync(join(tb, ".git"), { recursive: true });
  fs.mkdirSync(join(venv, "bin"), { recursive: true });
  fs.mkdirSync(join(tb, "private"), { mode: 0o700 });
  fs.mkdirSync(join(tb, "traverse-only"), { mode: 0o711 });
  fs.writeFileSync(join(tb, "README"), "hello\n");
  fs.writeFileSync(join(tb, "pkg", "same-as-readme"), "hello\n");
  fs.writeFileSync(join(tb, "empty"), "");
  fs.writeFileSync(join(tb, "big.bin"), Buffer.alloc(3 * 1024 * 1024 + 17, 0x5a));
  fs.writeFileSync(join(tb, ".git", "index"), "DIRC-fake-index");
  fs.writeFileSync(join(tb, "private", "secret"), "s", { mode: 0o600 });
  fs.writeFileSync(join(venv, "bin", "tool"), "#!/bin/sh\necho tool\n", { mode: 0o755 });
  fs.linkSync(join(venv, "bin", "tool"), join(venv, "bin", "tool-again"));
  fs.linkSync(join(tb, "README"), join(tb, "pkg", "deep", "readme-link"));
  fs.symlinkSync("../README", join(tb, "pkg", "up"));
  fs.symlinkSync("/etc/hostname", join(tb, "absolute"));
  fs.symlinkSync("missing/target", join(tb, "dangling"));
  fs.symlinkSync("x".repeat(4000), join(tb, "long-target"));
  fs.writeFileSync(Buffer.from(join(tb, "pkg/caf\xe9-latin1"), "latin1"), "bytes\n");
  fs.writeFileSync(join(tb, "pkg", "n".repeat(255)), "long name\n");
  for (let i = 0; i < 700; i++) fs.writeFileSync(join(tb, "pkg", "deep", "er", `module_${i}.py`), `x = ${i}\n`);
  return { testbed: tb, venv };
}

/** Every path under the layer's mount points, as one line of its attributes (inode numbers as hard-link groups). */
const LISTING = `
import hashlib, os, stat, sys
for top in ("/testbed", "/opt/venv"):
    groups = {}
    for base, dirs, files in os.walk(top):
        dirs.sort(); files.sort()
        for name in [""] + dirs + files:
            p = os.path.join(base, name) if name else base
            if name == "" and base != top: continue
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            line = [os.fsencode(p).hex(), oct(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)]
            try: line.append(sorted(os.listxattr(p, follow_symlinks=False)))
            except OSError as e: line.append("xattr-error %d" % e.errno)
            if stat.S_ISREG(kind):
                line += [st.st_size, hashlib.sha256(open(p, "rb").read()).hexdigest()]
                line.append("group " + groups.setdefault((st.st_dev, st.st_ino), os.fsencode(p).hex()))
            elif stat.S_ISLNK(kind): line += [st.st_size, os.fsencode(os.readlink(p)).hex()]
            elif stat.S_ISDIR(kind): line += [st.st_nlink, sorted(os.listdir(p)) == sorted(os.listdir(p))]
            print(*line)
`;

const withoutGroup = (line: string): string => line.replace(/ group \S+$/, "");

/** Sets of paths (hex, as listed) that are one file, largest first then by name. */
function linkGroups(list: string): string[][] {
  const groups = new Map<string, string[]>();
  for (const line of list.split("\n")) {
    const m = / group (\S+)$/.exec(line);
    if (m) groups.set(m[1]!, [...(groups.get(m[1]!) ?? []), line.split(" ")[0]!]);
  }
  return [...groups.values()].map((g) => g.sort()).sort((x, y) => y.length - x.length || x[0]!.localeCompare(y[0]!));
}

/** The source trees' own hard links, named as the sandbox shows them. */
function sourceGroups(src: string): string[][] {
  const lines: string[] = [];
  for (const [tree, at] of [
    ["testbed", "/testbed"],
    ["venv", "/opt/venv"],
  ] as const) {
    const walk = (dir: Buffer, shown: Buffer): void => {
      for (const name of fs.readdirSync(dir, { encoding: "buffer" })) {
        const p = Buffer.concat([dir, Buffer.from("/"), name]);
        const q = Buffer.concat([shown, Buffer.from("/"), name]);
        const st = fs.lstatSync(p);
        if (st.isDirectory()) walk(p, q);
        else if (st.isFile()) lines.push(`${q.toString("hex")} group ${st.ino}`);
      }
    };
    walk(Buffer.from(join(src, tree)), Buffer.from(at));
  }
  return linkGroups(lines.join("\n"));
}

async function listing(lowers: Record<string, string>, home: string): Promise<string> {
  await using sb = await Sandbox.create({
    home,
    overlays: [
      { lower: [lowers["testbed"]!], target: "/testbed" },
      { lower: [lowers["venv"]!], target: "/opt/venv" },
    ],
  });
  const r = await sb.exec(["python3", "-c", LISTING]);
  assert.equal(r.exitCode, 0, r.stderr);
  return r.stdout;
}

/** The test tree ingested as layer "L" and leased in both forms, hard-linked trees and a mounted image. */
async function layerInBothForms(t: TestContext) {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await ingestLayer(store, "L", makeTree(join(dir, "src")));
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  const tree = await cache.acquire("L", { form: "tree" });
  const image = await cache.acquire("L", { form: "image" });
  t.after(() => Promise.all([tree.release(), image.release()]));
  return { dir, store, cache, tree, image };
}

test("a mounted layer image shows exactly what hard-link materialization shows", { skip: !root }, async (t) => {
  const { dir, cache, tree, image } = await layerInBothForms(t);
  assert.equal(image.form, "image");
  assert.ok(parseImageLower(image.trees["testbed"]!), image.trees["testbed"]);
  assert.deepEqual(Object.keys(image.trees).sort(), ["testbed", "venv"]);
  // Directory sizes are the filesystem's own (ext4 blocks vs EROFS bytes) and are not in the listing; the rest is.
  const [linked, mounted] = await Promise.all([listing(tree.trees, dir), listing(image.trees, dir)]);
  assert.ok(linked.split("\n").length > 700, linked.slice(0, 500));
  const a = linked.split("\n").map(withoutGroup);
  const b = mounted.split("\n").map(withoutGroup);
  for (let i = 0; i < Math.max(a.length, b.length); i++) assert.equal(b[i], a[i], `line ${i}`);
  // Hard links: the image has exactly the layer's own; materialized files of equal content share the store's inode too.
  assert.deepEqual(linkGroups(mounted), sourceGroups(join(dir, "src")));
  assert.ok(linkGroups(linked).length < linkGroups(mounted).length);
  assert.deepEqual(
    (await cache.list()).map((l) => l.forms.sort()),
    [["image", "tree"]],
  );
});

const WRITES = [
  "echo changed >> README && rm pkg/same-as-readme && rm -r pkg/deep/er && mkdir pkg/deep/er",
  "echo new > pkg/deep/er/only && chmod 600 big.bin && truncate -s 1 big.bin && ln -sf elsewhere pkg/up",
  "echo rewritten > /opt/venv/bin/tool-again && mv pkg/deep pkg/moved && ln README pkg/new-link",
  "cat README /opt/venv/bin/tool /opt/venv/bin/tool-again; ls -A . pkg pkg/moved pkg/moved/er; readlink pkg/up",
  "stat -c '%n %s %a %u %g' big.bin pkg/new-link pkg/moved; git --version >/dev/null 2>&1; true",
].join(" && ");

test("writes through a mounted image behave as over hard links, stay in the sandbox, never reach the store", {
  skip: !root,
}, async (t) => {
  const { dir, store, tree, image } = await layerInBothForms(t);
  const overlays = (lowers: Record<string, string>) => [
    { lower: [lowers["testbed"]!], target: "/testbed" },
    { lower: [lowers["venv"]!], target: "/opt/venv" },
  ];
  const outputs: string[] = [];
  for (const lease of [tree, image]) {
    await using sb = await Sandbox.create({ home: dir, overlays: overlays(lease.trees) });
    assert.equal(sb.security().layerImages, lease === image);
    const r = await sb.exec(WRITES, { cwd: "/testbed" });
    assert.equal(r.exitCode, 0, r.stderr);
    outputs.push(r.stdout);
    if (lease !== image) continue;
    // A fork carries the writes, over the same image.
    const [child] = await sb.fork(1);
    await using _child = child!;
    assert.equal((await child!.exec("cat /testbed/README; ls /testbed/pkg/moved/er")).stdout, "hello\nchanged\nonly\n");
    // The image's mounts are detached ones of the launch: neither the host nor the sandbox's mount table has them.
    const file = parseImageLower(image.trees["testbed"]!)!.image;
    for (const table of ["/proc/self/mountinfo", `/proc/${sb.pid1}/mountinfo`])
      assert.ok(!fs.readFileSync(table, "utf8").includes(file), `${table} shows ${file}`);
  }
  assert.equal(outputs[1], outputs[0]);
  assert.match(outputs[1]!, /^hello\nchanged\n#!\/bin\/sh\necho tool\nrewritten\n/);
  const report = await verifyStore(store);
  assert.equal(report.ok, true, JSON.stringify(report.corrupt.slice(0, 3)));
  // A new sandbox on the image sees the layer as it was.
  await using fresh = await Sandbox.create({ home: dir, overlays: overlays(image.trees) });
  const r = await fresh.exec("cat README; ls pkg/deep/er | wc -l; cat /opt/venv/bin/tool-again", { cwd: "/testbed" });
  assert.equal(r.stdout, "hello\n700\n#!/bin/sh\necho tool\n");
});

test("a manifest whose names no filesystem holds gets no image: one line saying which entry", () => {
  const manifest = (path: string, target?: string): LayerManifest => ({
    format: 1,
    key: "bad",
    mtime: { policy: "fixed", epochSec: 946684800 },
    trees: {
      testbed: {
        mode: 0o755,
        entries: [target ? { path, type: "symlink", target } : { path, type: "dir", mode: 0o755 }],
      },
    },
  });
  assert.throws(
    () => layerImage(manifest("n".repeat(256))),
    (e: Error) => e instanceof InvalidInputError && /longer than 255/.test(e.message),
  );
  assert.throws(() => layerImage(manifest("l", "t".repeat(4096))), /symlink target of 4096 bytes/);
  assert.ok(layerImage(manifest("n".repeat(255))).length > 0);
});

test("the layer form is chosen by trying the real mount; a non-root host materializes", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  const choice = await chooseLayerForm(store);
  assert.equal(choice.form, root ? "image" : "tree", choice.reason);
  assert.ok(choice.reason.length > 20);
  assert.deepEqual(fs.readdirSync(store.tmpDir), [], "the probe leaves nothing behind");
  const cache = new NodeCache({ store, dir: join(dir, "cache"), form: "auto" });
  assert.deepEqual(await cache.formChoice(), choice);
});

test("auto leases a layer's tree once it is here, else the host's choice", async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await ingestLayer(store, "A", makeTree(join(dir, "src-a")));
  await ingestLayer(store, "B", makeTree(join(dir, "src-b")));
  const cache = new NodeCache({ store, dir: join(dir, "cache"), form: "auto" });
  const choice = await cache.formChoice();
  const first = await cache.acquire("A");
  assert.equal(first.form, choice.form, "a layer with no tree here: the host's choice");
  const tree = await cache.acquire("A", { form: "tree" });
  const again = await cache.acquire("A");
  assert.equal(again.form, "tree", "its tree is here: every sandbox after gets it");
  assert.equal(again.trees["testbed"], tree.trees["testbed"]);
  const other = await cache.acquire("B");
  assert.equal(other.form, choice.form, "another layer's tree changes nothing for this one");
  await Promise.all([first, tree, again, other].map((l) => l.release()));
});

test("the store keeps a layer's image: placed again (after an eviction, by another cache) it is linked, not written", {
  skip: !root,
}, async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await ingestLayer(store, "L", makeTree(join(dir, "src")));
  const cache = new NodeCache({ store, dir: join(dir, "cache") });
  const written: string[] = [];
  cache.on("materialize-start", ({ key }) => written.push(key));
  const first = await cache.acquire("L", { form: "image" });
  const stored = await findStoredLayerImage(store, "L");
  assert.ok(stored, "the first placement leaves the image in the store");
  const inode = (p: string): number => fs.statSync(p).ino;
  const imageOf = (lease: { path: string }): string => join(lease.path, "layer.erofs");
  assert.equal(inode(imageOf(first)), inode(stored.path));
  // The trees' tops are the sandbox's own writable directories (made at its start, with its time): left out.
  const below = (text: string): string =>
    text
      .split("\n")
      .filter((l) => !["/testbed", "/opt/venv"].some((top) => l.startsWith(`${Buffer.from(top).toString("hex")} `)))
      .join("\n");
  const shown = below(await listing(first.trees, dir));
  await first.release();
  await cache.evict({ maxBytes: 0 });
  assert.equal(await cache.has("L"), false);

  const again = await cache.acquire("L", { form: "image" });
  assert.deepEqual(written, ["L"], "placed again without the locked write");
  assert.equal(inode(imageOf(again)), inode(stored.path));
  assert.equal(below(await listing(again.trees, dir)), shown);
  await again.release();

  // Two caches on one directory (two processes) placing it at once: one placement, both leased, no scratch left.
  const shared = join(dir, "other-cache");
  const [a, b] = await Promise.all(
    [1, 2].map(() => new NodeCache({ store, dir: shared }).acquire("L", { form: "image" })),
  );
  assert.equal(a!.path, b!.path);
  assert.equal(inode(imageOf(a!)), inode(stored.path));
  assert.deepEqual(fs.readdirSync(join(shared, "tmp")), []);
  await Promise.all([a!.release(), b!.release()]);
});

test("a layer whose manifest changed gets a new image; gc drops the old one and keeps the current", {
  skip: !root,
}, async (t) => {
  const dir = tmpDir(t);
  const store = openStore(join(dir, "store"));
  await ingestLayer(store, "L", makeTree(join(dir, "src")));
  await ingestLayer(store, "M", makeTree(join(dir, "src-m")));
  const old = await storeLayerImage(store, "L");
  const kept = await storeLayerImage(store, "M");
  assert.equal(old.written, true);
  assert.equal((await storeLayerImage(store, "L")).written, false, "written once");
  await removeLayer(store, "L");
  assert.equal(await findStoredLayerImage(store, "L"), undefined, "no layer, no image");
  const changed = makeTree(join(dir, "src-2"));
  fs.writeFileSync(join(changed.testbed, "README"), "changed\n");
  await ingestLayer(store, "L", changed);
  assert.equal(await findStoredLayerImage(store, "L"), undefined, "the old image is not this manifest's");
  const current = await storeLayerImage(store, "L");
  assert.notEqual(current.path, old.path);
  const r = await gcStore(store);
  assert.equal(r.removedImageFiles, 2, "the old image and its record");
  assert.equal(fs.existsSync(old.path), false);
  assert.deepEqual(
    fs.readdirSync(layerImagesDir(store)).sort(),
    [
      ...[current.path, kept.path].flatMap((p) => [p, p.replace(/\.erofs$/, ".json")]).map((p) => p.split("/").pop()),
    ].sort(),
  );
  assert.equal((await findStoredLayerImage(store, "L"))?.path, current.path);
  // verify rebuilds each kept image from its manifest: a changed byte is named, with its layer.
  assert.deepEqual((await verifyStore(store)).badLayerImages, []);
  const bytes = fs.readFileSync(current.path);
  bytes[1024] = bytes[1024]! ^ 0xff;
  fs.writeFileSync(current.path, bytes);
  const report = await verifyStore(store);
  assert.equal(report.ok, false);
  assert.deepEqual(
    report.badLayerImages.map((b) => b.key),
    ["L"],
  );
});
