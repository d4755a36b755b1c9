/** Writes the wire contract as JSON schema to `integrations/python/wire-contract.json` (or the path given). */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { contractJson } from "./index.js";

export const CONTRACT_FILE = fileURLToPath(new URL("../../../integrations/python/wire-contract.json", import.meta.url));

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = process.argv[2] ?? CONTRACT_FILE;
  writeFileSync(out, contractJson());
  process.stdout.write(`wrote ${out}\n`);
}
