/**
 * The wire contract (src/wire): one declaration gives the type, the validator (pydantic's answers) and the
 * defaults; the committed JSON schema the Python adapters are checked against is exactly what it generates.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { CONTRACT_FILE } from "../src/wire/contract-json.js";
import { contractJson, model, native, rollout, row, swerex, t, WireValidationError } from "../src/wire/index.js";

const details = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof WireValidationError, String(e));
    return e.detail.map((d) => [d.type, d.loc.join(".")]);
  }
  assert.fail("no validation error");
};

// Regenerate with: npm run build && node dist/src/wire/contract-json.js
test("the committed wire-contract.json is what the contract generates", () => {
  assert.equal(readFileSync(CONTRACT_FILE, "utf8"), contractJson());
});

test("defaults are filled from the declaration, fresh for each request; discriminators default", () => {
  const a = swerex.Action.parse({ command: "ls" });
  assert.deepEqual(a, {
    command: "ls",
    session: "default",
    timeout: null,
    is_interactive_command: false,
    is_interactive_quit: false,
    check: "raise",
    error_msg: "",
    expect: [],
    action_type: "bash",
  });
  const b = swerex.Action.parse({ command: "ls" });
  assert.notEqual((a as { expect: string[] }).expect, (b as { expect: string[] }).expect, "no shared default list");
  assert.equal(swerex.Action.parse({ action_type: "bash_interrupt" }).action_type, "bash_interrupt");
  const schema = swerex.BashInterruptAction.jsonSchema() as { properties: Record<string, { default?: unknown }> };
  assert.equal(schema.properties.timeout!.default, 0.2, "the JSON schema carries the same defaults");
});

test("validation answers as pydantic does, naming every field", () => {
  assert.deepEqual(
    details(() => swerex.Command.parse({ command: 5, timeout: "x", env: ["a"] })),
    [
      ["string_type", "body.command.str"],
      ["list_type", "body.command.list[str]"],
      ["float_parsing", "body.timeout"],
      ["dict_type", "body.env"],
    ],
  );
  assert.deepEqual(
    details(() => swerex.Action.parse({ action_type: "zsh" })),
    [["union_tag_invalid", "body"]],
  );
  assert.deepEqual(
    details(() => swerex.Action.parse(undefined)),
    [["missing", "body"]],
  );
  assert.deepEqual(
    details(() => native.CreateSandboxRequest.parse({ limits: { pids: 1.5, cores: 2 }, dir: "/a", env_key: "k" })),
    [
      ["int_from_float", "body.limits.pids"],
      ["extra_forbidden", "body.limits.cores"],
    ],
  );
  assert.deepEqual(
    details(() => native.CreateSandboxRequest.parse({ dir: "/a", env_key: "k" })),
    [["value_error", "body"]],
  );
  assert.deepEqual(native.CreateSandboxRequest.parse(undefined), {}, "an empty create is allowed");
  assert.deepEqual(native.CreateSandboxRequest.parse({ dir: null, network: "yes" }), { network: true });
});

test("camelCase answers for the SDK: declared fields converted, nested models too, maps keep their keys", () => {
  const info = native.SandboxInfo.parse(
    {
      id: "sb-1",
      runtime_url: "http://h/sandboxes/sb-1",
      owner: "alice",
      created_at: "t",
      expires_at: null,
      idle_timeout_seconds: null,
      last_active_at: "t",
      busy: false,
      source: "empty",
      dir: null,
      instance_id: null,
      env_key: null,
      network: false,
      limits: { memory_bytes: 1, pids: null, cpu_seconds: null, disk_bytes: null },
      labels: { instance_id: "x" },
      sessions: [],
      default: false,
      meta: { some_key: 1 },
    },
    ["response"],
  );
  const camel = native.SandboxInfo.toCamel(info);
  assert.equal(camel.runtimeUrl, "http://h/sandboxes/sb-1");
  assert.equal(camel.limits.memoryBytes, 1);
  assert.deepEqual(camel.labels, { instance_id: "x" });
  assert.deepEqual(camel.meta, { some_key: 1 });
});

test("one converter both ways: lists and nullables of models inside models, optional fields", () => {
  const outcome = {
    rollout_id: "g.0",
    group_id: "g",
    instance_id: "a__b-1",
    repetition: 0,
    status: "infra_failure" as const,
    reward: null,
    resolved: false,
    resolution: null,
    fail_to_pass: { passed: 1, total: 2 },
    pass_to_pass: null,
    failure: { kind: "timeout" as const, message: "too slow" },
    mode: "fresh" as const,
    patch: "",
    timings: {
      diff_ms: 1,
      sandbox_ms: 2,
      apply_ms: 3,
      tests_ms: 4,
      grading_ms: 5,
      cleanup_ms: 6,
      total_ms: 7,
      overhead_ms: 8,
    },
  };
  const info = { id: "g.0", group_id: "g", instance_id: "a__b-1", repetition: 0, trajectory_id: "a__b-1@0" };
  const list = rollout.RolloutList.parse({
    rollouts: [
      {
        ...info,
        parent: null,
        sandbox_id: null,
        state: "lost",
        from_pool: false,
        start_ms: 1,
        created_at: "t",
        outcome,
      },
    ],
  });
  const camel = rollout.RolloutList.toCamel(list);
  const first = camel.rollouts[0]!;
  assert.equal(first.trajectoryId, "a__b-1@0");
  assert.equal(first.outcome?.failToPass?.passed, 1, "a nullable model inside an optional model inside a list");
  assert.equal(first.outcome?.passToPass, null);
  assert.equal(first.outcome?.timings.overheadMs, 8);
  assert.equal("failure" in first, false, "an absent optional field stays absent");
  assert.deepEqual(rollout.RolloutList.fromCamel(camel), list, "and back, exactly");
  assert.deepEqual(
    rollout.RolloutList.fromCamel({ ...camel, extra: 1 } as typeof camel),
    list,
    "only what is declared",
  );
});

test("a row keeps its keys and its undeclared fields, nested in a model too", () => {
  const Row = row("Row", { instance_id: t.str(), FAIL_TO_PASS: t.list(t.str()) });
  const Job = model("Job", { env_key: t.str(), instance: Row });
  const job = Job.parse({ env_key: "k", instance: { instance_id: "x", FAIL_TO_PASS: ["t"], image_name: "i" } });
  assert.deepEqual(job.instance, { instance_id: "x", FAIL_TO_PASS: ["t"], image_name: "i" }, "a row keeps its fields");
  assert.deepEqual(Job.toCamel(job), { envKey: "k", instance: job.instance }, "and its keys");
  assert.deepEqual(Job.fromCamel(Job.toCamel(job)), job);
});
