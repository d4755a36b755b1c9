/**
 * The wire contract (src/wire): one declaration gives the type, the validator (pydantic's answers) and the
 * defaults; the committed JSON schema the Python adapters are checked against is exactly what it generates.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { CONTRACT_FILE } from "../src/wire/contract-json.js";
import { contractJson, native, swerex, WireValidationError } from "../src/wire/index.js";

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
