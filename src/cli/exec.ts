import type { Command } from "commander";
import { addSandboxOptions, fail, sandboxOptionsFrom, timeoutMsFrom, type SandboxCliOptions } from "./common.js";
import { addWorkspaceOptions, sandboxFor, type WorkspaceCliOptions } from "./workspace.js";

export function registerExecCommand(program: Command, getHome: () => string): void {
  addWorkspaceOptions(addSandboxOptions(program.command("exec")))
    .description("run one command in a fresh sandbox; exits with its status (124 on timeout)")
    .argument("<cmd...>", "command and arguments (put them after --)")
    .action(async (cmd: string[], o: SandboxCliOptions & WorkspaceCliOptions) => {
      let code = 1;
      try {
        const timeoutMs = timeoutMsFrom(o);
        await using sb = await sandboxFor(o, sandboxOptionsFrom(o, getHome()));
        if (!sb.security().seccomp) process.stderr.write("minisandbox: seccomp is OFF for this sandbox\n");
        for (const n of sb.notices) process.stderr.write(`minisandbox: ${n}\n`);
        const r = await sb.exec(cmd, {
          timeoutMs,
          outputLimitBytes: Number.MAX_SAFE_INTEGER,
          onStdout: (b) => process.stdout.write(b),
          onStderr: (b) => process.stderr.write(b),
        });
        if (r.timedOut) process.stderr.write(`minisandbox: timed out after ${timeoutMs! / 1000} s\n`);
        else if (r.limit) process.stderr.write(`minisandbox: stopped by the ${r.limit} limit\n`);
        code = r.exitCode;
      } catch (e) {
        fail(e);
      }
      process.exitCode = code;
    });
}
