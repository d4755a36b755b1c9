import { readFileSync } from "node:fs";

/** The version in the package's package.json. */
export function packageVersion(): string {
  const file = new URL("../../../package.json", import.meta.url);
  return (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
}
