/**
 * The `minisandbox` program: every command declared with its options (cheap), each action loading what it needs
 * when it runs, so a command pays only for its own modules.
 */
import { Command, CommanderError } from "commander";
import { resolveHome } from "../util/home.js";
import { registerExecCommand } from "./exec.js";
import { registerShellCommand } from "./shell.js";
import { registerDoctorCommand } from "./doctor.js";
import { registerStoreCommand } from "./store.js";
import { registerImagesCommand } from "./images.js";
import { registerPrepareCommand } from "./prepare.js";
import { registerDemoCommand } from "./demo.js";
import { registerEvaluateCommand } from "./evaluate.js";
import { registerServeCommand } from "./serve.js";
import { registerDashboardCommand } from "./dashboard.js";
import { registerViewCommand } from "./view.js";
import type { ProviderFactory } from "../server/provider.js";
import { fail, usageError } from "./common.js";
import { packageVersion } from "./version.js";

const program = new Command();
program
  .name("minisandbox")
  .description("Isolated, copy-on-write workspaces for software-engineering agents, without containers")
  .version(packageVersion(), "-V, --version", "print the version")
  // Global: before or after the command (`minisandbox exec --home DIR ...` works too).
  .option("--home <DIR>", "data directory (default: $MINISANDBOX_HOME or ~/.local/share/minisandbox)")
  // Usage errors: one line on stderr and exit 2, like every other bad input (subcommands inherit both).
  .configureOutput({ outputError: (text, write) => write(usageError(text)) })
  .exitOverride();

const getHome = (): string => resolveHome(program.opts<{ home?: string }>().home);

/** `serve --dataset`'s workspaces: the environment machinery, loaded only by a server that is started. */
const envProviders: ProviderFactory = async (o) => (await import("../server/env-provider.js")).envProviderFactory(o);

registerExecCommand(program, getHome);
registerShellCommand(program, getHome);
registerDoctorCommand(program, getHome);
registerPrepareCommand(program, getHome);
registerEvaluateCommand(program, getHome);
registerStoreCommand(program, getHome);
registerImagesCommand(program, getHome);
registerDemoCommand(program, getHome);
registerServeCommand(program, getHome, envProviders);
registerDashboardCommand(program, getHome);
registerViewCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (!(e instanceof CommanderError)) fail(e);
  process.exitCode = e.exitCode === 0 ? 0 : 2;
}
