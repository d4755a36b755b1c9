#!/usr/bin/env node
/** `npm run bench [-- options]` (node dist/bench/src/main.js): parse the options, run the bench, exit. */
process.env.PIP_RETRIES ??= "0"; // an unreachable default pip index must fail fast, not after retries

import { Command } from "commander";
import { benchMain } from "./index.js";
import { addBenchOptions, benchOptionsFrom, type BenchCliOptions } from "./cli.js";

const program = addBenchOptions(new Command("bench"))
  .description("minisandbox benchmarks, side by side with extract-per-task and podman")
  .showHelpAfterError();
program.action(async (o: BenchCliOptions) => {
  let options: ReturnType<typeof benchOptionsFrom>;
  try {
    options = benchOptionsFrom(o);
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).message}\n`);
    process.exit(2);
  }
  try {
    await benchMain(options);
    process.exit(0);
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).message}\n`);
    if (process.env.MINISANDBOX_DEBUG) process.stderr.write(`${(e as Error).stack}\n`);
    process.exit(1);
  }
});
await program.parseAsync(process.argv);
