/**
 * The `minisandbox` program: the commands declared with their options (cheap), each action loading what it needs
 * when it runs, so a command pays only for its own modules. A run of one command declares that command alone (its
 * module is the only one loaded); help, the version and usage errors without a command declare every one.
 */
import { Command, CommanderError } from "commander";
import { resolveHome } from "../util/home.js";
import type { ProviderFactory } from "../server/provider.js";
import { fail, usageError } from "./common.js";
import { namedCommand } from "./named-command.js";
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

/** Every command, in the order help lists them: declaring one loads its module. */
const COMMANDS: Record<string, () => Promise<void>> = {
  exec: async () => (await import("./exec.js")).registerExecCommand(program, getHome),
  shell: async () => (await import("./shell.js")).registerShellCommand(program, getHome),
  doctor: async () =>
    (await import("./doctor.js")).registerDoctorCommand(program, getHome, async () => {
      const c = await (await import("../env/environments.js")).nodeCacheFor(getHome()).formChoice();
      return [{ name: "layers", status: "ok", detail: c.reason }];
    }),
  prepare: async () => (await import("./prepare.js")).registerPrepareCommand(program, getHome),
  evaluate: async () => (await import("./evaluate.js")).registerEvaluateCommand(program, getHome),
  store: async () => (await import("./store.js")).registerStoreCommand(program, getHome),
  images: async () => (await import("./images.js")).registerImagesCommand(program, getHome),
  demo: async () => (await import("./demo.js")).registerDemoCommand(program, getHome),
  serve: async () => (await import("./serve.js")).registerServeCommand(program, getHome, envProviders),
  dashboard: async () => (await import("./dashboard.js")).registerDashboardCommand(program, getHome),
  view: async () => (await import("./view.js")).registerViewCommand(program),
};

try {
  const one = namedCommand(process.argv.slice(2), Object.keys(COMMANDS));
  for (const [name, declare] of Object.entries(COMMANDS)) if (one === undefined || name === one) await declare();
  await program.parseAsync(process.argv);
} catch (e) {
  if (!(e instanceof CommanderError)) fail(e);
  process.exitCode = e.exitCode === 0 ? 0 : 2;
}
