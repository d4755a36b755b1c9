import { closeSync, constants, fstatSync, openSync, readlinkSync, realpathSync } from "node:fs";
import { InvalidInputError } from "../errors.js";

/**
 * A host directory opened once. The sandbox mounts this open object (through its descriptor), so the directory
 * checked is the directory mounted: swapping a symlink in its path afterwards changes nothing.
 */
export interface OpenedDir {
  fd: number;
  /** The real path of the opened object, read back from its descriptor. */
  realPath: string;
  /** One more holder (a fork mounts the very same directory); the descriptor closes with the last one. */
  acquire(): OpenedDir;
  release(): void;
}

function within(path: string, root: string): boolean {
  return path === root || path.startsWith(root.endsWith("/") ? root : `${root}/`);
}

/** Open `path` as a directory; with `roots`, its real path must lie inside one of them. */
export function openHostDir(path: string, roots?: readonly string[]): OpenedDir {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === "ENOTDIR" ? "not a directory" : code === "ENOENT" ? "no such directory" : String(code);
    throw new InvalidInputError(`dir ${path}: ${why}`);
  }
  let refs = 1;
  const close = (): void => closeSync(fd);
  try {
    const realPath = readlinkSync(`/proc/self/fd/${fd}`);
    if (!fstatSync(fd).isDirectory()) throw new InvalidInputError(`dir ${path}: not a directory`);
    if (roots) {
      const allowed = roots.map((r) => {
        try {
          return realpathSync(r);
        } catch {
          return undefined;
        }
      });
      if (!allowed.some((r) => r !== undefined && within(realPath, r))) {
        throw new InvalidInputError(`dir ${path} is outside the directories that may be mounted (${roots.join(", ")})`);
      }
    }
    const opened: OpenedDir = {
      fd,
      realPath,
      acquire: () => {
        refs++;
        return opened;
      },
      release: () => {
        if (--refs === 0) close();
      },
    };
    return opened;
  } catch (e) {
    close();
    throw e;
  }
}
