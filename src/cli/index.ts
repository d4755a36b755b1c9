#!/usr/bin/env node
import { Command } from "commander";
import { resolveHome } from "../util/home.js";
import { registerExecCommand } from "./exec.js";
import { registerShellCommand } from "./shell.js";
import { registerDoctorCommand } from "./doctor.js";
import { registerStoreCommand } from "./store.js";
import { registerPrepareCommand } from "./prepare.js";
import { registerDemoCommand } from "./demo.js";
import { registerEvaluateCommand } from "./evaluate.js";
import { registerServeCommand } from "./serve.js";
import { envProviderFactory } from "../server/env-provider.js";
import { registerBenchCommand } from "./bench.js";

const program = new Command();
program
  .name("minisandbox")
  .description("Isolated, copy-on-write workspaces for software-engineering agents, without containers")
  .option("--home <DIR>", "data directory (default: $MINISANDBOX_HOME or ~/.local/share/minisandbox)")
  .enablePositionalOptions()
  .showHelpAfterError();

const getHome = (): string => resolveHome(program.opts<{ home?: string }>().home);

registerExecCommand(program, getHome);
registerShellCommand(program, getHome);
registerDoctorCommand(program, getHome);
registerPrepareCommand(program, getHome);
registerEvaluateCommand(program, getHome);
registerStoreCommand(program, getHome);
registerDemoCommand(program, getHome);
registerServeCommand(program, getHome, envProviderFactory);
registerBenchCommand(program, getHome);

await program.parseAsync(process.argv);
