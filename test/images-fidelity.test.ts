/**
 * SWE-bench-style images (a Debian root from debootstrap, then base -> env -> instance layers built by podman from
 * Containerfiles, and a C project's image), pushed with skopeo to a real registry and pulled into the store: the
 * materialized root filesystem equals what umoci unpacks from the same image, path by path (type, mode, owner,
 * content, symlink target, hard-link groups), with the documented exceptions: setuid/setgid bits, device nodes,
 * xattrs, and mtimes (except Python sources'). The same images from podman's own storage and a podman archive are
 * the same images.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { lstatSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { importImage, pullImage } from "../src/env/images/index.js";
import {
  canChown,
  decodeName,
  materializeLayer,
  openStore,
  readManifest,
  storeIds,
  storeStats,
} from "../src/env/store/index.js";
import { fixtureImages, fixturePodmanEnv, type FixtureImage } from "../src/fixtures/images.js";
import { TestRegistry } from "./oci.js";
import { tempDir } from "./helpers.js";

const dir = tempDir("msb-img-fid-");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const byKind = (kind: FixtureImage["kind"]): FixtureImage[] => set.images.filter((i) => i.kind === kind);
const [first, second] = byKind("instance");
const cImage = byKind("c-instance")[0]!;
const registry = await TestRegistry.start(join(dir, "registry"));
for (const image of [first!, second!, cImage]) {
  execFileSync("skopeo", [
    "copy",
    "--quiet",
    "--dest-tls-verify=false",
    `oci:${set.layout}:${image.name}`,
    `docker://${registry.host}/${image.name}`,
  ]);
}
const store = openStore(join(dir, "store"));

interface PathInfo {
  type: string;
  mode: number;
  owner: string;
  hash?: string;
  target?: string;
  ino: number;
  mtime?: number;
}

/** Every path under `root` (owners relative to `idBase`), with the exceptions the store documents left out. */
function walk(root: string, idBase: number): Map<string, PathInfo> {
  const out = new Map<string, PathInfo>();
  const visit = (rel: string): void => {
    for (const name of readdirSync(join(root, rel))) {
      const path = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, path));
      const type = st.isDirectory() ? "dir" : st.isSymbolicLink() ? "symlink" : st.isFile() ? "file" : "special";
      if (type === "special") continue; // device nodes and FIFOs are never created: documented exception
      const info: PathInfo = {
        type,
        // setuid and setgid never reach a host inode (documented); a directory's setgid and sticky bits do.
        mode: st.mode & (type === "file" ? 0o1777 : 0o7777),
        owner: `${st.uid - idBase}:${st.gid - idBase}`,
        ino: st.ino,
      };
      if (type === "file")
        info.hash = createHash("sha256")
          .update(readFileSync(join(root, path)))
          .digest("hex");
      if (type === "file" && name.endsWith(".py")) info.mtime = Math.floor(st.mtimeMs / 1000);
      if (type === "symlink") info.target = readlinkSync(join(root, path));
      out.set(path, info);
      if (type === "dir") visit(path);
    }
  };
  visit("");
  return out;
}

/** Hard-link groups (paths sharing an inode, two or more) of a walked tree. */
function linkGroups(tree: Map<string, PathInfo>): string[][] {
  const byIno = new Map<number, string[]>();
  for (const [path, info] of tree)
    if (info.type === "file") byIno.set(info.ino, [...(byIno.get(info.ino) ?? []), path]);
  return [...byIno.values()].filter((g) => g.length > 1).map((g) => g.sort());
}

async function compareWithUmoci(image: FixtureImage, rootfsKey: string): Promise<{ paths: number; specials: number }> {
  const bundle = join(dir, `umoci-${image.kind}`);
  execFileSync("umoci", ["unpack", "--image", `${set.layout}:${image.name}`, bundle], { stdio: "ignore" });
  const ours = join(dir, `ours-${image.kind}`);
  await materializeLayer(store, rootfsKey, ours);
  const theirs = walk(join(bundle, "rootfs"), 0);
  const mine = walk(join(ours, "rootfs"), canChown() ? storeIds(store).base : 0);
  const differences: string[] = [];
  for (const path of new Set([...theirs.keys(), ...mine.keys()])) {
    const a = theirs.get(path);
    const b = mine.get(path);
    const same = a && b && a.type === b.type && a.mode === b.mode && a.hash === b.hash && a.target === b.target;
    const owners = !canChown() || a?.owner === b?.owner;
    if (!same || !owners || a.mtime !== b.mtime)
      differences.push(`${path}: umoci ${JSON.stringify({ ...a, ino: 0 })} ours ${JSON.stringify({ ...b, ino: 0 })}`);
  }
  assert.deepEqual(differences.slice(0, 20), [], `${differences.length} paths differ`);
  // Their hard-link groups are exactly the manifest's; on disk ours share inodes at least as much (dedup).
  const manifest = await readManifest(store, rootfsKey);
  const groups = new Map<string, string[]>();
  for (const e of manifest.trees.rootfs!.entries) {
    if (e.type !== "hardlink") continue;
    const target = decodeName(e.target).toString();
    groups.set(target, [...(groups.get(target) ?? [target]), decodeName(e.path).toString()]);
  }
  const theirGroups = linkGroups(theirs);
  assert.deepEqual([...groups.values()].map((g) => g.sort()).sort(), theirGroups.sort());
  for (const g of theirGroups) assert.equal(new Set(g.map((p) => mine.get(p)!.ino)).size, 1, g.join(", "));
  const specials = execFileSync("find", [join(bundle, "rootfs"), "-type", "c", "-o", "-type", "b", "-o", "-type", "p"]);
  return { paths: theirs.size, specials: specials.toString().trim().split("\n").filter(Boolean).length };
}

test("SWE-bench-style images: the second instance image moves only its instance layer", async () => {
  const pulled = await pullImage(store, `${registry.host}/${first!.name}`);
  assert.deepEqual(
    pulled.layers.map((l) => l.stored),
    [true, true, true, true],
  );
  const before = await storeStats(store);
  const next = await pullImage(store, `${registry.host}/${second!.name}`);
  assert.deepEqual(
    next.layers.map((l) => l.stored),
    [false, false, false, true],
    "debian, base and env layers are already in the store",
  );
  const after = await storeStats(store);
  assert.ok(after.storedBytes - before.storedBytes < next.image.sizes.rootfsBytes / 20, "most of its files are shared");
  assert.equal(next.image.config.WorkingDir, "/testbed");
  assert.ok(next.image.config.Env.some((e) => e.startsWith("PATH=/opt/venv/bin:")));
});

test("fidelity: an instance image's root filesystem is what umoci unpacks, path by path", async () => {
  const r = await pullImage(store, `${registry.host}/${first!.name}`);
  const { paths, specials } = await compareWithUmoci(first!, r.image.rootfs);
  assert.ok(paths > 5000, `a whole Debian root (${paths} paths)`);
  assert.ok(specials > 0, "the image has device nodes (the documented exception)");
  const venv = walk(join(dir, "ours-instance", "rootfs", "opt/venv"), 0);
  assert.ok(
    [...venv.keys()].some((p) => p.endsWith(".pyc")),
    "pytest compiled in the image",
  );
  const home = lstatSync(join(dir, "ours-instance", "rootfs", "home/nonroot"));
  if (canChown()) assert.equal(home.uid - storeIds(store).base, 1000, "nonroot's home stays nonroot's");
});

test("fidelity: the C project's image (gzip layers, tcc and make) too", async () => {
  const r = await pullImage(store, `${registry.host}/${cImage.name}`);
  assert.deepEqual(r.image.config.Cmd, ["make", "CC=tcc", "check"]);
  await compareWithUmoci(cImage, r.image.rootfs);
  const tests = join(dir, "ours-c-instance", "rootfs", "testbed", "test_gcd");
  assert.equal(lstatSync(tests).mode & 0o111, 0o111, "the built test program is executable");
});

test("the same image from podman's storage (podman:NAME) and from a podman archive is the same image", async () => {
  const pulled = await pullImage(store, `${registry.host}/${second!.name}`);
  const env = fixturePodmanEnv();
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    // podman's storage under this name is the set's own image (a set built with other options, e.g. a generated
    // history, shares the names).
    const podman = (args: string[]) => execFileSync("podman", args, { env: { ...saved, ...env }, encoding: "utf8" });
    const id = podman(["pull", "--quiet", `oci:${set.layout}:${second!.name}`]).trim();
    podman(["tag", id, `localhost/${second!.name}`]);
    const fromPodman = await importImage(openStore(join(dir, "store-podman")), `podman:localhost/${second!.name}`);
    assert.equal(fromPodman.image.rootfs, pulled.image.rootfs);
    assert.deepEqual(fromPodman.refs, [`localhost/${second!.name}`]);
    const archive = join(dir, "docker-archive.tar");
    execFileSync(
      "podman",
      ["save", "--quiet", "--format", "docker-archive", "-o", archive, `localhost/${second!.name}`],
      {
        env: { ...saved, ...env },
      },
    );
    const fromArchive = await importImage(openStore(join(dir, "store-archive")), archive);
    assert.equal(fromArchive.image.rootfs, pulled.image.rootfs, "same diff ids, same root filesystem");
    assert.deepEqual(fromArchive.image.config, pulled.image.config);
  } finally {
    process.env = saved;
  }
});
