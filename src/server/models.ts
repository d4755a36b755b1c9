/**
 * The SWE-ReX request models (pydantic, as of swe-rex 1.4) and a validator that answers like FastAPI: every field
 * defaulted when absent, extra fields ignored, lax coercion where pydantic is lax, and 422 details in pydantic's
 * shape (`type`, `loc`, `msg`, `input`, `ctx`).
 */
import { MinisandboxError } from "../util/errors.js";

export interface ValidationDetail {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

export class RequestValidationError extends MinisandboxError {
  constructor(readonly detail: ValidationDetail[]) {
    super("validation_error", `request validation failed: ${detail.map((d) => d.loc.join(".")).join(", ")}`);
  }
}

type Kind = "str" | "bool" | "float" | "int" | "list_str" | "str_or_list" | "dict_str";

interface Field {
  kind: Kind;
  nullable?: boolean;
  required?: boolean;
  literal?: string[];
  default?: unknown;
}

type Model = Record<string, Field>;

const TRUE = new Set(["1", "on", "t", "true", "y", "yes"]);
const FALSE = new Set(["0", "off", "f", "false", "n", "no"]);

function coerce(field: Field, v: unknown, loc: (string | number)[], errors: ValidationDetail[]): unknown {
  if (v === null && field.nullable) return null;
  const err = (type: string, msg: string, ctx?: Record<string, unknown>): undefined => {
    errors.push({ type, loc, msg, input: v, ...(ctx ? { ctx } : {}) });
    return undefined;
  };
  switch (field.kind) {
    case "str": {
      if (typeof v !== "string") return err("string_type", "Input should be a valid string");
      if (field.literal && !field.literal.includes(v)) {
        const expected = quoteList(field.literal);
        return err("literal_error", `Input should be ${expected}`, { expected });
      }
      return v;
    }
    case "bool": {
      if (typeof v === "boolean") return v;
      if (typeof v === "number" && (v === 0 || v === 1)) return v === 1;
      if (typeof v === "string") {
        const s = v.trim().toLowerCase();
        if (TRUE.has(s)) return true;
        if (FALSE.has(s)) return false;
        return err("bool_parsing", "Input should be a valid boolean, unable to interpret input");
      }
      if (typeof v === "number")
        return err("bool_parsing", "Input should be a valid boolean, unable to interpret input");
      return err("bool_type", "Input should be a valid boolean");
    }
    case "float": {
      if (typeof v === "number" && Number.isFinite(v)) return v;
      if (typeof v === "string") {
        const n = Number(v.trim());
        if (v.trim() !== "" && Number.isFinite(n)) return n;
        return err("float_parsing", "Input should be a valid number, unable to parse string as a number");
      }
      return err("float_type", "Input should be a valid number");
    }
    case "int": {
      if (typeof v === "number") {
        if (Number.isInteger(v)) return v;
        return err("int_from_float", "Input should be a valid integer, got a number with a fractional part");
      }
      if (typeof v === "string") {
        if (/^\s*[+-]?\d+\s*$/.test(v)) return Number(v);
        return err("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
      }
      return err("int_type", "Input should be a valid integer");
    }
    case "list_str": {
      if (!Array.isArray(v)) return err("list_type", "Input should be a valid list");
      const before = errors.length;
      const out = v.map((x, i) => coerce({ kind: "str" }, x, [...loc, i], errors));
      return errors.length > before ? undefined : out;
    }
    case "str_or_list": {
      if (typeof v === "string") return v;
      if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v;
      errors.push({ type: "string_type", loc: [...loc, "str"], msg: "Input should be a valid string", input: v });
      if (!Array.isArray(v))
        errors.push({ type: "list_type", loc: [...loc, "list[str]"], msg: "Input should be a valid list", input: v });
      else
        for (const [i, x] of v.entries()) {
          if (typeof x !== "string")
            errors.push({
              type: "string_type",
              loc: [...loc, "list[str]", i],
              msg: "Input should be a valid string",
              input: x,
            });
        }
      return undefined;
    }
    case "dict_str": {
      if (typeof v !== "object" || v === null || Array.isArray(v))
        return err("dict_type", "Input should be a valid dictionary");
      const before = errors.length;
      const out: Record<string, string> = {};
      for (const [k, x] of Object.entries(v)) out[k] = coerce({ kind: "str" }, x, [...loc, k], errors) as string;
      return errors.length > before ? undefined : out;
    }
  }
}

function quoteList(values: string[]): string {
  const q = values.map((s) => `'${s}'`);
  return q.length <= 1 ? q.join("") : `${q.slice(0, -1).join(", ")} or ${q[q.length - 1]}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function validateModel<T>(body: unknown, model: Model, loc: (string | number)[]): T {
  if (body === undefined)
    throw new RequestValidationError([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
  if (!isObject(body)) {
    throw new RequestValidationError([
      {
        type: "model_attributes_type",
        loc,
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: body,
      },
    ]);
  }
  const errors: ValidationDetail[] = [];
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(model)) {
    if (!(name in body)) {
      if (field.required) errors.push({ type: "missing", loc: [...loc, name], msg: "Field required", input: body });
      else out[name] = structuredClone(field.default);
      continue;
    }
    out[name] = coerce(field, body[name], [...loc, name], errors);
  }
  if (errors.length) throw new RequestValidationError(errors);
  return out as T;
}

/** A discriminated union (pydantic `Field(discriminator=...)`): the tag picks the model; absent, it defaults. */
function validateUnion<T>(body: unknown, tagField: string, models: Record<string, Model>, defaultTag: string): T {
  if (body === undefined)
    throw new RequestValidationError([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
  if (!isObject(body)) {
    throw new RequestValidationError([
      {
        type: "model_attributes_type",
        loc: ["body"],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: body,
      },
    ]);
  }
  const tag = tagField in body ? body[tagField] : defaultTag;
  if (typeof tag !== "string" || !(tag in models)) {
    const expected = Object.keys(models)
      .map((t) => `'${t}'`)
      .join(", ");
    throw new RequestValidationError([
      {
        type: "union_tag_invalid",
        loc: ["body"],
        msg: `Input tag '${String(tag)}' found using '${tagField}' does not match any of the expected tags: ${expected}`,
        input: body,
        ctx: { discriminator: `'${tagField}'`, tag: String(tag), expected_tags: expected },
      },
    ]);
  }
  return validateModel<T>(body, models[tag]!, ["body", tag]);
}

// ---------------------------------------------------------------------------------------------------------------

export interface CreateBashSessionRequest {
  startup_source: string[];
  session: string;
  session_type: "bash";
  startup_timeout: number;
}

export interface BashAction {
  command: string;
  session: string;
  timeout: number | null;
  is_interactive_command: boolean;
  is_interactive_quit: boolean;
  check: "silent" | "raise" | "ignore";
  error_msg: string;
  expect: string[];
  action_type: "bash";
}

export interface BashInterruptAction {
  session: string;
  timeout: number;
  n_retry: number;
  expect: string[];
  action_type: "bash_interrupt";
}

export interface CloseBashSessionRequest {
  session: string;
  session_type: "bash";
}

export interface CommandRequest {
  command: string | string[];
  timeout: number | null;
  shell: boolean;
  check: boolean;
  error_msg: string;
  env: Record<string, string> | null;
  cwd: string | null;
  merge_output_streams: boolean;
}

export interface ReadFileRequest {
  path: string;
  encoding: string | null;
  errors: string | null;
}

export interface WriteFileRequest {
  content: string;
  path: string;
}

const CREATE_BASH: Model = {
  startup_source: { kind: "list_str", default: [] },
  session: { kind: "str", default: "default" },
  session_type: { kind: "str", literal: ["bash"], default: "bash" },
  startup_timeout: { kind: "float", default: 1.0 },
};

const BASH_ACTION: Model = {
  command: { kind: "str", required: true },
  session: { kind: "str", default: "default" },
  timeout: { kind: "float", nullable: true, default: null },
  is_interactive_command: { kind: "bool", default: false },
  is_interactive_quit: { kind: "bool", default: false },
  check: { kind: "str", literal: ["silent", "raise", "ignore"], default: "raise" },
  error_msg: { kind: "str", default: "" },
  expect: { kind: "list_str", default: [] },
  action_type: { kind: "str", literal: ["bash"], default: "bash" },
};

const BASH_INTERRUPT: Model = {
  session: { kind: "str", default: "default" },
  timeout: { kind: "float", default: 0.2 },
  n_retry: { kind: "int", default: 3 },
  expect: { kind: "list_str", default: [] },
  action_type: { kind: "str", literal: ["bash_interrupt"], default: "bash_interrupt" },
};

const CLOSE_BASH: Model = {
  session: { kind: "str", default: "default" },
  session_type: { kind: "str", literal: ["bash"], default: "bash" },
};

const COMMAND: Model = {
  command: { kind: "str_or_list", required: true },
  timeout: { kind: "float", nullable: true, default: null },
  shell: { kind: "bool", default: false },
  check: { kind: "bool", default: false },
  error_msg: { kind: "str", default: "" },
  env: { kind: "dict_str", nullable: true, default: null },
  cwd: { kind: "str", nullable: true, default: null },
  merge_output_streams: { kind: "bool", default: false },
};

const READ_FILE: Model = {
  path: { kind: "str", required: true },
  encoding: { kind: "str", nullable: true, default: null },
  errors: { kind: "str", nullable: true, default: null },
};

const WRITE_FILE: Model = {
  content: { kind: "str", required: true },
  path: { kind: "str", required: true },
};

export const parseCreateSession = (b: unknown): CreateBashSessionRequest =>
  validateUnion(b, "session_type", { bash: CREATE_BASH }, "bash");
export const parseAction = (b: unknown): BashAction | BashInterruptAction =>
  validateUnion(b, "action_type", { bash: BASH_ACTION, bash_interrupt: BASH_INTERRUPT }, "bash");
export const parseCloseSession = (b: unknown): CloseBashSessionRequest =>
  validateUnion(b, "session_type", { bash: CLOSE_BASH }, "bash");
export const parseCommand = (b: unknown): CommandRequest => validateModel(b, COMMAND, ["body"]);
export const parseReadFile = (b: unknown): ReadFileRequest => validateModel(b, READ_FILE, ["body"]);
export const parseWriteFile = (b: unknown): WriteFileRequest => validateModel(b, WRITE_FILE, ["body"]);

/** Multipart form fields of /upload (FastAPI `Form`/`File`). */
export function parseUploadForm(fields: { target_path?: string; unzip?: string; hasFile: boolean }): {
  target_path: string;
  unzip: boolean;
} {
  const errors: ValidationDetail[] = [];
  if (!fields.hasFile) errors.push({ type: "missing", loc: ["body", "file"], msg: "Field required", input: null });
  if (fields.target_path === undefined)
    errors.push({ type: "missing", loc: ["body", "target_path"], msg: "Field required", input: null });
  let unzip = false;
  if (fields.unzip !== undefined) unzip = coerce({ kind: "bool" }, fields.unzip, ["body", "unzip"], errors) as boolean;
  if (errors.length) throw new RequestValidationError(errors);
  return { target_path: fields.target_path!, unzip };
}

// ---------------------------------------------------------------------------------------------------------------
// Native lifecycle API (snake_case JSON, like the rest of the wire).

export interface CreateSandboxRequest {
  dir?: string;
  instance_id?: string;
  env_key?: string;
  network?: boolean;
  limits?: { memory_bytes?: number; pids?: number; cpu_seconds?: number; disk_bytes?: number };
  ttl_seconds?: number;
  idle_timeout_seconds?: number;
  env?: Record<string, string>;
  cwd?: string;
  labels?: Record<string, string>;
}

/** Validate a create request; 422 details name the offending field. */
export function parseCreateSandbox(body: unknown): CreateSandboxRequest {
  if (body === undefined || body === null) return {};
  if (!isObject(body)) {
    throw new RequestValidationError([
      { type: "dict_type", loc: ["body"], msg: "Input should be a valid dictionary", input: body },
    ]);
  }
  const errors: ValidationDetail[] = [];
  const out: CreateSandboxRequest = {};
  const opt = (name: string, field: Field): unknown =>
    body[name] === undefined || body[name] === null ? undefined : coerce(field, body[name], ["body", name], errors);
  out.dir = opt("dir", { kind: "str" }) as string | undefined;
  out.instance_id = opt("instance_id", { kind: "str" }) as string | undefined;
  out.env_key = opt("env_key", { kind: "str" }) as string | undefined;
  out.network = opt("network", { kind: "bool" }) as boolean | undefined;
  out.cwd = opt("cwd", { kind: "str" }) as string | undefined;
  out.env = opt("env", { kind: "dict_str" }) as Record<string, string> | undefined;
  out.labels = opt("labels", { kind: "dict_str" }) as Record<string, string> | undefined;
  for (const name of ["ttl_seconds", "idle_timeout_seconds"] as const) {
    const v = opt(name, { kind: "float" }) as number | undefined;
    if (v !== undefined && !(v > 0))
      errors.push({
        type: "greater_than",
        loc: ["body", name],
        msg: "Input should be greater than 0",
        input: v,
        ctx: { gt: 0 },
      });
    out[name] = v;
  }
  const limits = body.limits;
  if (limits !== undefined && limits !== null) {
    if (!isObject(limits))
      errors.push({
        type: "dict_type",
        loc: ["body", "limits"],
        msg: "Input should be a valid dictionary",
        input: limits,
      });
    else {
      out.limits = {};
      for (const name of ["memory_bytes", "pids", "cpu_seconds", "disk_bytes"] as const) {
        const raw = limits[name];
        if (raw === undefined || raw === null) continue;
        const v = coerce({ kind: "int" }, raw, ["body", "limits", name], errors) as number | undefined;
        if (v !== undefined && !(v > 0))
          errors.push({
            type: "greater_than",
            loc: ["body", "limits", name],
            msg: "Input should be greater than 0",
            input: v,
            ctx: { gt: 0 },
          });
        else if (v !== undefined && v > Number.MAX_SAFE_INTEGER)
          errors.push({
            type: "less_than_equal",
            loc: ["body", "limits", name],
            msg: `Input should be less than or equal to ${Number.MAX_SAFE_INTEGER}`,
            input: v,
            ctx: { le: Number.MAX_SAFE_INTEGER },
          });
        out.limits[name] = v;
      }
      for (const k of Object.keys(limits)) {
        if (!["memory_bytes", "pids", "cpu_seconds", "disk_bytes"].includes(k)) {
          errors.push({
            type: "extra_forbidden",
            loc: ["body", "limits", k],
            msg: "Extra inputs are not permitted",
            input: limits[k],
          });
        }
      }
    }
  }
  const sources = ["dir", "instance_id", "env_key"].filter((k) => body[k] !== undefined && body[k] !== null);
  if (sources.length > 1) {
    errors.push({
      type: "value_error",
      loc: ["body"],
      msg: `Value error, give at most one of dir, instance_id, env_key (got ${sources.join(", ")})`,
      input: body,
    });
  }
  if (errors.length) throw new RequestValidationError(errors);
  return out;
}

export interface NativeExecRequest {
  command: string | string[];
  timeout_ms?: number;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  merge_output?: boolean;
  output_limit_bytes?: number;
}

export function parseNativeExec(body: unknown): NativeExecRequest {
  if (!isObject(body)) {
    throw new RequestValidationError([
      { type: "dict_type", loc: ["body"], msg: "Input should be a valid dictionary", input: body ?? null },
    ]);
  }
  const errors: ValidationDetail[] = [];
  const opt = (name: string, field: Field): unknown =>
    body[name] === undefined || body[name] === null ? undefined : coerce(field, body[name], ["body", name], errors);
  if (body.command === undefined)
    errors.push({ type: "missing", loc: ["body", "command"], msg: "Field required", input: body });
  const out: NativeExecRequest = {
    command: opt("command", { kind: "str_or_list" }) as string | string[],
    timeout_ms: opt("timeout_ms", { kind: "float" }) as number | undefined,
    cwd: opt("cwd", { kind: "str" }) as string | undefined,
    env: opt("env", { kind: "dict_str" }) as Record<string, string> | undefined,
    stdin: opt("stdin", { kind: "str" }) as string | undefined,
    merge_output: opt("merge_output", { kind: "bool" }) as boolean | undefined,
    output_limit_bytes: opt("output_limit_bytes", { kind: "int" }) as number | undefined,
  };
  if (Array.isArray(out.command) && out.command.length === 0) {
    errors.push({
      type: "too_short",
      loc: ["body", "command"],
      msg: "List should have at least 1 item after validation, not 0",
      input: [],
    });
  }
  if (errors.length) throw new RequestValidationError(errors);
  return out;
}
