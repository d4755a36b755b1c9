/**
 * Packs: tar + zstd of some layers' manifests and the objects they reference (one copy each), to move layers
 * between stores and machines. Import validates everything in a scratch dir before the store sees any of it.
 */
import { spawn } from "node:child_process";
import * as fsp from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { errMessage, InvalidInputError, NotFoundError, StoreCorruptError, TarFormatError } from "../../errors.js";
import { runOk } from "../../util/run.js";
import type { LayerKey } from "../types.js";
import { NORMALIZED_MTIME_SEC, removeTree, scratchName, syncFilesystem } from "./fsutil.js";
import { isLayerKey, objectHash, OBJECT_FILE_RE, type ObjectId, type Store } from "./layout.js";
import { lockFile } from "./lock.js";
import {
  assertCanWrite,
  parseManifest,
  readManifest,
  referencedObjects,
  writeManifest,
  type LayerManifest,
} from "./manifest.js";
import { hasObject, placeObject, writeHashed } from "./objects.js";
import { readTar, type TarHeader } from "../../util/tar.js";

const PACK_HEADER = "msb-pack.json";
const PACK_FORMAT = "minisandbox-pack";
const MAX_MANIFEST_BYTES = 256 << 20;

/** What a pack may unpack to, checked against each entry's declared size before a byte of it is written. */
export interface ImportLimits {
  /** Unpacked bytes at most (default: no limit but the disk). */
  maxUnpackedBytes?: number;
  /** Unpacked bytes per byte of pack, above `ratioFloorBytes` (default 200; real layers compress 2-10x). */
  maxRatio?: number;
  ratioFloorBytes?: number;
}

/** Disk space an import must leave free in the store's filesystem. */
const IMPORT_RESERVE_BYTES = 512 << 20;

/** The smallest of: the explicit cap, the expansion limit, the free disk minus a reserve; and what it is. */
async function unpackBudget(store: Store, packBytes: number, l: ImportLimits): Promise<{ bytes: number; why: string }> {
  const ratio = l.maxRatio ?? 200;
  const options = [
    {
      bytes: Math.max(l.ratioFloorBytes ?? 256 << 20, ratio * packBytes),
      why: `${ratio} times its ${packBytes} bytes`,
    },
  ];
  if (l.maxUnpackedBytes !== undefined) options.push({ bytes: l.maxUnpackedBytes, why: `${l.maxUnpackedBytes} bytes` });
  const fs = await fsp.statfs(store.tmpDir);
  const free = fs.bavail * fs.bsize - IMPORT_RESERVE_BYTES;
  options.push({ bytes: Math.max(0, free), why: `the ${Math.max(0, free)} bytes free in the store's filesystem` });
  return options.reduce((a, b) => (b.bytes < a.bytes ? b : a));
}

export interface ExportResult {
  file: string;
  layers: LayerKey[];
  objects: number;
  /** Uncompressed bytes of the objects in the pack. */
  objectBytes: number;
  /** Size of the pack file. */
  packBytes: number;
}

export interface ImportResult {
  layers: LayerKey[];
  objectsAdded: number;
  /** Objects in the pack the store already had. */
  objectsPresent: number;
  bytesAdded: number;
}

/** Write layers `keys` (manifests + referenced objects) to `file` as tar+zstd; `file` appears atomically. */
export async function exportPack(store: Store, keys: readonly LayerKey[], file: string): Promise<ExportResult> {
  const layers = [...new Set(keys)].sort();
  if (layers.length === 0) throw new InvalidInputError("export needs at least one layer key");
  const out = resolve(file);
  if (!(await fsp.stat(dirname(out)).catch(() => undefined))?.isDirectory()) {
    throw new InvalidInputError(`cannot write pack ${file}: directory ${dirname(out)} does not exist`);
  }
  const lock = await lockFile(store.lockPath, { shared: true });
  const staging = join(store.tmpDir, scratchName("export"));
  const partial = join(dirname(out), `.${scratchName("pack")}.partial`);
  try {
    const objects = new Map<ObjectId, number>();
    for (const key of layers) {
      for (const [id, size] of referencedObjects(await readManifest(store, key))) {
        if (!(await hasObject(store, id, size))) {
          throw new StoreCorruptError(
            `layer ${key} needs object ${id}, which is missing or truncated in store ${store.root}; ` +
              "run 'minisandbox store verify'",
          );
        }
        objects.set(id, size);
      }
    }
    await fsp.mkdir(staging);
    await fsp.writeFile(join(staging, PACK_HEADER), `${JSON.stringify({ format: PACK_FORMAT, version: 1, layers })}\n`);
    const members = [
      ...[...objects.keys()].sort().map((id) => `objects/${id.slice(0, 2)}/${id.slice(2)}`),
      ...layers.map((k) => `manifests/${k}.json`),
    ];
    const list = join(staging, "members");
    await fsp.writeFile(list, members.map((m) => `${m}\0`).join(""));
    // Header first, manifests last; --hard-dereference so the pack never holds link entries (import rejects them).
    await runOk("tar", [
      "-c",
      "-f",
      partial,
      "-I",
      "zstd -T0 -q",
      "--format=gnu",
      "--hard-dereference",
      "--owner=0",
      "--group=0",
      "--numeric-owner",
      `--mtime=@${NORMALIZED_MTIME_SEC}`,
      "-C",
      staging,
      PACK_HEADER,
      "-C",
      store.root,
      "--null",
      "-T",
      list,
    ]);
    await fsp.rename(partial, out);
    return {
      file: out,
      layers,
      objects: objects.size,
      objectBytes: [...objects.values()].reduce((a, b) => a + b, 0),
      packBytes: (await fsp.stat(out)).size,
    };
  } finally {
    await fsp.rm(partial, { force: true });
    await removeTree(staging);
    await lock.release();
  }
}

interface Extracted {
  header?: string;
  manifests: Map<LayerKey, string>;
  /** Verified objects written to the scratch dir, with sizes. */
  objects: Map<ObjectId, number>;
}

/**
 * Import a pack. Every entry is checked (regular files under expected names only, object hashes, manifests
 * valid and complete) before anything moves into the store; on any problem the store is left exactly as it was.
 * A layer the store already has with different content is refused unless `replace`.
 */
export async function importPack(
  store: Store,
  file: string,
  opts: { replace?: boolean; limits?: ImportLimits } = {},
): Promise<ImportResult> {
  let packBytes: number;
  try {
    packBytes = (await fsp.stat(file)).size;
  } catch {
    throw new NotFoundError(`pack ${file} not found`);
  }
  const lock = await lockFile(store.lockPath, { shared: true });
  const staging = join(store.tmpDir, scratchName("import"));
  try {
    await fsp.mkdir(staging);
    let manifests: LayerManifest[];
    let extracted: Extracted;
    try {
      extracted = await extractPack(file, staging, await unpackBudget(store, packBytes, opts.limits ?? {}));
      manifests = await checkPack(store, extracted);
      for (const m of manifests) await assertCanWrite(store, m, opts.replace ?? false);
    } catch (e) {
      if (e instanceof InvalidInputError) throw new InvalidInputError(`invalid pack ${file}: ${e.message}`);
      throw e;
    }
    const result: ImportResult = {
      layers: manifests.map((m) => m.key),
      objectsAdded: 0,
      objectsPresent: 0,
      bytesAdded: 0,
    };
    for (const [id, size] of extracted.objects) {
      if (await hasObject(store, id, size)) {
        result.objectsPresent++;
        continue;
      }
      placeObject(store, join(staging, id), id);
      result.objectsAdded++;
      result.bytesAdded += size;
    }
    await syncFilesystem(store.objectsDir);
    for (const m of manifests) await writeManifest(store, m);
    return result;
  } finally {
    await removeTree(staging);
    await lock.release();
  }
}

/**
 * Stream-decompress and read the tar, writing only verified objects (flat, named by id) into `staging`. Each entry's
 * declared size counts against `budget` before any of it is written (a tar entry's body is exactly its size).
 */
async function extractPack(file: string, staging: string, budget: { bytes: number; why: string }): Promise<Extracted> {
  const zstd = spawn("zstd", ["-dcq", "--", file], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  zstd.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<number | null>((r) => {
    zstd.once("close", (code) => r(code));
    zstd.once("error", () => r(-1));
  });
  const zstdProblem = (): string =>
    `corrupt or truncated compressed data (${stderr.trim().split("\n").pop() || "zstd failed"})`;
  const raw = zstd.stdout[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let ended = false;
  const it: AsyncIterator<Buffer> = {
    next: async () => {
      const r = await raw.next();
      if (r.done) ended = true;
      return r;
    },
  };
  const out: Extracted = { manifests: new Map(), objects: new Map() };
  const seen = new Set<string>();
  let declared = 0;
  try {
    await readTar({ [Symbol.asyncIterator]: () => it }, async (h, body) => {
      const name = entryName(h);
      if (seen.has(name)) throw new InvalidInputError(`duplicate entry ${JSON.stringify(name)}`);
      seen.add(name);
      declared += h.kind === "file" ? h.size : 0;
      if (declared > budget.bytes)
        throw new TarFormatError(`it unpacks to more than ${budget.why} (stopped before writing ${name})`);
      await readEntry(name, h, body, staging, out);
    });
    while (!(await it.next()).done); // the rest is tar padding; zstd must still end cleanly
  } catch (e) {
    // Stop zstd only if we gave up mid-stream; if its output ended early, let it exit and report why.
    if (!ended) {
      zstd.kill();
      zstd.stdout.destroy(); // unread output would otherwise hold back the 'close' event
    }
    const code = await exited;
    if (code !== null && code !== 0) throw new InvalidInputError(zstdProblem());
    throw e;
  }
  if ((await exited) !== 0) throw new InvalidInputError(zstdProblem());
  return out;
}

/** The entry's name with "./" prefixes removed, after rejecting anything that could point outside. */
function entryName(h: TarHeader): string {
  const raw = h.name.toString("latin1");
  const shown = JSON.stringify(raw);
  if (raw.startsWith("/")) throw new InvalidInputError(`entry ${shown} has an absolute path`);
  if (raw.split("/").includes("..")) throw new InvalidInputError(`entry ${shown} escapes the store ('..')`);
  if (h.kind !== "file" && h.kind !== "dir")
    throw new InvalidInputError(`entry ${shown} is a ${h.kind}; packs hold only files and directories`);
  let name = raw;
  while (name.startsWith("./")) name = name.slice(2);
  return name.replace(/\/+$/, "");
}

const OBJECT_ENTRY = new RegExp(`^objects/([0-9a-f]{2})/(${OBJECT_FILE_RE.source.slice(1, -1)})$`);
const MANIFEST_ENTRY = /^manifests\/(.+)\.json$/;

async function readEntry(
  name: string,
  h: TarHeader,
  body: AsyncIterable<Buffer>,
  staging: string,
  out: Extracted,
): Promise<void> {
  if (h.kind === "dir") {
    if (
      name === "" ||
      name === "." ||
      name === "objects" ||
      name === "manifests" ||
      /^objects\/[0-9a-f]{2}$/.test(name)
    )
      return;
    throw new InvalidInputError(`unexpected directory ${JSON.stringify(name)}`);
  }
  const obj = OBJECT_ENTRY.exec(name);
  if (obj) {
    const id = obj[1]! + obj[2]!;
    out.objects.set(id, await writeVerified(id, body, join(staging, id)));
    return;
  }
  const man = MANIFEST_ENTRY.exec(name);
  if (man && isLayerKey(man[1]!)) {
    if (h.size > MAX_MANIFEST_BYTES) throw new InvalidInputError(`manifest ${name} is too large`);
    out.manifests.set(man[1]!, (await collect(body)).toString("utf8"));
    return;
  }
  if (name === PACK_HEADER && h.size <= 1 << 20) {
    out.header = (await collect(body)).toString("utf8");
    return;
  }
  throw new InvalidInputError(`unexpected entry ${JSON.stringify(name)}`);
}

async function writeVerified(id: ObjectId, body: AsyncIterable<Buffer>, path: string): Promise<number> {
  const { hex, size } = await writeHashed(body, path);
  if (objectHash(id) !== hex) throw new InvalidInputError(`object ${id}: content does not match its hash`);
  return size;
}

async function collect(body: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(chunk);
  return Buffer.concat(parts);
}

/** Header, manifests and references: every object a manifest names is in the pack or already in the store. */
async function checkPack(store: Store, x: Extracted): Promise<LayerManifest[]> {
  if (x.header === undefined) throw new InvalidInputError(`not a minisandbox pack (no ${PACK_HEADER})`);
  let header: unknown;
  try {
    header = JSON.parse(x.header);
  } catch (e) {
    throw new InvalidInputError(`${PACK_HEADER}: ${errMessage(e)}`);
  }
  const h = header as { format?: unknown; version?: unknown; layers?: unknown };
  if (h.format !== PACK_FORMAT || h.version !== 1 || !Array.isArray(h.layers))
    throw new InvalidInputError(`${PACK_HEADER}: unsupported pack format`);
  const listed = [...h.layers].map(String).sort();
  const present = [...x.manifests.keys()].sort();
  if (listed.join("\n") !== present.join("\n")) {
    throw new InvalidInputError(`pack lists layers [${listed.join(", ")}] but holds manifests [${present.join(", ")}]`);
  }
  const manifests: LayerManifest[] = [];
  for (const key of present) {
    const m = parseManifest(x.manifests.get(key)!, key);
    for (const [id, size] of referencedObjects(m)) {
      const staged = x.objects.get(id);
      if (staged === undefined ? !(await hasObject(store, id, size)) : staged !== size) {
        throw new InvalidInputError(
          `layer ${key} references object ${id}, which is neither in the pack nor in the store`,
        );
      }
    }
    manifests.push(m);
  }
  return manifests;
}
