/** The value types of wire models: each validates as pydantic 2 does (lax mode) and describes itself as JSON schema. */
import { fail, INVALID, type JsonSchema, type Loc, Type, type ValidationDetail } from "./schema.js";

const TRUE = new Set(["1", "on", "t", "true", "y", "yes"]);
const FALSE = new Set(["0", "off", "f", "false", "n", "no"]);

export class Str extends Type<string> {
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    return typeof v === "string"
      ? v
      : fail(errors, { type: "string_type", loc, msg: "Input should be a valid string", input: v });
  }
  jsonSchema(): JsonSchema {
    return { type: "string" };
  }
}

function quoteList(values: readonly string[]): string {
  const q = values.map((s) => `'${s}'`);
  return q.length <= 1 ? q.join("") : `${q.slice(0, -1).join(", ")} or ${q[q.length - 1]}`;
}

export class Literal<L extends string> extends Type<L> {
  constructor(readonly values: readonly L[]) {
    super();
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    if (typeof v === "string" && (this.values as readonly string[]).includes(v)) return v as L;
    const expected = quoteList(this.values);
    return fail(errors, {
      type: "literal_error",
      loc,
      msg: `Input should be ${expected}`,
      input: v,
      ctx: { expected },
    });
  }
  jsonSchema(): JsonSchema {
    return this.values.length === 1
      ? { const: this.values[0], type: "string" }
      : { enum: [...this.values], type: "string" };
  }
}

export class Bool extends Type<boolean> {
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    if (typeof v === "boolean") return v;
    if (v === 0 || v === 1) return v === 1;
    const s = typeof v === "string" ? v.trim().toLowerCase() : undefined;
    if (s !== undefined && TRUE.has(s)) return true;
    if (s !== undefined && FALSE.has(s)) return false;
    if (typeof v === "string" || typeof v === "number")
      return fail(errors, {
        type: "bool_parsing",
        loc,
        msg: "Input should be a valid boolean, unable to interpret input",
        input: v,
      });
    return fail(errors, { type: "bool_type", loc, msg: "Input should be a valid boolean", input: v });
  }
  jsonSchema(): JsonSchema {
    return { type: "boolean" };
  }
}

export interface Bounds {
  gt?: number;
  le?: number;
}

/** Numbers: `float` (lax: numeric strings) or `int` (no fractional part), with optional bounds. */
export class Num extends Type<number> {
  constructor(
    readonly integer: boolean,
    readonly bounds: Bounds = {},
  ) {
    super();
  }
  gt(n: number): Num {
    return new Num(this.integer, { ...this.bounds, gt: n });
  }
  le(n: number): Num {
    return new Num(this.integer, { ...this.bounds, le: n });
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    const n = this.integer ? readInt(v, loc, errors) : readFloat(v, loc, errors);
    if (n === INVALID) return n;
    const { gt, le } = this.bounds;
    if (gt !== undefined && !(n > gt))
      return fail(errors, {
        type: "greater_than",
        loc,
        msg: `Input should be greater than ${gt}`,
        input: n,
        ctx: { gt },
      });
    if (le !== undefined && !(n <= le))
      return fail(errors, {
        type: "less_than_equal",
        loc,
        msg: `Input should be less than or equal to ${le}`,
        input: n,
        ctx: { le },
      });
    return n;
  }
  jsonSchema(): JsonSchema {
    const s: JsonSchema = { type: this.integer ? "integer" : "number" };
    if (this.bounds.gt !== undefined) s.exclusiveMinimum = this.bounds.gt;
    if (this.bounds.le !== undefined) s.maximum = this.bounds.le;
    return s;
  }
}

function readFloat(v: unknown, loc: Loc, errors: ValidationDetail[]): number | typeof INVALID {
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (typeof v === "string") {
    const n = Number(v.trim());
    if (v.trim() !== "" && Number.isFinite(n)) return n;
    return fail(errors, {
      type: "float_parsing",
      loc,
      msg: "Input should be a valid number, unable to parse string as a number",
      input: v,
    });
  }
  return fail(errors, { type: "float_type", loc, msg: "Input should be a valid number", input: v });
}

function readInt(v: unknown, loc: Loc, errors: ValidationDetail[]): number | typeof INVALID {
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "number")
    return fail(errors, {
      type: "int_from_float",
      loc,
      msg: "Input should be a valid integer, got a number with a fractional part",
      input: v,
    });
  if (typeof v === "string" && /^\s*[+-]?\d+\s*$/.test(v)) return Number(v);
  if (typeof v === "string")
    return fail(errors, {
      type: "int_parsing",
      loc,
      msg: "Input should be a valid integer, unable to parse string as an integer",
      input: v,
    });
  return fail(errors, { type: "int_type", loc, msg: "Input should be a valid integer", input: v });
}

export class List<T, C = T> extends Type<T[], C[]> {
  constructor(
    readonly item: Type<T, C>,
    readonly minLength = 0,
  ) {
    super();
  }
  override toCamel(v: T[]): C[] {
    return v.map((x) => this.item.toCamel(x));
  }
  override fromCamel(v: C[]): T[] {
    return v.map((x) => this.item.fromCamel(x));
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    if (!Array.isArray(v))
      return fail(errors, { type: "list_type", loc, msg: "Input should be a valid list", input: v });
    const before = errors.length;
    const out = v.map((x, i) => this.item.read(x, [...loc, i], errors));
    if (errors.length > before) return INVALID;
    if (out.length < this.minLength)
      return fail(errors, {
        type: "too_short",
        loc,
        msg: `List should have at least ${this.minLength} item after validation, not ${out.length}`,
        input: v,
      });
    return out as T[];
  }
  jsonSchema(): JsonSchema {
    return { type: "array", items: this.item.jsonSchema(), ...(this.minLength ? { minItems: this.minLength } : {}) };
  }
}

/** A map (labels, env): its keys are data and stay as they are; its values convert. */
export class Dict<T, C = T> extends Type<Record<string, T>, Record<string, C>> {
  constructor(readonly value: Type<T, C>) {
    super();
  }
  override toCamel(v: Record<string, T>): Record<string, C> {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.value.toCamel(x)]));
  }
  override fromCamel(v: Record<string, C>): Record<string, T> {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.value.fromCamel(x)]));
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    if (typeof v !== "object" || v === null || Array.isArray(v))
      return fail(errors, { type: "dict_type", loc, msg: "Input should be a valid dictionary", input: v });
    const before = errors.length;
    const out: Record<string, T> = {};
    for (const [k, x] of Object.entries(v)) out[k] = this.value.read(x, [...loc, k], errors) as T;
    return errors.length > before ? INVALID : out;
  }
  jsonSchema(): JsonSchema {
    return { type: "object", additionalProperties: this.value.jsonSchema() };
  }
}

/** `str | list[str]`, with pydantic's union error locations (`command.str`, `command.list[str]`). */
export class StrOrList extends Type<string | string[]> {
  read(v: unknown, loc: Loc, errors: ValidationDetail[]) {
    if (typeof v === "string") return v;
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
    errors.push({ type: "string_type", loc: [...loc, "str"], msg: "Input should be a valid string", input: v });
    if (!Array.isArray(v))
      errors.push({ type: "list_type", loc: [...loc, "list[str]"], msg: "Input should be a valid list", input: v });
    else
      for (const [i, x] of v.entries())
        if (typeof x !== "string")
          errors.push({
            type: "string_type",
            loc: [...loc, "list[str]", i],
            msg: "Input should be a valid string",
            input: x,
          });
    return INVALID;
  }
  jsonSchema(): JsonSchema {
    return { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }] };
  }
}

/** Any JSON value, passed through (provider results, metadata). */
export class Anything extends Type<unknown> {
  read(v: unknown) {
    return v;
  }
  jsonSchema(): JsonSchema {
    return {};
  }
}

export const t = {
  str: (): Type<string> => new Str(),
  literal: <const L extends string>(...values: L[]): Type<L> => new Literal(values),
  bool: (): Type<boolean> => new Bool(),
  float: (): Num => new Num(false),
  int: (): Num => new Num(true),
  list: <T, C = T>(item: Type<T, C>, minLength = 0): Type<T[], C[]> => new List(item, minLength),
  dict: <T, C = T>(value: Type<T, C>): Type<Record<string, T>, Record<string, C>> => new Dict(value),
  strOrList: (): Type<string | string[]> => new StrOrList(),
  any: (): Type<unknown> => new Anything(),
};
