/** Files of a remote sandbox: text through SWE-ReX's read_file / write_file, bytes and uploads streamed. */
import { openAsBlob, statSync } from "node:fs";
import { basename } from "node:path";
import { NotFoundError } from "../errors.js";
import { type CamelOf, type InOf, native, swerex } from "../wire/index.js";
import type { HttpClient } from "./http.js";
import type { RemoteExecResult } from "./remote-exec.js";
import { zipDirectory } from "./zip.js";

export class RemoteFiles {
  constructor(
    private readonly rt: HttpClient,
    private readonly api: HttpClient,
    private readonly id: string,
    private readonly exec: (cmd: string[]) => Promise<RemoteExecResult>,
  ) {}

  /** Text of a file (UTF-8; `\r\n` becomes `\n`, as SWE-ReX's read_file does). */
  async read(path: string, opts: { encoding?: string; errors?: string } = {}): Promise<string> {
    const body: InOf<typeof swerex.ReadFileRequest> = {
      path,
      encoding: opts.encoding ?? null,
      errors: opts.errors ?? null,
    };
    return (await this.rt.call("POST", "/read_file", swerex.ReadFileResponse, body, { what: `read ${path}` })).content;
  }

  /** Bytes of a file, unchanged. */
  async readBytes(path: string): Promise<Buffer> {
    const what = `read ${path}`;
    const res = await this.api.fetch("GET", `/sandboxes/${this.id}/files?path=${encodeURIComponent(path)}`, undefined, {
      what,
    });
    if (!res.ok) await this.api.read(res, swerex.EmptyResponse, what);
    return Buffer.from(await res.arrayBuffer());
  }

  /** Write a file (parents created). Binary content goes through /upload. */
  async write(path: string, content: string | Buffer): Promise<void> {
    if (typeof content === "string") {
      const body: InOf<typeof swerex.WriteFileRequest> = { content, path };
      await this.rt.call("POST", "/write_file", swerex.EmptyResponse, body, { what: `write ${path}` });
      return;
    }
    await this.send(new Blob([content]), basename(path) || "file", path, false);
  }

  /** Copy a local file or directory into the sandbox at `target` (a directory travels as a zip). */
  async upload(localPath: string, target: string): Promise<void> {
    if (statSync(localPath).isDirectory())
      await this.send(new Blob([zipDirectory(localPath)]), "zipped_transfer.zip", target, true);
    // openAsBlob: the file is read from disk as it is sent, never whole in memory.
    else await this.send(await openAsBlob(localPath), basename(localPath), target, false);
  }

  private async send(data: Blob, filename: string, target: string, unzip: boolean): Promise<void> {
    const form = new FormData();
    form.append("file", data, filename);
    form.append("target_path", target);
    form.append("unzip", unzip ? "true" : "false");
    const what = `upload to ${target}`;
    await this.rt.read(await this.rt.fetch("POST", "/upload", form, { what }), swerex.EmptyResponse, what);
  }

  /** The entries of a directory (not recursive), as in-process `files.list`. */
  async list(path: string): Promise<CamelOf<typeof native.FileEntry>[]> {
    const what = `list ${path}`;
    const url = `/sandboxes/${this.id}/files/list?path=${encodeURIComponent(path)}`;
    return (await this.api.call("GET", url, native.FileListResponse, undefined, { what })).entries;
  }

  async exists(path: string): Promise<boolean> {
    return (await this.exec(["/usr/bin/test", "-e", path])).exitCode === 0;
  }

  async mkdir(path: string): Promise<void> {
    const r = await this.exec(["/bin/mkdir", "-p", "--", path]);
    if (r.exitCode !== 0) throw new NotFoundError(`mkdir ${path} failed: ${r.stderr.trim()}`);
  }

  async remove(path: string): Promise<void> {
    const r = await this.exec(["/bin/rm", "-rf", "--", path]);
    if (r.exitCode !== 0) throw new NotFoundError(`remove ${path} failed: ${r.stderr.trim()}`);
  }
}
