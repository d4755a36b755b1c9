import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { mkdirSync } from "node:fs";

/**
 * The data directory where minisandbox keeps everything (store, node cache, sandbox scratch, logs).
 * Order: explicit argument (`--home`), `MINISANDBOX_HOME`, then a per-user default.
 */
export function resolveHome(explicit?: string): string {
  if (explicit) return resolve(explicit);
  const env = process.env.MINISANDBOX_HOME;
  if (env) return resolve(env);
  const xdg = process.env.XDG_DATA_HOME;
  return xdg ? join(xdg, "minisandbox") : join(homedir(), ".local", "share", "minisandbox");
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
