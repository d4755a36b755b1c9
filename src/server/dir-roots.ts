/**
 * Host directories a client may mount (`serve --allow-dir`). A requested directory is opened once; its real path
 * is read from the open descriptor and checked against the roots and the server's secrets, and the sandbox is given
 * that very descriptor (`/proc/<pid>/fd/<n>`, with `dirRoots` so it checks the object it mounts again): swapping a
 * symlink or a directory after the check changes nothing.
 */
import { closeSync, constants, openSync, readlinkSync, realpathSync, statSync } from "node:fs";
import { isAbsolute, resolve, sep } from "node:path";
import { ForbiddenError, InvalidInputError } from "../errors.js";

export interface OpenedDir {
  /** What to mount: the open descriptor of the checked directory. */
  mountSource: string;
  /** Its real path (for display). */
  realPath: string;
  close(): void;
}

export class DirRoots {
  readonly roots: readonly string[];
  private readonly secrets: readonly string[];

  /**
   * Each root must exist: it is resolved once, now. `secrets` (the server's home with its token, a tokens file)
   * are never mounted, nor any directory holding them, even under a root.
   */
  constructor(roots: readonly string[], secrets: readonly string[] = []) {
    this.secrets = secrets.map((p) => {
      try {
        return realpathSync(p);
      } catch {
        return resolve(p);
      }
    });
    this.roots = roots.map((r) => {
      try {
        if (!statSync(r).isDirectory()) throw new Error("not a directory");
        return realpathSync(resolve(r));
      } catch (e) {
        throw new InvalidInputError(`--allow-dir ${r}: ${(e as Error).message}`);
      }
    });
  }

  /** True when `real` is a root or lies below one, and neither holds nor lies in a secret. */
  contains(real: string): boolean {
    const under = (p: string, dir: string): boolean => p === dir || p.startsWith(dir === sep ? dir : dir + sep);
    if (this.secrets.some((s) => under(s, real) || under(real, s))) return false;
    return this.roots.some((r) => under(real, r));
  }

  /**
   * Open `dir` for mounting. Missing, not a directory, or outside the roots all get the same answer, so a client
   * cannot probe which host paths exist.
   */
  open(dir: string): OpenedDir {
    if (this.roots.length === 0)
      throw new ForbiddenError(
        "this server mounts no host directories: start it with --allow-dir DIR to allow directories under DIR",
      );
    const refused = (): ForbiddenError =>
      new ForbiddenError(`dir ${dir} is not a directory under the directories this server may mount`);
    if (!isAbsolute(dir)) throw refused();
    let fd: number;
    try {
      fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
    } catch {
      throw refused();
    }
    let real: string;
    try {
      real = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      closeSync(fd);
      throw refused();
    }
    if (!this.contains(real)) {
      closeSync(fd);
      throw refused();
    }
    let closed = false;
    return {
      mountSource: `/proc/${process.pid}/fd/${fd}`,
      realPath: real,
      close: () => {
        if (!closed) closeSync(fd);
        closed = true;
      },
    };
  }
}
