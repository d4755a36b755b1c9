/**
 * Output kept in bounded memory however it is chunked: a command's capture, a session's collector and a streamed
 * command's lines, fed a byte (a character) at a time, hold what they keep and nothing per chunk. (The same against
 * a real server, where chunks are what the pipe delivers: server-attacks.test.ts.)
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { CappedBuffer } from "../src/sandbox/output.js";
import { OutputCollector } from "../src/session/stream.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const MiB = 1024 ** 2;

/** Heap and array buffers in use after full collections (array buffers' memory goes back over a few). */
function used(): number {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

test("a command's capture: 16 MiB in one-byte chunks holds its 16 MiB, and its head and tail are right", () => {
  const limit = 16 * MiB;
  const before = used();
  const capture = new CappedBuffer(limit);
  const data = Buffer.alloc(17 * MiB);
  for (let i = 0; i < data.length; i++) data[i] = 97 + (i % 26);
  for (let i = 0; i < data.length; i++) capture.push(data.subarray(i, i + 1));
  const held = used() - before - data.length;
  // The old capture kept one Buffer per chunk (a few hundred bytes each): gigabytes here.
  assert.ok(held < limit * 1.6, `the capture holds ${(held / MiB).toFixed(0)} MiB for ${limit / MiB} MiB kept`);
  const out = capture.toBuffer();
  assert.equal(capture.truncated, true);
  assert.ok(out.subarray(0, limit / 2).equals(data.subarray(0, limit / 2)), "head");
  assert.ok(out.subarray(out.length - limit / 2).equals(data.subarray(data.length - limit / 2)), "tail");
  assert.match(out.toString("latin1"), /\[\.\.\. minisandbox: 1048576 bytes of output omitted/);
});

test("a session's collector: 4 MiB in one-character pieces holds about its limit", () => {
  const limit = 1024 * 1024;
  const before = used();
  const c = new OutputCollector(/\x1eTOKP(\d+):(\d+)\x1e/g, "\x1eTOKS\x1e", limit);
  const piece = "abcdefghijklmnopqrstuvwxyz";
  for (let i = 0; i < 4 * MiB; i++) for (const _ of c.feed(piece[i % 26]!)) assert.fail("no prompt in the output");
  const held = used() - before;
  assert.ok(held < 16 * MiB, `the collector holds ${(held / MiB).toFixed(1)} MiB for a ${limit}-character limit`);
  const text = c.text();
  assert.ok(text.startsWith("abcdefghij"));
  assert.match(text, /\[\.\.\. minisandbox: 3145728 characters of output omitted \(limit 1048576\) \.\.\.\]/);
  assert.equal(c.recent.length, 64 * 1024);
});
