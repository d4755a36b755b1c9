import type { Command } from "commander";
import type { DoctorCheck } from "../sandbox/doctor.js";
import { fail } from "./common.js";

export function registerDoctorCommand(
  program: Command,
  getHome: () => string,
  extra?: () => Promise<DoctorCheck[]>,
): void {
  program
    .command("doctor")
    .description("check bubblewrap, namespaces, overlayfs, cgroups and toolchains; say what to fix")
    .option("--json", "machine-readable output")
    .action(async (o: { json?: boolean }) => {
      try {
        const { runDoctor } = await import("../sandbox/doctor.js");
        const report = await runDoctor(getHome(), extra);
        if (o.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
        else {
          const mark = { ok: "ok  ", warn: "WARN", fail: "FAIL" } as const;
          for (const c of report.checks) {
            process.stdout.write(`${mark[c.status]}  ${c.name.padEnd(16)} ${c.detail}\n`);
            if (c.fix && c.status !== "ok") process.stdout.write(`      ${"".padEnd(16)} fix: ${c.fix}\n`);
          }
          process.stdout.write(
            report.ok ? "\nminisandbox is ready.\n" : "\nminisandbox cannot run here yet: fix the FAIL lines above.\n",
          );
        }
        process.exitCode = report.ok ? 0 : 1;
      } catch (e) {
        fail(e);
      }
    });
}
