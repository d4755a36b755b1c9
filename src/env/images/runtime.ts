/**
 * How an image's config runs a sandbox, as Docker reads it: `Env` (the image's PATH, conda or venv variables),
 * `WorkingDir` (default `/`) and `User` (`name`, `uid`, `name:group`, `uid:gid`; default root), names looked up in
 * the image's own /etc/passwd and /etc/group. Those files are read from the store through the root filesystem's
 * manifest — never through a path on the host, where an image's symlink could point anywhere.
 */
import * as fsp from "node:fs/promises";
import { InvalidInputError } from "../../errors.js";
import {
  decodeName,
  objectPath,
  readManifest,
  ROOTFS_TREE,
  type ImageRecord,
  type ManifestEntry,
  type Store,
} from "../store/index.js";

export interface ImageRuntime {
  env: Record<string, string>;
  cwd: string;
  uid: number;
  gid: number;
  /** The user's home in the image (passwd's, else `/`, as Docker sets HOME). */
  home: string;
}

/** Larger account files than this are not read (a real one is a few KiB). */
const MAX_ACCOUNTS_BYTES = 1 << 20;

export async function imageRuntime(store: Store, image: ImageRecord): Promise<ImageRuntime> {
  const env: Record<string, string> = {};
  for (const kv of image.config.Env) {
    const eq = kv.indexOf("=");
    if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  const cwd = image.config.WorkingDir || "/";
  if (!cwd.startsWith("/")) throw new InvalidInputError(`image ${image.id}: WorkingDir ${cwd} is not absolute`);
  const user = await resolveUser(store, image, image.config.User.trim());
  return { env, cwd, ...user };
}

type User = Pick<ImageRuntime, "uid" | "gid" | "home">;

async function resolveUser(store: Store, image: ImageRecord, spec: string): Promise<User> {
  if (spec === "" || spec === "root" || spec === "0") return { uid: 0, gid: 0, home: "/root" };
  const [name, group] = spec.split(":", 2) as [string, string | undefined];
  const files = await accountFiles(store, image);
  const passwd = files.passwd.find((p) => p[0] === name || (isId(name) && p[2] === name));
  const what = `image ${image.id}: User ${JSON.stringify(spec)}`;
  if (!passwd && !isId(name)) throw new InvalidInputError(`${what}: no user ${name} in the image's /etc/passwd`);
  const uid = Number(passwd?.[2] ?? name);
  let gid = Number(passwd?.[3] ?? 0);
  if (group !== undefined) {
    const entry = files.group.find((g) => g[0] === group || (isId(group) && g[2] === group));
    if (!entry && !isId(group)) throw new InvalidInputError(`${what}: no group ${group} in the image's /etc/group`);
    gid = Number(entry?.[2] ?? group);
  }
  if (!(isImageId(uid) && isImageId(gid))) throw new InvalidInputError(`${what}: ids must be 0 to 65535`);
  return { uid, gid, home: passwd?.[5] || "/" };
}

const isId = (s: string): boolean => /^\d{1,10}$/.test(s);
const isImageId = (n: number): boolean => Number.isInteger(n) && n >= 0 && n <= 65_535;

/** The image's /etc/passwd and /etc/group as colon-separated fields (absent or not regular files: none). */
async function accountFiles(store: Store, image: ImageRecord): Promise<{ passwd: string[][]; group: string[][] }> {
  const manifest = await readManifest(store, image.rootfs);
  const entries = manifest.trees[ROOTFS_TREE]?.entries ?? [];
  const read = async (path: string): Promise<string[][]> => {
    const text = await regularFile(store, entries, path);
    return text === undefined ? [] : text.split("\n").map((l) => l.split(":"));
  };
  return { passwd: await read("etc/passwd"), group: await read("etc/group") };
}

async function regularFile(store: Store, entries: ManifestEntry[], path: string): Promise<string | undefined> {
  const at = (p: string): ManifestEntry | undefined => entries.find((e) => decodeName(e.path).toString() === p);
  let e = at(path);
  if (e?.type === "hardlink") e = at(decodeName(e.target).toString());
  if (e?.type !== "file" || e.size > MAX_ACCOUNTS_BYTES) return undefined;
  return fsp.readFile(objectPath(store, e.object), "utf8");
}
