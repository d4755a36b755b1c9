#!/usr/bin/env node
/** `npm run bench` (node dist/src/bench/main.js [options]): the same as `minisandbox bench [options]`. */
process.env.PIP_RETRIES ??= "0"; // this machine's pip config names an unreachable default index: fail fast, not after retries

import { Command } from "commander";
import { addBenchOptions, benchOptionsFrom, type BenchCliOptions } from "../cli/bench.js";
import { benchMain } from "./index.js";

const program = addBenchOptions(new Command("bench"))
  .description("minisandbox benchmarks, side by side with extract-per-task and podman")
  .showHelpAfterError();
program.action(async (o: BenchCliOptions) => {
  try {
    await benchMain(benchOptionsFrom(o));
    process.exit(0);
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).message}\n`);
    if (process.env.MINISANDBOX_DEBUG) process.stderr.write(`${(e as Error).stack}\n`);
    process.exit(1);
  }
});
await program.parseAsync(process.argv);
