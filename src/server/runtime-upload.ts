/**
 * SWE-ReX `/upload` (multipart `file`, `target_path`, `unzip`). Bounded: a per-server budget of concurrent uploads,
 * the upload streamed to the server's scratch dir under a size cap and a deadline, archives validated in full
 * (names, links, entry count, unpacked size, expansion ratio, free disk) before anything is extracted, and the result
 * streamed into the sandbox. The scratch dir of an upload is removed however it ends (client gone included).
 */
import { createWriteStream, mkdirSync } from "node:fs";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { MultipartFile, MultipartValue } from "@fastify/multipart";
import { LimitError, UploadTooLargeError } from "../errors.js";
import { swerex, type ValidationDetail, WireValidationError } from "../wire/index.js";
import { fileError, RUNTIME } from "./runtime-common.js";
import { onEntry, type EntryResolver, type RouteContext } from "./route-context.js";
import type { Entry } from "./registry.js";
import { streamFileIn } from "./stream-in.js";
import { extractZipChecked } from "./upload.js";

interface Received {
  file?: string;
  target_path?: string;
  unzip?: string;
}

/** Stream the form's parts: the file to `dir/upload`, the fields kept (small). */
async function receive(req: FastifyRequest, dir: string, maxBytes: number): Promise<Received> {
  const got: Received = {};
  const parts = req.parts({ limits: { fileSize: maxBytes, files: 1, fields: 8, fieldSize: 64 * 1024 } });
  for await (const part of parts) {
    if (part.type === "file") {
      const f = part as MultipartFile;
      if (f.fieldname !== "file" || got.file) {
        f.file.resume();
        continue;
      }
      const path = join(dir, "upload");
      await pipeline(f.file, createWriteStream(path, { flags: "wx", mode: 0o600 }));
      if (f.file.truncated)
        throw new UploadTooLargeError(`upload larger than this server's limit of ${maxBytes} bytes`);
      got.file = path;
    } else {
      const v = part as MultipartValue<string>;
      if (v.fieldname === "target_path") got.target_path = String(v.value);
      else if (v.fieldname === "unzip") got.unzip = String(v.value);
    }
  }
  return got;
}

async function upload(ctx: RouteContext, e: Entry, req: FastifyRequest): Promise<Record<string, never>> {
  if (!req.isMultipart()) throw formError({}, false);
  const { maxUploadBytes, uploadTimeoutMs } = ctx.limits;
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > maxUploadBytes + 64 * 1024)
    throw new UploadTooLargeError(`upload larger than this server's limit of ${maxUploadBytes} bytes`);
  const release = await ctx.uploads.acquire(15_000);
  if (!release)
    throw new LimitError(
      `${ctx.uploads.capacity} uploads are in progress on this server (none came free within 15 s); retry`,
      {
        retryAfterMs: 1000,
      },
    );
  const tmp = ctx.scratch.make();
  // A client that sends too slowly loses the connection: the upload slot is not held forever.
  const deadline = setTimeout(() => req.raw.destroy(new Error("upload deadline passed")), uploadTimeoutMs);
  try {
    ctx.scratch.ensureFree(Math.min(declared || maxUploadBytes, maxUploadBytes), "this upload");
    const got = await receive(req, tmp.dir, maxUploadBytes);
    clearTimeout(deadline);
    const form = uploadForm(got);
    await place(ctx, e, tmp.dir, got.file!, form);
    return {};
  } finally {
    clearTimeout(deadline);
    tmp.dispose();
    release();
  }
}

/** The form's fields as FastAPI validates `File` / `Form` parameters: every missing one named. */
function formError(fields: Received, hasFile: boolean): WireValidationError {
  const errors: ValidationDetail[] = [];
  if (!hasFile) errors.push({ type: "missing", loc: ["body", "file"], msg: "Field required", input: null });
  try {
    swerex.UploadForm.parse({ target_path: fields.target_path, unzip: fields.unzip });
  } catch (e) {
    if (!(e instanceof WireValidationError)) throw e;
    errors.push(...e.detail.map((d) => (d.type === "missing" ? { ...d, input: null } : d)));
  }
  return new WireValidationError(errors);
}

function uploadForm(got: Received): { target_path: string; unzip: boolean } {
  const err = formError(got, got.file !== undefined);
  if (err.detail.length) throw err;
  return swerex.UploadForm.parse({ target_path: got.target_path, unzip: got.unzip });
}

/** Extract (archives) or rename (single files) in the scratch dir, then stream into the sandbox. */
async function place(
  ctx: RouteContext,
  e: Entry,
  dir: string,
  file: string,
  form: { target_path: string; unzip: boolean },
) {
  const target = form.target_path;
  try {
    if (form.unzip) {
      const source = join(dir, "extracted");
      mkdirSync(source);
      await extractZipChecked(file, source, ctx.limits.zipLimits, (bytes) =>
        ctx.scratch.ensureFree(bytes, "unpacking this archive"),
      );
      await e.sandbox.files.upload(source, target);
      return;
    }
    await streamFileIn(e.sandbox, file, target, ctx.limits.uploadTimeoutMs);
  } catch (err) {
    throw fileError(err, target);
  }
}

export function registerUploadRoute(app: FastifyInstance, prefix: string, resolve: EntryResolver, ctx: RouteContext) {
  app.post(
    `${prefix}/upload`,
    { config: RUNTIME },
    onEntry(ctx, resolve, (e, req) => upload(ctx, e, req)),
  );
}
