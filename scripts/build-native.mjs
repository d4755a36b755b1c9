// Compiles native/msb-helper.c and native/spawner.c into dist/native/msb-helper: static (it also runs inside
// sandboxes, as their pid 1), linked with libseccomp. Two passes: the first binary exports the seccomp profile as BPF,
// the second embeds it (loading a compiled filter costs microseconds per command; building it costs milliseconds).
// Sandboxes cannot start without this helper: it does the security-critical steps.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const root = join(dirname(new URL(import.meta.url).pathname), "..");
const native = join(root, "native");
const outDir = join(root, "dist", "native");
const out = join(outDir, "msb-helper");
const newest = Math.max(...readdirSync(native).map((f) => statSync(join(native, f)).mtimeMs));
if (existsSync(out) && statSync(out).mtimeMs >= newest) process.exit(0);
mkdirSync(outDir, { recursive: true });
const cc = process.env.CC || "cc";
const flags = ["-O2", "-Wall", "-Wextra", "-Werror", "-static"];

function compile(target, extra) {
  const args = [...flags, ...extra, "-o", target, join(native, "msb-helper.c"), join(native, "spawner.c"), "-lseccomp"];
  const r = spawnSync(cc, args, { stdio: "inherit" });
  if (r.status === 0) return;
  console.error(`error: could not build ${target} (${cc} ${args.join(" ")}).`);
  console.error("It needs a C compiler, static C library files and libseccomp (Debian: gcc libc6-dev libseccomp-dev).");
  process.exit(1);
}

const stage = join(outDir, "msb-helper.stage1");
compile(stage, []);
const bpf = spawnSync(stage, ["export-bpf"], { encoding: "utf8" });
if (bpf.status !== 0) {
  console.error(`error: ${stage} export-bpf failed: ${bpf.stderr}`);
  process.exit(1);
}
const header = join(outDir, "seccomp-bpf.h");
writeFileSync(header, bpf.stdout);
compile(out, [`-DMSB_EMBEDDED_BPF="${header}"`]);
rmSync(stage);
