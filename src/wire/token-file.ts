/**
 * Where `minisandbox serve` keeps the token it generates when none is given, and how clients find it: the same home
 * resolution as the CLI (`--home` / `home` option, then `MINISANDBOX_HOME`, then the per-user default).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { resolveHome } from "../util/home.js";

/** The token file's path under a home (declared once: the Python package's copy is generated from it). */
export const TOKEN_FILE = ["server", "token"] as const;

/** `<home>/server/token`: one line, readable by its owner only. */
export function tokenFilePath(home?: string): string {
  return join(resolveHome(home), ...TOKEN_FILE);
}

/** The token in the home's token file, or undefined when there is none (or it cannot be read). */
export function readTokenFile(home?: string): string | undefined {
  try {
    const token = readFileSync(tokenFilePath(home), "utf8").trim();
    return token === "" ? undefined : token;
  } catch {
    return undefined;
  }
}
