// Compiles native/msb-helper.c into dist/native/msb-helper (static, so that it also runs inside sandboxes).
// Without a C compiler minisandbox still works: it falls back to a chain of util-linux tools (slower).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";

const root = join(dirname(new URL(import.meta.url).pathname), "..");
const src = join(root, "native", "msb-helper.c");
const out = join(root, "dist", "native", "msb-helper");
if (existsSync(out) && statSync(out).mtimeMs >= statSync(src).mtimeMs) process.exit(0);
mkdirSync(dirname(out), { recursive: true });
const cc = process.env.CC || "cc";
const args = ["-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", out, src];
const r = spawnSync(cc, args, { stdio: "inherit" });
if (r.status !== 0) {
  console.warn(`warning: could not build ${out} (${cc} ${args.join(" ")}); sandboxes will use the slower fallback`);
}
