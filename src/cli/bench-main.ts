#!/usr/bin/env node
/** `npm run bench` (node dist/src/cli/bench-main.js [options]): `minisandbox bench [options]`, then exit. */
process.env.PIP_RETRIES ??= "0"; // an unreachable default pip index must fail fast, not after retries

import { Command } from "commander";
import { benchMain } from "../bench/index.js";
import { addBenchOptions, benchOptionsFrom, type BenchCliOptions } from "./bench.js";

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
