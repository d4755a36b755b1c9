import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { mkdirSync } from "node:fs";

/**
 * Where the home is when none is given. Declared once: the Python package's copy (`minisandbox/_generated.py`) is
 * generated from it by scripts/generate-python.mjs.
 */
export const DEFAULT_HOME = {
  /** Tried in order: a variable that names the home itself, then one that names the directory holding it (`sub`). */
  env: [{ name: "MINISANDBOX_HOME" }, { name: "XDG_DATA_HOME", sub: "minisandbox" }],
  /** Else this path under the user's home directory. */
  userHome: ".local/share/minisandbox",
} as const;

/**
 * The data directory where minisandbox keeps everything (store, node cache, sandbox scratch, logs), absolute:
 * the explicit argument (`--home`), else the first variable of `DEFAULT_HOME` that is set, else its `userHome`.
 */
export function resolveHome(explicit?: string): string {
  if (explicit) return resolve(explicit);
  for (const v of DEFAULT_HOME.env) {
    const value = process.env[v.name];
    if (value) return "sub" in v ? resolve(value, v.sub) : resolve(value);
  }
  return resolve(homedir(), DEFAULT_HOME.userHome);
}

/** Well-known subdirectories of a home; created on demand. */
export interface HomeLayout {
  root: string;
  store: string;
  cache: string;
  sandboxes: string;
  logs: string;
  envs: string;
}

export function homeLayout(home: string): HomeLayout {
  return {
    root: home,
    store: join(home, "store"),
    cache: join(home, "cache"),
    sandboxes: join(home, "sandboxes"),
    logs: join(home, "logs"),
    envs: join(home, "envs"),
  };
}

export function ensureDir(dir: string): string {
  mkdirSync(dir, { recursive: true });
  return dir;
}
