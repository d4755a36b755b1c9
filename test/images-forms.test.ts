/**
 * An image's root filesystem in its two forms — its metadata image, mounted by each sandbox's launch (the node
 * cache's form as root), and materialized by hard links (the fallback) — is the same tree inside a sandbox: every
 * path's type, owner, group, mode, size (but a directory's, its filesystem's own), symlink target and content, and
 * what the image's own user may read and write. A hostile layer (setuid and setgid root binaries, a file capability,
 * device nodes, ids past 65535, whiteouts) gets no more in one form than in the other: no setuid or setgid bit, no
 * capability, no device, never host root.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { LayerForm } from "../src/env/cache/index.js";
import { nodeCacheFor } from "../src/env/environments.js";
import { imageRoot } from "../src/env/image-root.js";
import { importImage } from "../src/env/images/index.js";
import { decodeName, openStore, readManifest, verifyStore } from "../src/env/store/index.js";
import { openSandbox } from "../src/env/workspace.js";
import { fixtureImages } from "../src/fixtures/images.js";
import { launchMode } from "../src/sandbox/host.js";
import { parseImageLower } from "../src/sandbox/plan.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { homeLayout } from "../src/util/home.js";
import { tempDir } from "./helpers.js";
import { derivedLayout, makeTar, sha256, type TarEntry } from "./oci.js";

const skip = launchMode() === "root" ? false : "layer images are mounted only as host root";
const dir = tempDir("msb-img-forms-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const instance = set.images.find((i) => i.kind === "instance")!;
const store = openStore(homeLayout(home).store);
const cache = nodeCacheFor(home);
const FORMS: LayerForm[] = ["image", "tree"];

/**
 * Every path of the image's root (this mount only), sorted: type, path, owner and group (numbers and names), mode,
 * size (files and symlinks), link target; files get their inode last (hard-link groups), then every file's sha256.
 */
const LISTING =
  "find / -xdev \\( -type d -printf '%y %p %U:%G %u:%g %m - %l\\n' \\) " +
  "-o \\( -type f -printf '%y %p %U:%G %u:%g %m %s %l ino=%i\\n' \\) -o -printf '%y %p %U:%G %u:%g %m %s %l\\n' " +
  "| LC_ALL=C sort; echo ==; find / -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum";
/** What the image's user (nonroot, uid 1000) may read, write and run, path by path. */
const AS_NONROOT =
  "find / -xdev -readable | LC_ALL=C sort | sha256sum; find / -xdev -writable | LC_ALL=C sort; " +
  "find / -xdev -executable -type f | LC_ALL=C sort | sha256sum; touch /etc/x /home/nonroot/x 2>&1; id";

/** The image's root in `form` as a sandbox's `/`, as a sandbox on the image gets it; `run` as root and as nonroot. */
async function inForm(ref: string, form: LayerForm, run: { root: string; nonroot: string }) {
  const root = await imageRoot(cache, ref, { form });
  try {
    assert.equal(parseImageLower(root.options.rootfs!.path) !== undefined, form === "image");
    await using sb = await Sandbox.create({ home, ...root.options, outputLimitBytes: 256 << 20 });
    assert.equal(sb.security().layerImages, form === "image");
    const asRoot = await sb.exec(["sh", "-c", run.root], { cwd: "/" });
    assert.equal(asRoot.exitCode, 0, asRoot.stderr);
    const asUser = await sb.exec(["sh", "-c", run.nonroot], { cwd: "/", uid: 1000, gid: 1000 });
    return { root: asRoot.stdout, nonroot: `${asUser.stdout}${asUser.stderr}`, hostUid: sb.hostIds.uid };
  } finally {
    await root.release();
  }
}

const withoutInode = (line: string): string => line.replace(/ ino=\d+$/, "");

/** Paths sharing an inode, two or more, each group sorted. */
function linkGroups(listing: string): string[][] {
  const byIno = new Map<string, string[]>();
  for (const line of listing.split("\n")) {
    const m = / ino=(\d+)$/.exec(line);
    if (m) byIno.set(m[1]!, [...(byIno.get(m[1]!) ?? []), line.split(" ")[1]!]);
  }
  return [...byIno.values()].filter((g) => g.length > 1).map((g) => g.sort());
}

/** The manifest's own hard-link groups, as paths inside the sandbox. */
async function manifestGroups(key: string): Promise<string[][]> {
  const groups = new Map<string, string[]>();
  for (const e of (await readManifest(store, key)).trees.rootfs!.entries) {
    if (e.type !== "hardlink") continue;
    const target = `/${decodeName(e.target).toString("latin1")}`;
    groups.set(target, [...(groups.get(target) ?? [target]), `/${decodeName(e.path).toString("latin1")}`]);
  }
  return [...groups.values()].map((g) => g.sort());
}

function assertSameLines(image: string, tree: string, what: string): void {
  const a = image.split("\n").map(withoutInode);
  const b = tree.split("\n").map(withoutInode);
  const differ = a.flatMap((l, i) => (l === b[i] ? [] : [`image: ${l}\ntree:  ${b[i]}`]));
  assert.deepEqual(differ.slice(0, 10), [], `${what}: ${differ.length} lines differ`);
  assert.equal(a.length, b.length, what);
}

test("an image's root in both forms: a sandbox sees the same tree, contents and permissions", { skip }, async () => {
  const { refs, image } = await importImage(store, set.layout, { name: instance.name });
  const seen = new Map<LayerForm, Awaited<ReturnType<typeof inForm>>>();
  for (const form of FORMS) seen.set(form, await inForm(refs[0]!, form, { root: LISTING, nonroot: AS_NONROOT }));
  const [img, tree] = [seen.get("image")!, seen.get("tree")!];
  const lines = img.root.split("\n");
  assert.ok(lines.length > 2 * 14_000, `a whole Debian root with a venv and a testbed (${lines.length} lines)`);
  const shadow = /^f \/etc\/shadow 0:42 root:shadow 640 \d+ {2}ino=\d+$/m;
  assert.match(img.root, shadow, "root's and the shadow group's, readable by its owner alone (its object too)");
  assert.ok(lines.some((l) => l.startsWith("d /home/nonroot 1000:1000 nonroot:nonroot 700 ")));
  assert.ok(
    lines.some((l) => l.startsWith("d /tmp ")),
    "the mount point of the sandbox's own /tmp",
  );
  assertSameLines(img.root, tree.root, "listing and contents");
  assertSameLines(img.nonroot, tree.nonroot, "what nonroot may read, write and run");
  assert.match(img.nonroot, /touch: cannot touch '\/etc\/x': Permission denied/);
  assert.match(img.nonroot, /^uid=1000\(nonroot\) gid=1000\(nonroot\)/m);
  // The image has exactly the layer's own hard links; materialized, files of equal content share an inode too.
  const own = (await manifestGroups(image.rootfs)).sort();
  assert.deepEqual(linkGroups(img.root).sort(), own);
  const treeIno = new Map(tree.root.split("\n").map((l) => [l.split(" ")[1], / ino=(\d+)$/.exec(l)?.[1]]));
  for (const g of own) assert.equal(new Set(g.map((p) => treeIno.get(p))).size, 1, g.join(", "));
  assert.ok(img.hostUid > 65_535 && tree.hostUid > 65_535, "root inside is an unprivileged host id in both");
  // Through the one door, as root: a root whose tree the node has is leased as that tree (the cheaper sandbox);
  // else it is mounted from its image (the cheaper cold start).
  {
    await using placed = await openSandbox({ home, image: refs[0]!, history: "full" });
    assert.equal(placed.security().layerImages, false, "the tree the node has");
  }
  await cache.evict({ maxBytes: 0 });
  await using sb = await openSandbox({ home, image: refs[0]!, history: "full" });
  assert.equal(sb.security().layerImages, true, "its image, the tree evicted");
  assert.equal((await sb.exec(["stat", "-c", "%U:%G:%a", "/home/nonroot"])).stdout, "nonroot:nonroot:700\n");
});

/** The instance image with `tars` as more layers on top (uncompressed), in a layout of its own. */
function withLayers(tars: Buffer[]): string {
  return derivedLayout(set.layout, instance.name, join(dir, "hostile-layout"), ({ manifest, config }, put) => {
    for (const tar of tars) {
      manifest.layers.push({ mediaType: "application/vnd.oci.image.layer.v1.tar", ...put(tar) });
      config.rootfs.diff_ids.push(sha256(tar));
      config.history?.push({ created_by: "a hostile layer" });
    }
  });
}

/** A v2 file capability granting every capability, effective at exec. */
const ALL_CAPS = Buffer.alloc(20);
ALL_CAPS.writeUInt32LE(0x0200_0001, 0);
ALL_CAPS.writeUInt32LE(0xffff_ffff, 4);
ALL_CAPS.writeUInt32LE(0x0000_01ff, 12);

function hostileLayers(): Buffer[] {
  const bin = (name: string, from: string, extra: Partial<TarEntry>): TarEntry => ({
    name: `usr/local/bin/${name}`,
    data: readFileSync(from), // Debian 12's own, as the image's: it runs there
    ...extra,
  });
  const lower = makeTar([
    { name: "opt/hostile/gone", data: "gone" },
    { name: "opt/hostile/opaque/old", data: "old" },
  ]);
  const upper = makeTar([
    { name: "opt/hostile/.wh.gone" },
    { name: "opt/hostile/opaque/.wh..wh..opq" },
    { name: "opt/hostile/opaque/new", data: "new" },
    { name: "etc/.wh.issue" },
    bin("suid-id", "/usr/bin/id", { mode: 0o4755 }),
    bin("sgid-id", "/usr/bin/id", { mode: 0o2755 }),
    bin("cap-cat", "/usr/bin/cat", { mode: 0o755, xattrs: { "security.capability": ALL_CAPS } }),
    { name: "usr/local/bin/suid-dir", type: "dir", mode: 0o4755 },
    { name: "srv/group", type: "dir", mode: 0o2775, gid: 50 },
    { name: "srv/sticky", type: "dir", mode: 0o1777 },
    { name: "srv/owned", data: "owned", mode: 0o640, uid: 1001, gid: 1002 },
    { name: "srv/far", data: "far", uid: 200_000, gid: 300_000 },
    { name: "srv/link", type: "symlink", linkname: "/etc/shadow", uid: 1000, gid: 1000 },
    { name: "srv/hard1", data: "hard" },
    { name: "srv/hard2", type: "hardlink", linkname: "srv/hard1" },
    { name: "srv/mem", type: "char", mode: 0o666 },
    { name: "srv/disk", type: "block", mode: 0o666 },
    { name: "srv/fifo", type: "fifo" },
  ]);
  return [lower, upper];
}

const HOSTILE_ROOT =
  "cd /usr/local/bin; stat -c '%n %a %u %g' suid-id sgid-id cap-cat suid-dir /srv/* 2>&1; " +
  "ls -A /opt/hostile /opt/hostile/opaque; test -e /etc/issue || echo no issue; readlink /srv/link; " +
  "python3 -c 'import os; print(os.listxattr(\"cap-cat\"))'; test /srv/hard1 -ef /srv/hard2 && echo one file; " +
  "head -1 /proc/self/uid_map; " +
  "cp suid-id /tmp/planted && chmod 4755 /tmp/planted suid-id && stat -c '%n %a' /tmp/planted suid-id";
const HOSTILE_USER =
  "cd /usr/local/bin; ./suid-id -u; ./sgid-id -g; /tmp/planted -u; " +
  "./cap-cat /proc/self/status | grep -v CapBnd | grep ^Cap; " +
  "cat /srv/owned 2>&1; cat /srv/link 2>&1; echo x > /srv/sticky/mine && echo sticky ok";

test("a hostile layer in both forms: no setuid or setgid bit, no capability, no device, never host root", {
  skip,
}, async () => {
  const { refs } = await importImage(store, withLayers(hostileLayers()), { tags: ["msb-test/hostile-forms:1"] });
  const outputs: string[] = [];
  for (const form of FORMS) {
    const r = await inForm(refs[0]!, form, { root: HOSTILE_ROOT, nonroot: HOSTILE_USER });
    const [mapped] = /^\s*0\s+(\d+)\s+65536$/m.exec(r.root)?.slice(1) ?? [];
    assert.equal(Number(mapped), r.hostUid, `${form}: root inside is the sandbox's own host id\n${r.root}`);
    outputs.push(`${r.root.replace(/^\s*0\s+\d+\s+65536$/m, "")}${r.nonroot}`);
  }
  assert.equal(outputs[0], outputs[1], "both forms give the very same answers");
  const expected = [
    "suid-id 755 0 0",
    "sgid-id 755 0 0",
    "cap-cat 755 0 0",
    "suid-dir 755 0 0",
    "/srv/far 644 65534 65534",
    "/srv/group 2775 0 50",
    "/srv/hard1 644 0 0",
    "/srv/hard2 644 0 0",
    "/srv/link 777 1000 1000",
    "/srv/owned 640 1001 1002",
    "/srv/sticky 1777 0 0",
  ];
  const out = outputs[0]!;
  assert.deepEqual(out.split("\n").slice(0, expected.length), expected, out);
  assert.doesNotMatch(out, /\/srv\/(mem|disk|fifo)/, "device nodes and FIFOs are never made");
  assert.match(
    out,
    /^\/opt\/hostile:\nopaque\n\n\/opt\/hostile\/opaque:\nnew\nno issue\n\/etc\/shadow\n\[\]\none file\n/m,
  );
  assert.match(out, /^\/tmp\/planted 4755\nsuid-id 4755\n/m, "root inside may set the bit on its own copies");
  const user = out.slice(out.indexOf("suid-id 4755\n") + "suid-id 4755\n".length).split("\n");
  assert.deepEqual(user.slice(0, 3), ["1000", "1000", "1000"], "setuid and setgid give nothing, planted or not");
  assert.deepEqual(
    user.slice(3, 7).map((l) => l.replace(/\s+/g, " ")),
    ["CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000", "CapAmb: 0000000000000000"],
    "a file capability gives nothing",
  );
  assert.match(out, /cat: \/srv\/owned: Permission denied\ncat: \/srv\/link: Permission denied\nsticky ok\n$/);
  assert.equal((await verifyStore(store)).ok, true, "nothing reached the store");
});
