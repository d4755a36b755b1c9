process.env.PIP_RETRIES ??= "0";
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { makeFixtureDataset } from "../src/fixtures/generate.js";
import { prepareInstances } from "../src/env/prepare.js";
import { startServer } from "../src/server/server.js";
import { envProvider } from "../src/server/env-provider.js";
import { tempDir, tempHome } from "./helpers.js";

const home = tempHome("msb-srvenv-");
const fxDir = tempDir("msb-srvenvfx-");

test("serve --dataset: instance sandboxes over HTTP, their diff, and a graded evaluation", async () => {
  const fx = await makeFixtureDataset(fxDir, { instances: 1 });
  const [prep] = await prepareInstances(fx.instances, { home, reposDir: fx.reposDir });
  assert.equal(prep!.status, "built", prep!.error);
  const inst = fx.instances[0]!;
  const server = await startServer({
    home,
    authToken: "tok",
    provider: envProvider({ home, instances: fx.instances, reposDir: fx.reposDir }),
  });
  after(() => server.close());
  const call = async (
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: Record<string, unknown> }> => {
    const r = await fetch(`${server.url}${path}`, {
      method,
      headers: { "X-API-Key": "tok", ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
  };
  const created = await call("POST", "/sandboxes", { instance_id: inst.instance_id });
  assert.equal(created.status, 201, JSON.stringify(created.json));
  const id = created.json["id"] as string;
  const rt = `/sandboxes/${id}`;
  assert.equal((await call("POST", `${rt}/create_session`, {})).status, 200);
  const head = await call("POST", `${rt}/run_in_session`, { command: "git rev-parse HEAD", check: "silent" });
  assert.equal((head.json["output"] as string).trim(), inst.base_commit);
  // The agent applies the gold patch through the runtime, then asks for its diff and its reward.
  assert.equal((await call("POST", `${rt}/write_file`, { path: "/tmp/fix.diff", content: inst.patch })).status, 200);
  const applied = await call("POST", `${rt}/execute`, {
    command: "git apply /tmp/fix.diff",
    shell: true,
    cwd: "/testbed",
  });
  assert.equal(applied.json["exit_code"], 0, JSON.stringify(applied.json));
  const diff = await call("GET", `${rt}/diff`);
  assert.match(diff.json["diff"] as string, /^diff --git/);
  const graded = await call("POST", `${rt}/evaluate`);
  assert.equal(graded.status, 200, JSON.stringify(graded.json));
  const result = graded.json["result"] as Record<string, unknown>;
  assert.equal(result["status"], "FULL", JSON.stringify(result).slice(0, 2000));
  assert.equal(result["reward"], 1);
  const unknown = await call("POST", "/sandboxes", { instance_id: "nope__nope-1" });
  assert.equal(unknown.status, 404);
  assert.equal((await call("DELETE", `/sandboxes/${id}`)).status, 200);
});
