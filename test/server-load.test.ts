/**
 * Load and faults on a real `serve` process (loopback, bounded): a smaller version of the bench's server workload
 * (`npm run bench` runs 128 sandboxes x 100 commands). Every command answered, nothing left behind after deletion,
 * after SIGKILL and restart with 32 live sandboxes, and after clients that vanish mid-upload and mid-command.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { benchServerLoad } from "../bench/src/server-load.js";

const NOTHING = { processes: 0, mounts: 0, scratchDirs: 0, cgroups: 0, uploadScratch: 0 };

test("16 clients x 25 commands with 0 errors; SIGKILL with 32 live sandboxes, restart: nothing left", async (t) => {
  const r = await benchServerLoad({ sandboxes: 16, commandsPerSandbox: 25, killWithLive: 32 });
  t.diagnostic(
    `commands p50 ${r.command.p50Ms} ms p99 ${r.command.p99Ms} ms, ${r.commandsPerSecond}/s; ` +
      `server RSS ${r.serverRssBytes.start >> 20} -> peak ${r.serverRssBytes.peak >> 20} MiB`,
  );
  assert.deepEqual(r.errorSamples, []);
  assert.equal(r.errors, 0);
  assert.equal(r.command.n, 16 * 25);
  assert.deepEqual(r.leftoversAfterLoad, NOTHING);
  assert.equal(r.kill.reapedAtRestart, 32, "the restarted server reaped every sandbox of the killed one");
  assert.deepEqual(r.kill.leftoversAfterRestart, NOTHING);
  assert.deepEqual(r.disconnects.leftovers, NOTHING);
});
