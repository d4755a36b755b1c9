#!/usr/bin/env node
/**
 * The `minisandbox` entry point. `--version` alone is answered without loading the parser (scripts ask it often);
 * everything else goes to the program.
 */
const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
  const { packageVersion } = await import("./version.js");
  process.stdout.write(`${packageVersion()}\n`);
} else {
  await import("./program.js");
}
