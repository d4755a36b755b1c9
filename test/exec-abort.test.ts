/** A command whose caller gives up (an AbortSignal, an HTTP client that disconnects) is killed, whole. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Sandbox } from "../src/sandbox/sandbox.js";
import { type RunningServer, startServer } from "../src/server/index.js";
import { processesMatching, tempHome } from "./helpers.js";

const home = tempHome("msb-abort-");
const TOKEN = "abort-token";
let srv: RunningServer;

before(async () => {
  srv = await startServer({ home, authToken: TOKEN });
});
after(() => srv?.close());

async function gone(marker: string, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (processesMatching(marker).length > 0) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

test("aborting an exec kills the command and everything it started; the result still comes", async () => {
  await using sb = await Sandbox.create({ home });
  const ac = new AbortController();
  const started = Date.now();
  const running = sb.exec("(exec -a msb-abort-child sleep 1000) & exec -a msb-abort-main sleep 1000", {
    signal: ac.signal,
  });
  while (processesMatching("msb-abort-child").length === 0) await new Promise((r) => setTimeout(r, 20));
  ac.abort();
  const r = await running;
  assert.ok(Date.now() - started < 10_000);
  assert.notEqual(r.exitCode, 0);
  assert.ok(await gone("msb-abort-"), processesMatching("msb-abort-").join("\n"));
  assert.equal((await sb.exec(["echo", "still usable"])).stdout, "still usable\n");
});

test("a client that disconnects mid-command leaves no process behind (native exec and SWE-ReX execute)", async () => {
  const headers = { "X-API-Key": TOKEN, "content-type": "application/json" };
  const created = await fetch(`${srv.url}/sandboxes`, { method: "POST", headers, body: "{}" });
  const sb = (await created.json()) as { id: string; runtime_url: string };
  const run = (marker: string): string[] => ["bash", "-c", `exec -a ${marker} sleep 1000`];
  const calls: [string, string, object][] = [
    ["msb-gone-exec", `${srv.url}/sandboxes/${sb.id}/exec`, { command: run("msb-gone-exec") }],
    ["msb-gone-execute", `${sb.runtime_url}/execute`, { command: run("msb-gone-execute") }],
  ];
  for (const [marker, url, body] of calls) {
    const req = fetch(url, { method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.timeout(500) });
    await assert.rejects(req, /TimeoutError|aborted/);
    assert.ok(await gone(marker), `${marker} still running after its client left`);
  }
  await fetch(`${srv.url}/sandboxes/${sb.id}`, { method: "DELETE", headers });
});
