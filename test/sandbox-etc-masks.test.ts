import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmodSync, lstatSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { operatorConfigFiles } from "../src/sandbox/masks.js";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { tempHome } from "./helpers.js";

// Its own file: the first sandbox of a process walks /etc itself, the next ones reuse what it found.
const home = tempHome();

/** What the sandbox must hide: every entry under /etc that others cannot read (a directory: or search), by lstat. */
function unreadableUnder(dir: string): { path: string; dir: boolean }[] {
  const out: { path: string; dir: boolean }[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (!st.isDirectory() && !st.isFile() && !st.isCharacterDevice()) continue;
    const hidden = (st.mode & 0o004) === 0 || (st.isDirectory() && (st.mode & 0o001) === 0);
    if (hidden) out.push({ path, dir: st.isDirectory() });
    else if (st.isDirectory()) out.push(...unreadableUnder(path));
  }
  return out;
}

/** One line per path: a masked file is /dev/null, a masked directory shows nothing. */
function probe(paths: { path: string; dir: boolean }[]): string {
  return paths
    .map((p) => (p.dir ? `echo ${p.path} $(ls -A ${p.path} | wc -l)` : `echo ${p.path} $(stat -c %t,%T ${p.path})`))
    .join("; ");
}

test("every entry of /etc others cannot read is masked, in the first sandbox and in the next", async () => {
  const top = `/etc/msb-masks-${randomBytes(4).toString("hex")}`;
  try {
    // A secret file, a secret directory and a secret nested in a readable directory (walked into).
    mkdirSync(join(top, "open", "locked"), { recursive: true });
    writeFileSync(join(top, "open", "key.pem"), "secret\n", { mode: 0o600 });
    writeFileSync(join(top, "open", "locked", "inner"), "secret\n");
    writeFileSync(join(top, "open", "public.conf"), "public\n", { mode: 0o644 });
    chmodSync(join(top, "open", "locked"), 0o700);
    chmodSync(top, 0o755);
    chmodSync(join(top, "open"), 0o755);
    const secrets = unreadableUnder("/etc");
    const ours = secrets.filter((s) => s.path.startsWith(top)).map((s) => s.path);
    assert.deepEqual(ours.sort(), [join(top, "open", "key.pem"), join(top, "open", "locked")]);
    const expected = secrets.map((s) => `${s.path} ${s.dir ? "0" : "1,3"}`).join("\n");
    for (const round of ["walked by pid 1", "reused"]) {
      await using sb = await Sandbox.create({ home });
      const r = await sb.exec(`${probe(secrets)}; cat ${top}/open/public.conf /etc/passwd | head -1`);
      assert.equal(r.exitCode, 0, `${round}: ${r.stderr}`);
      assert.equal(r.stdout, `${expected}\npublic\n`, round);
    }
  } finally {
    rmSync(top, { recursive: true, force: true });
  }
});

test("pip's site-wide configuration (/etc/pip.conf, XDG_CONFIG_DIRS under /etc) reads empty inside", async () => {
  const top = `/etc/msb-xdg-${randomBytes(4).toString("hex")}`;
  const conf = join(top, "pip", "pip.conf");
  const saved = process.env.XDG_CONFIG_DIRS;
  try {
    mkdirSync(join(top, "pip"), { recursive: true });
    // World-readable, as site-wide configuration is: only the mask keeps its token from an agent.
    writeFileSync(conf, "[global]\nindex-url = https://ops:s3cr3t@pypi.example.invalid/simple\n", { mode: 0o644 });
    process.env.XDG_CONFIG_DIRS = `${top}:/etc/xdg`;
    const masked = operatorConfigFiles().map((m) => m.path);
    assert.ok(masked.includes(conf), JSON.stringify(masked));
    await using sb = await Sandbox.create({ home });
    const r = await sb.exec(`${masked.map((f) => `echo ${f} $(stat -c %t,%T ${f}) $(wc -c < ${f})`).join("; ")}`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, masked.map((f) => `${f} 1,3 0\n`).join(""), "each one /dev/null");
    assert.doesNotMatch((await sb.exec(`grep -rs s3cr3t ${top} /etc/pip.conf /etc/xdg; true`)).stdout, /s3cr3t/);
  } finally {
    if (saved === undefined) delete process.env.XDG_CONFIG_DIRS;
    else process.env.XDG_CONFIG_DIRS = saved;
    rmSync(top, { recursive: true, force: true });
  }
});
