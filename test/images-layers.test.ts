/**
 * Image layers into the store, from OCI layouts written byte by byte: whiteouts and opaque directories applied in
 * order, links resolved inside the image, modes and owners kept (host ids in the store's range), and every hostile
 * construct refused or neutralised with one clear line, the store and the host unchanged.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { importImage } from "../src/env/images/index.js";
import {
  gcStore,
  imageDirs,
  listImages,
  materializeLayer,
  openStore,
  readDiff,
  readManifest,
  removeImage,
  storeIds,
  verifyStore,
  type Store,
} from "../src/env/store/index.js";
import { ImageInvalidError } from "../src/errors.js";
import { buildImage, makeTar, writeOciLayout, type ImageSpec, type TarEntry } from "./oci.js";
import { tempDir } from "./helpers.js";

const root = process.getuid?.() === 0;
const dir = tempDir("msb-img-layers-");
let n = 0;

function layout(spec: ImageSpec, ref = "test:1"): string {
  return writeOciLayout(join(dir, `layout-${++n}`), [{ ref, image: buildImage(spec) }]);
}

function newStore(): Store {
  return openStore(join(dir, `store-${++n}`));
}

async function importAndMaterialize(store: Store, spec: ImageSpec): Promise<{ root: string; key: string }> {
  const r = await importImage(store, layout(spec), { tags: [`test/img${++n}:1`] });
  const dest = join(dir, `mat-${++n}`);
  await materializeLayer(store, r.image.rootfs, dest);
  return { root: join(dest, "rootfs"), key: r.image.rootfs };
}

const f = (name: string, data: string | Buffer = name, extra: Partial<TarEntry> = {}): TarEntry => ({
  name,
  data,
  ...extra,
});
const d = (name: string, extra: Partial<TarEntry> = {}): TarEntry => ({ name, type: "dir", ...extra });

/** Every file a failed import left is complete (verify passes) and unreferenced (gc removes it all), no scratch. */
async function assertUnchanged(store: Store): Promise<void> {
  assert.deepEqual(await listImages(store), []);
  assert.deepEqual(readdirSync(store.tmpDir), []);
  assert.equal((await verifyStore(store)).ok, true);
  await gcStore(store);
  assert.deepEqual(objectFiles(store), []);
  assert.deepEqual(existsSync(imageDirs(store).diffs) ? readdirSync(imageDirs(store).diffs) : [], []);
}

function objectFiles(store: Store): string[] {
  return readdirSync(store.objectsDir).flatMap((s) => readdirSync(join(store.objectsDir, s)));
}

test("whiteouts, opaque dirs, hard links and symlinked parents apply in order, as a runtime unpacks them", async () => {
  const store = newStore();
  const lower = makeTar([
    d("etc"),
    f("etc/keep"),
    f("etc/gone"),
    d("opt/app/old", {}),
    f("opt/app/old/a"),
    f("opt/app/top"),
    d("usr/lib"),
    f("usr/lib/libx.so", "x"),
    { name: "lib", type: "symlink", linkname: "usr/lib" },
    f("data/first", "shared-inode"),
    { name: "data/second", type: "hardlink", linkname: "data/first" },
  ]);
  const upper = makeTar([
    f("etc/.wh.gone", ""),
    f("opt/app/.wh..wh..opq", ""),
    f("opt/app/new"),
    f("lib/liby.so", "y"), // through the symlink: lands in usr/lib
    { name: "data/third", type: "hardlink", linkname: "data/first" }, // a link to a lower layer's file
    f("./etc/keep", "replaced"), // "./" prefixes are how many writers name entries
  ]);
  const { root: rootfs } = await importAndMaterialize(store, { layers: [{ tar: lower }, { tar: upper }] });
  assert.equal(readFileSync(join(rootfs, "etc/keep"), "utf8"), "replaced");
  assert.equal(existsSync(join(rootfs, "etc/gone")), false);
  assert.equal(existsSync(join(rootfs, "etc/.wh.gone")), false);
  assert.deepEqual(readdirSync(join(rootfs, "opt/app")), ["new"]);
  assert.equal(readFileSync(join(rootfs, "usr/lib/liby.so"), "utf8"), "y");
  assert.equal(readlinkSync(join(rootfs, "lib")), "usr/lib");
  const ino = (p: string) => statSync(join(rootfs, p)).ino;
  assert.equal(ino("data/first"), ino("data/second"));
  assert.equal(ino("data/first"), ino("data/third"));
});

test("a layer unpacked on a thread of its own is stored exactly as on the calling thread", async () => {
  const tar = makeTar([
    d("etc"),
    f("etc/.wh.gone", ""),
    f("opt/app/.wh..wh..opq", ""),
    f("bin/tool", "#!/bin/sh\n", { mode: 0o4755, uid: 1000, gid: 70000 }),
    f("big", randomBytes(3 << 20)),
    { name: "lib", type: "symlink", linkname: "usr/lib" },
    { name: "big2", type: "hardlink", linkname: "big" },
  ]);
  const image = buildImage({ layers: [{ tar }] });
  const stored: { diff: unknown; rootfs: unknown; objects: string[] }[] = [];
  for (const thread of [{}, { unpackThreadMinBytes: 0 }]) {
    const store = newStore();
    const at = writeOciLayout(join(dir, `layout-${++n}`), [{ ref: "t:1", image }]);
    const r = await importImage(store, at, { tags: ["t/same:1"], ...thread });
    stored.push({
      diff: await readDiff(store, r.image.layers[0]!.diffId),
      rootfs: await readManifest(store, r.image.rootfs),
      objects: objectFiles(store).sort(),
    });
  }
  assert.equal(stored[0]!.objects.length, 2, "the tool and the big file");
  assert.deepEqual(stored[1], stored[0]);
});

test("modes and owners kept (host ids: the store's range); setuid, devices, xattrs never on a host inode", async () => {
  const store = newStore();
  const tar = makeTar([
    d("tmp", { mode: 0o1777 }),
    d("var/mail", { mode: 0o2775, gid: 8 }),
    d("home/nonroot", { mode: 0o750, uid: 1000, gid: 1000 }),
    f("home/nonroot/.profile", "x", { mode: 0o640, uid: 1000, gid: 1000 }),
    f("usr/bin/su", "su", { mode: 0o4755 }),
    f("usr/bin/ping", "ping", { mode: 0o755, xattrs: { "security.capability": Buffer.from([1, 0, 0, 2]) } }),
    { name: "dev/null", type: "char", mode: 0o666 },
    { name: "run/fifo", type: "fifo" },
    f("srv/big-uid", "b", { uid: 200_000 }),
    { name: "home/nonroot/link", type: "symlink", linkname: "/etc/passwd", uid: 1000, gid: 1000 },
  ]);
  const { root: rootfs, key } = await importAndMaterialize(store, { layers: [{ tar }] });
  const base = root ? storeIds(store).base : undefined;
  const owner = (p: string) => {
    const st = lstatSync(join(rootfs, p));
    return base === undefined ? undefined : [st.uid - base, st.gid - base];
  };
  const mode = (p: string) => lstatSync(join(rootfs, p)).mode & 0o7777;
  assert.equal(mode("tmp"), 0o1777);
  assert.equal(mode("var/mail"), 0o2775);
  assert.equal(mode("home/nonroot"), 0o750);
  assert.equal(mode("home/nonroot/.profile"), 0o640);
  assert.equal(mode("usr/bin/su"), 0o755, "setuid is never set on a host inode");
  if (root) {
    assert.deepEqual(owner("home/nonroot/.profile"), [1000, 1000]);
    assert.deepEqual(owner("home/nonroot/link"), [1000, 1000]);
    assert.deepEqual(owner("var/mail"), [0, 8]);
    assert.deepEqual(owner("srv/big-uid"), [65534, 0], "ids past 65535 become nobody");
    assert.ok(base! > 65536 * 2, "store files belong to a reserved range, never to a host user");
  }
  assert.equal(existsSync(join(rootfs, "dev/null")), false, "device nodes are never created");
  assert.equal(existsSync(join(rootfs, "run/fifo")), false);
  const xattrs = execFileSync("python3", [
    "-c",
    "import os,sys; print(os.listxattr(sys.argv[1]))",
    join(rootfs, "usr/bin/ping"),
  ]);
  assert.equal(xattrs.toString().trim(), "[]");
  const manifest = await readManifest(store, key);
  const entry = (p: string) => manifest.trees.rootfs!.entries.find((e) => e.path === p);
  const su = entry("usr/bin/su");
  assert.equal(su?.type === "file" && su.mode, 0o4755, "recorded, not applied");
  const ping = entry("usr/bin/ping");
  assert.ok(ping?.type === "file" && ping.xattrs?.["security.capability"], "capabilities are recorded");
  assert.deepEqual(manifest.meta?.image, {
    diffIds: [`sha256:${createHash("sha256").update(tar).digest("hex")}`],
    notApplied: { setid: 1, xattrs: 1, specials: 2 },
  });
});

test("Python sources keep their mtime (their .pyc files record it); every other file has the fixed epoch", async () => {
  const store = newStore();
  const tar = makeTar([
    f("app/mod.py", "x = 1\n", { mtime: 1_650_000_123 }),
    f("app/data.txt", "d", { mtime: 1_650_000_123 }),
  ]);
  const { root: rootfs } = await importAndMaterialize(store, { layers: [{ tar }] });
  assert.equal(statSync(join(rootfs, "app/mod.py")).mtimeMs, 1_650_000_123_000);
  assert.equal(statSync(join(rootfs, "app/data.txt")).mtimeMs, 946_684_800_000);
});

test("long and non-UTF-8 names (GNU and pax) round-trip; gzip, zstd and plain layers read alike", async () => {
  const store = newStore();
  const long = `deep/${"d".repeat(120)}/${"n".repeat(150)}.txt`;
  const latin = Buffer.concat([Buffer.from("odd/caf"), Buffer.from([0xe9])]);
  const layers = [
    { tar: makeTar([f(long, "pax")]), compression: "gzip" as const },
    {
      tar: makeTar([{ name: `gnu/${"g".repeat(130)}`, data: "gnu", gnuLongName: true }]),
      compression: "zstd" as const,
    },
    { tar: makeTar([{ name: latin, data: "latin1" }]), compression: "none" as const },
  ];
  const { root: rootfs } = await importAndMaterialize(store, { layers });
  assert.equal(readFileSync(join(rootfs, long), "utf8"), "pax");
  assert.equal(readFileSync(join(rootfs, `gnu/${"g".repeat(130)}`), "utf8"), "gnu");
  assert.equal(readFileSync(Buffer.concat([Buffer.from(`${rootfs}/`), latin])).toString(), "latin1");
});

test("links stay in the tree (absolute names, symlinked parents, '..' in targets); duplicates: last wins", async () => {
  const store = newStore();
  const before = readFileSync("/etc/passwd");
  const tar = makeTar([
    d("etc"),
    { name: "evil", type: "symlink", linkname: "/etc" },
    f("evil/passwd", "image passwd"),
    { name: "up", type: "symlink", linkname: "../../../../.." },
    f("up/tmp/planted", "inside"),
    f("/abs/file", "absolute names are relative to the image root"),
    f("dup", "first"),
    f("./dup", "second: the last of a name wins"),
  ]);
  const { root: rootfs } = await importAndMaterialize(store, { layers: [{ tar }] });
  assert.equal(readFileSync(join(rootfs, "dup"), "utf8"), "second: the last of a name wins");
  const diffId = `sha256:${createHash("sha256").update(tar).digest("hex")}`;
  assert.deepEqual((await readDiff(store, diffId)).warnings, ["1 duplicate entries: the last one of each name wins"]);
  assert.equal(readFileSync(join(rootfs, "etc/passwd"), "utf8"), "image passwd");
  assert.equal(readFileSync(join(rootfs, "tmp/planted"), "utf8"), "inside");
  assert.equal(readFileSync(join(rootfs, "abs/file"), "utf8"), "absolute names are relative to the image root");
  assert.deepEqual(readFileSync("/etc/passwd"), before, "the host is unchanged");
  assert.equal(existsSync("/tmp/planted"), false);
});

const hostile: [string, () => ImageSpec, RegExp][] = [
  ["a '..' entry", () => ({ layers: [{ tar: makeTar([f("../../escape", "x")]) }] }), /climbs out of the image/],
  ["a whiteout that names no file", () => ({ layers: [{ tar: makeTar([f("etc/.wh...", "")]) }] }), /names no file/],
  [
    "a whiteout climbing out",
    () => ({ layers: [{ tar: makeTar([f("../.wh.passwd", "")]) }] }),
    /climbs out of the image/,
  ],
  [
    "a hard link to a host file",
    () => ({ layers: [{ tar: makeTar([{ name: "shadow", type: "hardlink", linkname: "/etc/shadow" }]) }] }),
    /hard link "shadow" -> "etc\/shadow" points to nothing in the image/,
  ],
  [
    "a hard link to a directory",
    () => ({ layers: [{ tar: makeTar([d("x"), { name: "y", type: "hardlink", linkname: "x" }]) }] }),
    /points to a directory/,
  ],
  [
    "a tar bomb (bytes)",
    () => ({ layers: [{ tar: makeTar([f("zeros", Buffer.alloc(8 << 20))]) }] }),
    /expands past the 4194304-byte budget/,
  ],
  [
    "a tar bomb (entries)",
    () => ({ layers: [{ tar: makeTar(Array.from({ length: 300 }, (_, i) => f(`e${i}`, ""))) }] }),
    /more than 200 entries/,
  ],
  ["a truncated layer", () => ({ layers: [{ tar: makeTar([f("a", "x")], { end: false }) }] }), /truncated archive/],
  [
    "a layer that is not its diff id",
    () => ({ layers: [{ tar: makeTar([f("a", "x")]) }], diffIds: [`sha256:${"0".repeat(64)}`] }),
    /hashes to sha256:[0-9a-f]{64}, not to its diff id/,
  ],
  [
    "a sparse entry",
    () => ({ layers: [{ tar: makeTar([{ name: "s", type: "sparse", data: "x" }]) }] }),
    /unsupported tar entry type/,
  ],
  [
    "a foreign layer",
    () => ({
      layers: [{ tar: makeTar([f("a")]), mediaType: "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" }],
    }),
    /foreign \(non-distributable\) layer/,
  ],
  [
    "a layer of another media type",
    () => ({ layers: [{ tar: makeTar([f("a")]), mediaType: "application/vnd.cncf.helm.chart.content.v1.tar+gzip" }] }),
    /unsupported layer media type/,
  ],
  [
    "an artifact config",
    () => ({ layers: [{ tar: makeTar([f("a")]) }], configMediaType: "application/vnd.cncf.helm.config.v1+json" }),
    /is not a container image/,
  ],
  [
    "another platform",
    () => ({ layers: [{ tar: makeTar([f("a")]) }], architecture: "arm64" }),
    /is linux\/arm64, not linux\/amd64/,
  ],
];

/** Layers are unpacked on the calling thread, or (large ones) on a thread of their own: both refuse alike. */
const THREADS = [
  ["", {}],
  [" (unpacked on a thread of its own)", { unpackThreadMinBytes: 0 }],
] as const;

for (const [name, spec, message] of hostile) {
  for (const [where, thread] of THREADS)
    test(`hostile image refused: ${name} — one line, cause first; nothing half-written kept${where}`, async () => {
      const store = newStore();
      await assert.rejects(
        importImage(store, layout(spec()), { budget: { maxBytes: 4 << 20, maxEntries: 200 }, ...thread }),
        (e: Error) => {
          assert.ok(e instanceof ImageInvalidError, `${e.name}: ${e.message}`);
          assert.match(e.message, message);
          assert.doesNotMatch(e.message, /\n/);
          return true;
        },
      );
      await assertUnchanged(store);
    });
}

for (const [where, thread] of THREADS) {
  test(`a compressed bomb stops at the budget while streaming, not after writing it out${where}`, async () => {
    const store = newStore();
    const tar = makeTar([f("zeros", Buffer.alloc(64 << 20))]);
    const spec: ImageSpec = { layers: [{ tar }] };
    assert.ok(gzipSync(tar).length < 1 << 20);
    await assert.rejects(importImage(store, layout(spec), { budget: { maxBytes: 1 << 20 }, ...thread }), /tar bomb/);
    await assertUnchanged(store);
  });
}

test("layers stored once by diff id: a second image moves only its new layer; gc keeps what images need", async () => {
  const store = newStore();
  const shared = makeTar([f("base/os", "the base layer"), f("base/lib", "library")]);
  const a = makeTar([f("app/a", "only in a")]);
  const b = makeTar([f("app/b", "only in b")]);
  const first = await importImage(store, layout({ layers: [{ tar: shared }, { tar: a }] }), { tags: ["t/a:1"] });
  const second = await importImage(store, layout({ layers: [{ tar: shared, compression: "zstd" }, { tar: b }] }), {
    tags: ["t/b:1"],
  });
  assert.deepEqual(
    first.layers.map((l) => l.stored),
    [true, true],
  );
  assert.deepEqual(
    second.layers.map((l) => l.stored),
    [false, true],
    "the shared layer (another compression, same diff id) is neither read nor unpacked",
  );
  const again = await importImage(store, layout({ layers: [{ tar: shared }, { tar: a }] }), { tags: ["t/a:2"] });
  assert.equal(again.cached, true);
  assert.deepEqual(
    (await listImages(store)).map((l) => l.refs),
    [["docker.io/t/b:1"], ["docker.io/t/a:1", "docker.io/t/a:2"]],
  );
  const objects = () => execFileSync("find", [store.objectsDir, "-type", "f"]).toString().trim().split("\n").length;
  const all = objects();
  await removeImage(store, "docker.io/t/a:1");
  await removeImage(store, "docker.io/t/a:2");
  const gc = await gcStore(store);
  assert.equal(gc.removedObjects, 1, "only a's own file goes");
  assert.ok(gc.removedImageFiles > 0, "a's own layer record and documents go");
  assert.equal(objects(), all - 1);
  const dest = join(dir, `mat-${++n}`);
  await materializeLayer(store, second.image.rootfs, dest);
  assert.equal(readFileSync(join(dest, "rootfs/base/os"), "utf8"), "the base layer");
  assert.equal((await verifyStore(store)).ok, true);
  await removeImage(store, second.image.id);
  await gcStore(store);
  assert.deepEqual(objectFiles(store), []);
  assert.deepEqual(readdirSync(imageDirs(store).diffs), []);
});
