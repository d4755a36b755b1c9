import { test } from "node:test";
import assert from "node:assert/strict";
import { InvalidInputError } from "../src/errors.js";
import { validateManifest } from "../src/env/store/index.js";

const OBJ = "a".repeat(64);
const b64 = (s: string | Buffer): { b64: string } => ({ b64: Buffer.from(s).toString("base64") });

function manifest(entries: unknown[]): unknown {
  return {
    format: 1,
    key: "names-test",
    mtime: { policy: "fixed", epochSec: 946684800 },
    trees: { testbed: { mode: 0o755, entries } },
  };
}

const dir = (path: unknown) => ({ path, type: "dir", mode: 0o755 });
const file = (path: unknown) => ({ path, type: "file", mode: 0o644, object: OBJ, size: 1 });

test("a path is the same path as text and as b64: duplicates, parents and hard links by bytes", () => {
  const refused = (entries: unknown[], why: RegExp) =>
    assert.throws(
      () => validateManifest(manifest(entries)),
      (e) => e instanceof InvalidInputError && why.test(e.message),
    );
  refused([dir("a"), dir(b64("a"))], /duplicate path/);
  refused([file("é"), file(b64("é"))], /duplicate path/);
  // A lone surrogate is written as U+FFFD: the same bytes as the character itself.
  refused([file("x\ud800"), file("x\ufffd")], /duplicate path/);
  refused([file("a"), file("a/b")], /parent is not a directory/);
  refused([file(b64("..")), file("x")], /'\.\.' path component/);
  refused([file("a//b")], /empty path component/);
  refused([file("/etc/passwd")], /absolute path/);
  refused([file("a\0b")], /NUL byte/);
  refused([file("a"), { path: "b", type: "hardlink", target: "c" }], /hard link target/);
  refused([{ path: "l", type: "symlink", target: "" }], /invalid symlink target/);
  const bad = Buffer.from([0x66, 0xff]);
  refused([dir(b64(bad)), dir(b64(bad))], /duplicate path/);
  validateManifest(
    manifest([
      dir(b64("d")),
      file("d/f"),
      { path: b64("d/g"), type: "hardlink", target: "d/f" },
      { path: "d/h", type: "hardlink", target: b64("d/f") },
      dir(b64(bad)),
      file({ b64: Buffer.concat([bad, Buffer.from("/k")]).toString("base64") }),
      dir("😀"),
      file("😀/ü"),
    ]),
  );
});
