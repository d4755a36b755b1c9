/**
 * Real parts for image tests: tar archives and OCI layouts written byte by byte (so hostile ones can be made), the
 * reference registry (Debian's docker-registry) on 127.0.0.1 with its own config and storage (anonymous, htpasswd,
 * or bearer tokens from a token service run here the way Docker Hub's works), pushes over the real v2 API, and a
 * proxy in front of a registry that can misbehave on cue (429, 5xx, cut or altered bodies).
 */
import { execFileSync } from "node:child_process";
import { createHash, createPrivateKey, randomBytes, sign, X509Certificate } from "node:crypto";
import { linkSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after } from "node:test";
import { gzipSync } from "node:zlib";
import { LoopbackRegistry, type RegistryAuth } from "../src/fixtures/registry.js";

// ---------------------------------------------------------------------------------------------------- tar writer

export interface TarEntry {
  name: string | Buffer;
  type?: "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo" | "sparse";
  data?: Buffer | string;
  mode?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  linkname?: string;
  xattrs?: Record<string, Buffer | string>;
  /** Use a GNU long-name entry ('L') instead of pax for a long name. */
  gnuLongName?: boolean;
}

const TYPEFLAG = { file: "0", hardlink: "1", symlink: "2", char: "3", block: "4", dir: "5", fifo: "6", sparse: "S" };

function octal(n: number, len: number): string {
  return `${n.toString(8).padStart(len - 1, "0")}\0`;
}

function header(name: Buffer, typeflag: string, size: number, e: Partial<TarEntry>): Buffer {
  const b = Buffer.alloc(512);
  name.copy(b, 0, 0, Math.min(name.length, 100));
  b.write(octal(e.mode ?? (typeflag === "5" ? 0o755 : 0o644), 8), 100, "latin1");
  b.write(octal(e.uid ?? 0, 8), 108, "latin1");
  b.write(octal(e.gid ?? 0, 8), 116, "latin1");
  b.write(octal(size, 12), 124, "latin1");
  b.write(octal(e.mtime ?? 1_700_000_000, 12), 136, "latin1");
  b.write("        ", 148, "latin1");
  b.write(typeflag, 156, "latin1");
  if (e.linkname) Buffer.from(e.linkname).copy(b, 157, 0, Math.min(100, Buffer.byteLength(e.linkname)));
  b.write("ustar\0", 257, "latin1");
  b.write("00", 263, "latin1");
  if (typeflag === "3" || typeflag === "4") {
    b.write(octal(1, 8), 329, "latin1");
    b.write(octal(3, 8), 337, "latin1");
  }
  let sum = 0;
  for (const byte of b) sum += byte;
  b.write(octal(sum, 7), 148, "latin1");
  return b;
}

function padded(data: Buffer): Buffer {
  return Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
}

function paxRecords(records: [string, Buffer][]): Buffer {
  const parts = records.map(([k, v]) => {
    const body = Buffer.concat([Buffer.from(` ${k}=`), v, Buffer.from("\n")]);
    let len = body.length + 1;
    while (String(len).length + body.length !== len) len = String(len).length + body.length;
    return Buffer.concat([Buffer.from(String(len)), body]);
  });
  return Buffer.concat(parts);
}

/** A tar archive of `entries`; `end: false` leaves the end-of-archive marker out (a truncated archive). */
export function makeTar(entries: TarEntry[], opts: { end?: boolean } = {}): Buffer {
  const out: Buffer[] = [];
  for (const e of entries) {
    const name = Buffer.isBuffer(e.name) ? e.name : Buffer.from(e.name);
    const type = e.type ?? "file";
    const data = e.data === undefined ? Buffer.alloc(0) : Buffer.from(e.data);
    const pax: [string, Buffer][] = [];
    if (name.length > 100 && e.gnuLongName) {
      const long = Buffer.concat([name, Buffer.from([0])]);
      out.push(header(Buffer.from("././@LongLink"), "L", long.length, {}), padded(long));
    } else if (name.length > 100) pax.push(["path", name]);
    if (e.linkname && Buffer.byteLength(e.linkname) > 100) pax.push(["linkpath", Buffer.from(e.linkname)]);
    for (const [k, v] of Object.entries(e.xattrs ?? {})) pax.push([`SCHILY.xattr.${k}`, Buffer.from(v)]);
    if (pax.length > 0) {
      const body = paxRecords(pax);
      out.push(header(Buffer.from("PaxHeader"), "x", body.length, {}), padded(body));
    }
    const size = type === "file" || type === "sparse" ? data.length : 0;
    out.push(header(name, TYPEFLAG[type], size, e));
    if (size > 0) out.push(padded(data));
  }
  if (opts.end !== false) out.push(Buffer.alloc(1024));
  return Buffer.concat(out);
}

// ---------------------------------------------------------------------------------------------------- OCI layout

export const sha256 = (b: Buffer | string): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;

export interface LayerSpec {
  tar: Buffer;
  compression?: "gzip" | "zstd" | "none";
  /** Override the media type in the manifest (unsupported types, foreign layers). */
  mediaType?: string;
}

export interface ImageSpec {
  layers: LayerSpec[];
  architecture?: string;
  config?: Record<string, unknown>;
  /** Override the config's diff ids (a config lying about its layers). */
  diffIds?: string[];
  configMediaType?: string;
}

export interface Blob {
  digest: string;
  bytes: Buffer;
  mediaType: string;
}

export interface BuiltImage {
  manifest: Blob;
  config: Blob;
  layers: Blob[];
  /** Every blob by digest (manifest, config, layers). */
  blobs: Map<string, Blob>;
}

function compress(tar: Buffer, how: LayerSpec["compression"]): Buffer {
  if (how === "gzip") return gzipSync(tar);
  if (how === "zstd") return execFileSync("zstd", ["-q", "-c"], { input: tar, maxBuffer: 1 << 30 });
  return tar;
}

const LAYER_MEDIA = {
  gzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  zstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  none: "application/vnd.oci.image.layer.v1.tar",
};

/** The blobs of one image (OCI manifest, config, layers). */
export function buildImage(spec: ImageSpec): BuiltImage {
  const layers = spec.layers.map((l): Blob => {
    const bytes = compress(l.tar, l.compression ?? "gzip");
    return { digest: sha256(bytes), bytes, mediaType: l.mediaType ?? LAYER_MEDIA[l.compression ?? "gzip"] };
  });
  const configJson = {
    architecture: spec.architecture ?? "amd64",
    os: "linux",
    created: "2024-01-01T00:00:00Z",
    config: { Env: ["PATH=/usr/local/bin:/usr/bin:/bin"], WorkingDir: "/", ...spec.config },
    rootfs: { type: "layers", diff_ids: spec.diffIds ?? spec.layers.map((l) => sha256(l.tar)) },
  };
  const cbytes = Buffer.from(JSON.stringify(configJson));
  const config: Blob = {
    digest: sha256(cbytes),
    bytes: cbytes,
    mediaType: spec.configMediaType ?? "application/vnd.oci.image.config.v1+json",
  };
  const desc = (b: Blob) => ({ mediaType: b.mediaType, digest: b.digest, size: b.bytes.length });
  const mbytes = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: desc(config),
      layers: layers.map(desc),
    }),
  );
  const manifest: Blob = {
    digest: sha256(mbytes),
    bytes: mbytes,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
  };
  const blobs = new Map([manifest, config, ...layers].map((b) => [b.digest, b]));
  return { manifest, config, layers, blobs };
}

/** An index over images of several platforms. */
export function buildIndex(images: { image: BuiltImage; architecture: string }[]): Blob {
  const bytes = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: images.map(({ image, architecture }) => ({
        mediaType: image.manifest.mediaType,
        digest: image.manifest.digest,
        size: image.manifest.bytes.length,
        platform: { os: "linux", architecture },
      })),
    }),
  );
  return { digest: sha256(bytes), bytes, mediaType: "application/vnd.oci.image.index.v1+json" };
}

/** An OCI layout directory holding `images` (each under its ref name annotation). */
export function writeOciLayout(dir: string, images: { ref: string; image: BuiltImage }[]): string {
  mkdirSync(join(dir, "blobs", "sha256"), { recursive: true });
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  for (const { image } of images)
    for (const b of image.blobs.values()) writeFileSync(join(dir, "blobs", "sha256", b.digest.slice(7)), b.bytes);
  const manifests = images.map(({ ref, image }) => ({
    mediaType: image.manifest.mediaType,
    digest: image.manifest.digest,
    size: image.manifest.bytes.length,
    annotations: { "org.opencontainers.image.ref.name": ref },
  }));
  writeFileSync(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests }));
  return dir;
}

// ---------------------------------------------------------------------------------------------------- registries

export type { RegistryAuth };

/** The reference registry on 127.0.0.1 (src/fixtures/registry.ts), stopped after the test file. */
export const TestRegistry = {
  async start(dir: string, auth?: RegistryAuth): Promise<LoopbackRegistry> {
    const reg = await LoopbackRegistry.start(dir, auth);
    after(() => reg.stop());
    return reg;
  },
};

/** Push `image` as `repo:tag` over the v2 API (monolithic uploads), with an Authorization header if given. */
export async function pushImage(
  registry: string,
  repo: string,
  tag: string,
  image: { blobs: Map<string, Blob>; manifest: Blob },
  authorization?: string,
): Promise<void> {
  const auth: Record<string, string> = authorization ? { authorization } : {};
  for (const b of image.blobs.values()) {
    if (b === image.manifest || b.mediaType.includes("manifest") || b.mediaType.includes("index")) continue;
    await pushBlob(registry, repo, b.bytes, auth);
  }
  await putManifest(registry, repo, tag, image.manifest, auth);
}

export async function pushBlob(registry: string, repo: string, bytes: Buffer, auth: Record<string, string> = {}) {
  const start = await fetch(`http://${registry}/v2/${repo}/blobs/uploads/`, { method: "POST", headers: auth });
  if (start.status !== 202) throw new Error(`upload start: ${start.status} ${await start.text()}`);
  const location = new URL(start.headers.get("location")!, `http://${registry}`);
  location.searchParams.set("digest", sha256(bytes));
  const put = await fetch(location, {
    method: "PUT",
    headers: { ...auth, "content-type": "application/octet-stream" },
    body: bytes,
  });
  if (put.status !== 201) throw new Error(`upload: ${put.status} ${await put.text()}`);
}

export async function putManifest(
  registry: string,
  repo: string,
  tag: string,
  manifest: Blob,
  auth: Record<string, string> = {},
): Promise<void> {
  const r = await fetch(`http://${registry}/v2/${repo}/manifests/${tag}`, {
    method: "PUT",
    headers: { ...auth, "content-type": manifest.mediaType },
    body: manifest.bytes,
  });
  if (r.status !== 201) throw new Error(`manifest put: ${r.status} ${await r.text()}`);
}

// ---------------------------------------------------------------------------------------------------- tokens

/**
 * A token service like Docker Hub's: `GET /token?service=…&scope=repository:NAME:pull` answers a JWT (RS256, with
 * its certificate in `x5c`) granting what `grant(user, repository)` allows; 401 for wrong credentials.
 */
export class TokenServer {
  readonly requests: { user?: string; scope: string }[] = [];
  private constructor(
    readonly url: string,
    readonly certFile: string,
    private readonly key: ReturnType<typeof createPrivateKey>,
    private readonly certDer: Buffer,
  ) {}

  static readonly issuer = "msb-test-issuer";
  static readonly service = "msb-test-registry";

  static async start(
    dir: string,
    users: Record<string, string>,
    grant: (user: string | undefined, repository: string) => string[],
  ): Promise<TokenServer> {
    mkdirSync(dir, { recursive: true });
    const keyFile = join(dir, "token.key");
    const certFile = join(dir, "token.crt");
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        keyFile,
        "-out",
        certFile,
        "-days",
        "2",
        "-subj",
        "/CN=msb-test-token",
      ],
      { stdio: "ignore" },
    );
    const key = createPrivateKey(readFileSync(keyFile));
    const certDer = new X509Certificate(readFileSync(certFile)).raw;
    let self: TokenServer | undefined;
    const server = createServer((req, res) => self!.answer(req, res, users, grant));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`;
    self = new TokenServer(url, certFile, key, certDer);
    after(() => server.close());
    return self;
  }

  private answer(
    req: IncomingMessage,
    res: ServerResponse,
    users: Record<string, string>,
    grant: (user: string | undefined, repository: string) => string[],
  ): void {
    const url = new URL(req.url ?? "/", "http://x");
    const scope = url.searchParams.get("scope") ?? "";
    let user: string | undefined;
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? "");
    if (basic) {
      const [u, p] = Buffer.from(basic[1]!, "base64").toString().split(":");
      if (!u || users[u] !== p) return void res.writeHead(401).end('{"details":"bad credentials"}');
      user = u;
    }
    this.requests.push({ ...(user ? { user } : {}), scope });
    const [, repository = "", wanted = ""] = scope.split(":");
    const actions = grant(user, repository).filter((a) => wanted.split(",").includes(a));
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ token: this.mint(user ?? "", repository, actions), expires_in: 300 }));
  }

  /** A token as the service would issue it (tests also push with one). */
  mint(subject: string, repository: string, actions: string[]): string {
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const now = Math.floor(Date.now() / 1000);
    const head = b64({ alg: "RS256", typ: "JWT", x5c: [this.certDer.toString("base64")] });
    const claims = b64({
      iss: TokenServer.issuer,
      sub: subject,
      aud: TokenServer.service,
      exp: now + 300,
      nbf: now - 10,
      iat: now,
      jti: randomBytes(8).toString("hex"),
      access: actions.length ? [{ type: "repository", name: repository, actions }] : [],
    });
    const signature = sign("RSA-SHA256", Buffer.from(`${head}.${claims}`), this.key).toString("base64url");
    return `${head}.${claims}.${signature}`;
  }
}

// ---------------------------------------------------------------------------------------------------- fault proxy

/** What the proxy does with one request: pass it on (optionally altering the answer), or answer itself. */
export type Fault =
  | { kind: "status"; status: number; headers?: Record<string, string>; body?: string }
  | { kind: "cut"; afterBytes: number }
  | { kind: "stall"; afterBytes: number }
  | { kind: "delay"; ms: number }
  | { kind: "rewrite"; body: (original: Buffer) => Buffer; dropDigestHeader?: boolean };

/** A proxy to a registry; `rule(method, path, headers)` decides each request's fault (undefined: pass through). */
export class FaultProxy {
  readonly seen: { method: string; path: string; range?: string; status?: number }[] = [];
  rule: (req: { method: string; path: string }) => Fault | undefined = () => undefined;
  /** Blob requests open at once: now, and the most since `peakBlobs` was last set to 0. */
  private openBlobs = 0;
  peakBlobs = 0;
  private constructor(readonly host: string) {}

  static async start(target: string): Promise<FaultProxy> {
    let self: FaultProxy | undefined;
    const server = createServer((req, res) => self!.handle(req, res, target));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    self = new FaultProxy(`127.0.0.1:${(server.address() as AddressInfo).port}`);
    after(() => {
      server.closeAllConnections();
      server.close();
    });
    return self;
  }

  private handle(req: IncomingMessage, res: ServerResponse, target: string): void {
    const method = req.method ?? "GET";
    const path = req.url ?? "/";
    const entry: FaultProxy["seen"][number] = { method, path };
    if (req.headers.range) entry.range = req.headers.range;
    this.seen.push(entry);
    if (path.includes("/blobs/")) {
      this.peakBlobs = Math.max(this.peakBlobs, ++this.openBlobs);
      res.once("close", () => this.openBlobs--);
    }
    const fault = this.rule({ method, path });
    if (fault?.kind === "delay")
      return void setTimeout(() => this.forward(req, res, target, undefined, entry), fault.ms);
    this.forward(req, res, target, fault, entry);
  }

  private forward(
    req: IncomingMessage,
    res: ServerResponse,
    target: string,
    fault: Fault | undefined,
    entry: FaultProxy["seen"][number],
  ): void {
    const method = req.method ?? "GET";
    const path = req.url ?? "/";
    if (fault?.kind === "status") {
      entry.status = fault.status;
      res.writeHead(fault.status, { "content-type": "application/json", ...fault.headers });
      return void res.end(fault.body ?? '{"errors":[{"code":"TEST","message":"injected"}]}');
    }
    const headers = { ...req.headers, host: target };
    const up = request({ host: target.split(":")[0], port: Number(target.split(":")[1]), method, path, headers }, (u) =>
      this.relay(u, res, fault, entry),
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  }

  private relay(up: IncomingMessage, res: ServerResponse, fault: Fault | undefined, entry: { status?: number }): void {
    entry.status = up.statusCode;
    const headers = { ...up.headers };
    if (fault?.kind === "rewrite") {
      const parts: Buffer[] = [];
      up.on("data", (b: Buffer) => parts.push(b));
      up.on("end", () => {
        const body = fault.body(Buffer.concat(parts));
        if (fault.dropDigestHeader) delete headers["docker-content-digest"];
        headers["content-length"] = String(body.length);
        res.writeHead(up.statusCode ?? 502, headers);
        res.end(body);
      });
      return;
    }
    res.writeHead(up.statusCode ?? 502, headers);
    if (fault?.kind !== "cut" && fault?.kind !== "stall") return void up.pipe(res);
    let sent = 0;
    up.on("data", (b: Buffer) => {
      if (sent >= fault.afterBytes) return;
      const part = b.subarray(0, fault.afterBytes - sent);
      sent += part.length;
      if (sent < fault.afterBytes) return void res.write(part);
      up.destroy();
      res.write(part, () => {
        if (fault.kind === "cut") res.destroy();
      });
    });
  }
}

/** An image's manifest and config as JSON, to edit. */
export interface EditableImage {
  manifest: {
    config: { digest: string; size: number };
    layers: { mediaType?: string; digest: string; size: number }[];
  };
  config: { config: Record<string, unknown>; rootfs: { diff_ids: string[] }; history?: { created_by: string }[] };
}

/**
 * A one-image OCI layout at `out` derived from the image named `name` in the layout `from`: its manifest and config
 * edited by `edit` (which may add layers with `put`), its unchanged layers hard-linked, not copied.
 */
export function derivedLayout(
  from: string,
  name: string,
  out: string,
  edit: (image: EditableImage, put: (bytes: Buffer) => { digest: string; size: number }) => void,
): string {
  const blob = (d: string) => join(from, "blobs", "sha256", d.slice(7));
  const index = JSON.parse(readFileSync(join(from, "index.json"), "utf8")) as {
    manifests: { digest: string; annotations?: Record<string, string> }[];
  };
  const desc = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === name);
  if (!desc) throw new Error(`${from} has no image named ${name}`);
  const manifest = JSON.parse(readFileSync(blob(desc.digest), "utf8")) as EditableImage["manifest"];
  const config = JSON.parse(readFileSync(blob(manifest.config.digest), "utf8")) as EditableImage["config"];
  mkdirSync(join(out, "blobs", "sha256"), { recursive: true });
  const put = (bytes: Buffer): { digest: string; size: number } => {
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    writeFileSync(join(out, "blobs", "sha256", digest.slice(7)), bytes);
    return { digest, size: bytes.length };
  };
  for (const l of manifest.layers) linkSync(blob(l.digest), join(out, "blobs", "sha256", l.digest.slice(7)));
  edit({ manifest, config }, put);
  manifest.config = { ...manifest.config, ...put(Buffer.from(JSON.stringify(config))) };
  const m = put(Buffer.from(JSON.stringify(manifest)));
  writeFileSync(join(out, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  const named = { mediaType: "application/vnd.oci.image.manifest.v1+json", ...m };
  writeFileSync(join(out, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [named] }));
  return out;
}
