/**
 * Blobs from a registry into a file that survives a kill: a partial download is kept, re-hashed and continued with
 * `Range`, never trusted. Every byte is counted against the size the manifest gives (a registry sending more is
 * lying, and stopped there) and the whole file must hash to the digest, or it is deleted.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import * as fsp from "node:fs/promises";
import { errCode, ImageInvalidError, RegistryError } from "../../errors.js";
import { sleep } from "../store/fsutil.js";
import { unpackError } from "../store/index.js";
import type { Descriptor } from "./media.js";
import { backoffMs, type RegistryClient } from "./registry-client.js";

export interface DownloadOptions {
  what: string;
  /** Called with each chunk's size as it is written (progress). */
  onBytes?: (n: number) => void;
  /** Restarts after a cut connection (each continues where the file ends; default 5). */
  attempts?: number;
  /** A body that sends nothing for this long is cut and resumed (default 60 s). */
  idleMs?: number;
  onResume?: (fromByte: number) => void;
}

/** Download `desc` into `path` (kept on failure for a later resume, except when the content is wrong). */
export async function downloadBlob(
  client: RegistryClient,
  desc: Descriptor,
  path: string,
  o: DownloadOptions,
): Promise<void> {
  const attempts = o.attempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    const state = await hashPrefix(path, desc.size);
    try {
      if (state.have < desc.size) {
        if (state.have > 0) o.onResume?.(state.have);
        await fetchRest(client, desc, path, state, o);
      }
      if (state.have === desc.size) return await finish(state.hash, desc, path, o.what);
    } catch (e) {
      if (errCode(e) === "ENOSPC" || e instanceof ImageInvalidError) {
        await fsp.rm(path, { force: true });
        throw unpackError(e, o.what);
      }
      throw e;
    }
    if (attempt >= attempts)
      throw new RegistryError(
        `${o.what}: the registry kept cutting the blob short (${state.have} of ${desc.size} bytes)`,
      );
    await sleep(backoffMs(attempt));
  }
}

interface Partial {
  hash: Hash;
  have: number;
}

/** The sha256 state of what the file already holds; a file longer than the blob is discarded. */
async function hashPrefix(path: string, size: number): Promise<Partial> {
  const hash = createHash("sha256");
  const st = await fsp.stat(path).catch(() => undefined);
  if (!st || st.size > size) {
    await fsp.writeFile(path, "", { mode: 0o600 });
    return { hash, have: 0 };
  }
  let have = 0;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    have += chunk.length;
  }
  return { hash, have };
}

async function finish(hash: Hash, desc: Descriptor, path: string, what: string): Promise<void> {
  const got = `sha256:${hash.digest("hex")}`;
  if (got === desc.digest) return;
  await fsp.rm(path, { force: true });
  throw new ImageInvalidError(`${what}: the blob's content hashes to ${got}, not to its digest ${desc.digest}`);
}

/**
 * Append the blob from byte `state.have` on (from 0 if the registry ignores the Range), updating `state`. A cut or
 * stalled body just ends early: what arrived is kept for the next attempt. Throws when the registry lies.
 */
async function fetchRest(
  client: RegistryClient,
  desc: Descriptor,
  path: string,
  state: Partial,
  o: DownloadOptions,
): Promise<void> {
  const idle = new AbortController();
  const resume = state.have > 0;
  const res = await client.get(`blobs/${desc.digest}`, {
    what: o.what,
    ...(resume ? { range: `bytes=${state.have}-` } : {}),
    signal: idle.signal,
  });
  const ranged = resume && res.status === 206 && rangeStart(res) === state.have;
  if (!ranged) Object.assign(state, { hash: createHash("sha256"), have: 0 });
  checkLength(res, desc.size - state.have, o.what);
  const out = await fsp.open(path, ranged ? "a" : "w", 0o600);
  const idleMs = o.idleMs ?? 60_000;
  const timer = setTimeout(() => idle.abort(), idleMs);
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      timer.refresh();
      if (state.have + chunk.length > desc.size)
        throw new ImageInvalidError(`${o.what}: the registry sent more than the ${desc.size} bytes the manifest says`);
      await out.write(chunk);
      state.hash.update(chunk);
      state.have += chunk.length;
      o.onBytes?.(chunk.length);
    }
  } catch (e) {
    if (e instanceof ImageInvalidError || errCode(e) === "ENOSPC") throw e;
  } finally {
    clearTimeout(timer);
    idle.abort();
    await out.close();
  }
}

function rangeStart(res: Response): number | undefined {
  const m = /^bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
  return m ? Number(m[1]) : undefined;
}

function checkLength(res: Response, expected: number, what: string): void {
  const length = res.headers.get("content-length");
  if (length !== null && /^\d+$/.test(length) && Number(length) !== expected) {
    throw new ImageInvalidError(
      `${what}: the registry announces ${length} bytes where the manifest's size leaves ${expected}`,
    );
  }
}
