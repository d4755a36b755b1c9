/** Where a reserved host id range is configured: an environment variable, else /etc/subuid and /etc/subgid. */
import { readFileSync } from "node:fs";

export interface IdRange {
  base: number;
  count: number;
  /** What set it (the variable's name or /etc/subuid), for messages. */
  source: string;
}

function subidEntry(file: string, user: string): { base: number; count: number } | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n")) {
    const [name, base, count] = line.trim().split(":");
    if (name === user && base && count) return { base: Number(base), count: Number(count) };
  }
  return undefined;
}

/**
 * `$envVar=BASE:COUNT`, else `user`'s entry of /etc/subuid when /etc/subgid has the same, else undefined. Not
 * validated: each caller checks the range against what it needs.
 */
export function configuredIdRange(envVar: string, user: string): IdRange | undefined {
  const env = process.env[envVar];
  if (env) {
    const [base, count] = env.split(":").map(Number);
    return { base: base ?? Number.NaN, count: count ?? Number.NaN, source: envVar };
  }
  const uid = subidEntry("/etc/subuid", user);
  const gid = subidEntry("/etc/subgid", user);
  if (uid && gid && uid.base === gid.base && uid.count === gid.count) return { ...uid, source: "/etc/subuid" };
  return undefined;
}
