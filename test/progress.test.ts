/**
 * The progress lines of long jobs (prepare, evaluate, demo): every step said as it starts, and an ETA from the items'
 * own durations, `workers` at a time, with a clock of the test's own (so what is checked is the arithmetic).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { Progress } from "../src/util/progress.js";

function lines(): { out: Writable; text: string[] } {
  const text: string[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      text.push(...chunk.toString().split("\n").filter(Boolean));
      done();
    },
  });
  return { out, text };
}

test("the first ETA counts the builds still running and the workers, not one build after another", () => {
  let t = 0;
  const { out, text } = lines();
  const p = new Progress(3, "prepare", { out, workers: 2, now: () => t });
  p.step("a: toolchain", "a");
  p.step("b: toolchain", "b");
  t = 100_000;
  p.tick("built", "b", "b"); // a has run as long as b took: nearly done; c waits for a worker
  t = 110_000;
  p.tick("built", "a", "a");
  p.step("c: toolchain", "c");
  t = 140_000;
  p.step("c: install 1: python -m pip install pytest", "c");
  assert.deepEqual(text, [
    "[0/3] a: toolchain (ETA ?)",
    "[0/3] b: toolchain (ETA ?)",
    "[1/3] built b (ETA 50s)", // one build of 100 s left, on one of two workers... and a's 0 s
    "[2/3] built a (ETA 1m45s)", // c alone: the mean build, 105 s
    "[2/3] c: toolchain (ETA 1m45s)",
    "[2/3] c: install 1: python -m pip install pytest (ETA 1m15s)", // 30 s of it done
  ]);
});

test("items never begun (cached ones) fall back to the rate so far", () => {
  let t = 0;
  const { out, text } = lines();
  const p = new Progress(4, "evaluate", { out, now: () => t });
  t = 2000;
  p.tick("cached", "x");
  assert.deepEqual(text, ["[1/4] cached x (ETA 6s)"]);
});
