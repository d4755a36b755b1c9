/**
 * Which command the arguments run, read before the parser is set up: only that command is then declared, so running
 * one loads no other command's module. Global options may come first (`--home DIR`); help or the version asked for
 * there, or no command named, declare them all.
 */
export function namedCommand(args: readonly string[], names: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--home")
      i++; // its value is not the command
    else if (!a.startsWith("-")) return names.includes(a) ? a : undefined;
    else if (!a.startsWith("--home=")) return undefined; // help, the version, or a usage error: the whole program
  }
  return undefined;
}
