/**
 * `importImage(store, source)`: an image from an archive (`docker save`/`podman save` output, an oci-archive, an
 * OCI layout directory; compressed or not) or from a local podman or Docker by name (`podman:NAME`, `docker:NAME`:
 * the tool saves it to a scratch archive, which is then read like any). skopeo's transport prefixes (`oci:`,
 * `oci-archive:`, `docker-archive:`) are accepted on paths.
 */
import { spawn } from "node:child_process";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { ImageNotFoundError, InvalidInputError } from "../../errors.js";
import { scratchName } from "../store/fsutil.js";
import type { ImagePlatform, Store, UnpackBudget } from "../store/index.js";
import { openArchiveFiles } from "./archive-files.js";
import { archiveImage } from "./archive-image.js";
import { DEFAULT_PLATFORM } from "./platform.js";
import { canonicalReference } from "./reference.js";
import { storeImage, type ImageEvent, type StoreImageResult } from "./store-image.js";

export interface ImportOptions {
  /** Which image of an archive holding several (a name it gives, e.g. `debian:12`). */
  name?: string;
  /** Names to record (default: the names the archive or tool gives; none means by id only). */
  tags?: string[];
  platform?: ImagePlatform;
  budget?: UnpackBudget;
  jobs?: number;
  /** Layers of at least this many stored bytes are unpacked on a thread of their own (default 16 MiB). */
  unpackThreadMinBytes?: number;
  onEvent?: (e: ImageEvent) => void;
}

export interface ImportResult extends StoreImageResult {
  source: string;
}

const TOOLS = { podman: ["image", "save", "--format", "oci-archive", "-o"], docker: ["save", "-o"] } as const;
const PATH_PREFIXES = ["oci-archive:", "docker-archive:", "oci:"];

export async function importImage(store: Store, source: string, opts: ImportOptions = {}): Promise<ImportResult> {
  const tool = (Object.keys(TOOLS) as (keyof typeof TOOLS)[]).find((t) => source.startsWith(`${t}:`));
  if (tool) {
    const name = source.slice(tool.length + 1);
    const file = join(store.tmpDir, scratchName(`${tool}-save`));
    try {
      await saveWith(tool, name, file);
      return await importFile(store, file, source, { ...opts, tags: opts.tags ?? [canonicalReference(name)] });
    } finally {
      await fsp.rm(file, { force: true });
    }
  }
  const prefix = PATH_PREFIXES.find((p) => source.startsWith(p));
  return importFile(store, prefix ? source.slice(prefix.length) : source, source, opts);
}

async function importFile(store: Store, path: string, source: string, opts: ImportOptions): Promise<ImportResult> {
  const files = await openArchiveFiles(path, store.tmpDir);
  try {
    const { input, names } = await archiveImage(files, opts.platform ?? DEFAULT_PLATFORM, opts.name);
    const refs = (opts.tags ?? names).map(canonicalReference);
    const result = await storeImage(
      store,
      { ...input, source },
      {
        platform: opts.platform ?? DEFAULT_PLATFORM,
        refs,
        budget: opts.budget,
        jobs: opts.jobs,
        unpackThreadMinBytes: opts.unpackThreadMinBytes,
        onEvent: opts.onEvent,
      },
    );
    return { ...result, source };
  } finally {
    await files.close();
  }
}

/** `podman image save` / `docker save` of a local image into `file`; a missing tool or image is bad input. */
function saveWith(tool: keyof typeof TOOLS, name: string, file: string): Promise<void> {
  if (!name || name.startsWith("-"))
    throw new InvalidInputError(`${tool}: expected ${tool}:IMAGE, got ${tool}:${name}`);
  return new Promise((resolve, reject) => {
    const child = spawn(tool, [...TOOLS[tool], file, name], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr = (stderr + b.toString()).slice(-2000)));
    child.once("error", (e) =>
      reject(new InvalidInputError(`${tool} is not available on this machine (${(e as Error).message})`)),
    );
    child.once("close", (code) => {
      if (code === 0) return resolve();
      const said = stderr.trim().split("\n").pop() ?? "";
      if (/no such image|not known|not found|does not exist/i.test(said))
        return reject(new ImageNotFoundError(`${tool} has no image ${name} (${said})`));
      reject(new InvalidInputError(`${tool} could not save ${name} (exit ${code}): ${said}`));
    });
  });
}
