import { spawn } from "node:child_process";
import type { Command } from "commander";
import { addSandboxOptions, fail, sandboxOptionsFrom, timeoutMsFrom, type SandboxCliOptions } from "./common.js";
import { addWorkspaceOptions, sandboxFor, type WorkspaceCliOptions } from "./workspace.js";

export function registerShellCommand(program: Command, getHome: () => string): void {
  addWorkspaceOptions(addSandboxOptions(program.command("shell")))
    .description("an interactive shell in a fresh sandbox (everything it writes vanishes on exit)")
    .action(async (o: SandboxCliOptions & WorkspaceCliOptions) => {
      try {
        const own = sandboxOptionsFrom(o, getHome());
        await using sb = await sandboxFor(o, {
          ...own,
          env: { TERM: process.env.TERM ?? "xterm", ...own.env },
          timeoutMs: timeoutMsFrom(o),
        });
        if (!sb.security().seccomp) process.stderr.write("minisandbox: seccomp is OFF for this sandbox\n");
        const { argv, cleanup } = sb.commandArgv(["/bin/bash", "-i"], { keepTerminal: true });
        const code = await new Promise<number>((resolve) => {
          const child = spawn(argv[0]!, argv.slice(1), { stdio: "inherit", env: {} });
          child.on("exit", (c, s) => resolve(c ?? (s ? 128 : 1)));
          sb.onClose(() => resolve(124));
        });
        cleanup();
        process.exitCode = code;
      } catch (e) {
        fail(e);
      }
    });
}
