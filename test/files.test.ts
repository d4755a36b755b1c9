import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync, lstatSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { NotFoundError } from "../src/errors.js";
import { tempDir, tempHome } from "./helpers.js";

const home = tempHome();

test("write creates parents; read returns exactly what was written, binary included", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.files.write("/root/a/b/c.txt", "héllo\n");
  assert.equal(await sb.files.read("/root/a/b/c.txt"), "héllo\n");
  const bin = Buffer.from([0, 255, 10, 13, 1]);
  await sb.files.write("/tmp/bin", bin);
  assert.deepEqual(await sb.files.readBytes("/tmp/bin"), bin);
  await assert.rejects(sb.files.read("/root/missing"), NotFoundError);
  await assert.rejects(sb.files.write("/usr/x", "no"), /Read-only/);
});

test("list, exists, remove", async () => {
  await using sb = await Sandbox.create({ home });
  await sb.files.write("/tmp/d/one", "1");
  await sb.files.mkdir("/tmp/d/sub");
  const entries = await sb.files.list("/tmp/d");
  assert.deepEqual(
    entries.map((e) => [e.name, e.type]),
    [
      ["one", "file"],
      ["sub", "dir"],
    ],
  );
  assert.equal(await sb.files.exists("/tmp/d/one"), true);
  await sb.files.remove("/tmp/d");
  assert.equal(await sb.files.exists("/tmp/d"), false);
});

test("upload a file and a directory; download them back", async () => {
  await using sb = await Sandbox.create({ home });
  const src = tempDir();
  mkdirSync(join(src, "tool", "bin"), { recursive: true });
  writeFileSync(join(src, "tool", "bin", "run"), "#!/bin/sh\necho tool\n", { mode: 0o755 });
  writeFileSync(join(src, "single.txt"), "single");
  await sb.files.upload(join(src, "tool"), "/root/tools/tool");
  await sb.files.upload(join(src, "single.txt"), "/root/x/single.txt");
  assert.equal((await sb.exec(["/root/tools/tool/bin/run"])).stdout, "tool\n");
  assert.equal(await sb.files.read("/root/x/single.txt"), "single");
  const out = tempDir();
  await sb.files.download("/root/tools/tool", join(out, "tool"));
  assert.equal(readFileSync(join(out, "tool", "bin", "run"), "utf8"), "#!/bin/sh\necho tool\n");
  await sb.files.download("/root/x/single.txt", join(out, "s.txt"));
  assert.equal(readFileSync(join(out, "s.txt"), "utf8"), "single");
});

test("a symlink planted inside cannot redirect a write or a download to the host", async () => {
  await using sb = await Sandbox.create({ home });
  const victim = join(tempDir(), "victim.txt");
  writeFileSync(victim, "untouched");
  await sb.exec(`ln -s ${victim} /tmp/link && mkdir -p /tmp/dir && ln -s ${victim} /tmp/dir/escape`);
  // Inside, the host path does not exist, so the write lands in the sandbox (or fails) — never on the host.
  await sb.files.write("/tmp/link", "pwned").catch(() => undefined);
  assert.equal(readFileSync(victim, "utf8"), "untouched");
  const out = tempDir();
  await sb.files.download("/tmp/dir", join(out, "dir"));
  assert.ok(lstatSync(join(out, "dir", "escape")).isSymbolicLink());
  assert.equal(readFileSync(victim, "utf8"), "untouched");
  assert.ok(!existsSync(join(out, "victim.txt")));
});
