/**
 * Models (objects of fields) and tagged unions of models. A model is itself a `Type`, so models nest. Its output
 * type, input type and camelCase type are derived from the declaration.
 */
import {
  Field,
  fail,
  INVALID,
  type JsonSchema,
  type Loc,
  type Mode,
  Type,
  type ValidationDetail,
  WireValidationError,
} from "./schema.js";

// biome-ignore lint/suspicious/noExplicitAny: a shape holds fields of any type
export type Shape = Record<string, Type<any, any> | Field<any, Mode, any>>;

// biome-ignore lint/suspicious/noExplicitAny: matching any field
type TypeOf<V> = V extends Field<infer T, Mode, any> ? T : V extends Type<infer T, unknown> ? T : never;
// biome-ignore lint/suspicious/noExplicitAny: matching any field
type ModeOf<V> = V extends Field<any, infer M, any> ? M : "required";
// biome-ignore lint/suspicious/noExplicitAny: matching any field
type InnerOf<V> = V extends Field<any, Mode, infer Ty> ? Ty : V;
type CamelTypeOf<V> = InnerOf<V> extends Type<unknown, infer C> ? C : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** What `parse` returns: defaulted fields present, optional ones possibly absent. */
export type Out<S extends Shape> = Simplify<
  { [K in keyof S as ModeOf<S[K]> extends "optional" ? never : K]: TypeOf<S[K]> } & {
    [K in keyof S as ModeOf<S[K]> extends "optional" ? K : never]?: TypeOf<S[K]>;
  }
>;

/** What a sender must give: required fields; the rest may be left out. */
export type In<S extends Shape> = Simplify<
  { [K in keyof S as ModeOf<S[K]> extends "required" ? K : never]: TypeOf<S[K]> } & {
    [K in keyof S as ModeOf<S[K]> extends "required" ? never : K]?: TypeOf<S[K]>;
  }
>;

export type CamelCase<S extends string> = S extends `${infer H}_${infer R}` ? `${H}${Capitalize<CamelCase<R>>}` : S;

/** `Out<S>` with camelCase keys, and each field's value in its own camelCase form (nested models, lists of them). */
export type Camel<S extends Shape> = Simplify<
  {
    [K in keyof S as ModeOf<S[K]> extends "optional" ? never : CamelCase<K & string>]: CamelTypeOf<S[K]>;
  } & {
    [K in keyof S as ModeOf<S[K]> extends "optional" ? CamelCase<K & string> : never]?: CamelTypeOf<S[K]>;
  }
>;

export interface ModelOptions {
  /** Unknown fields: ignored (pydantic's default), refused (`extra_forbidden`) or kept as they are (`allow`). */
  extra?: "ignore" | "forbid" | "allow";
  /** The error for a body that is not an object: pydantic model (`model_attributes_type`) or dict (`dict_type`). */
  objectError?: "model" | "dict";
  /** A missing body: an error (`missing`), or the same as `{}`. */
  absentBody?: "missing" | "empty";
  /** Cross-field rules, after the fields validated. */
  check?: (value: Record<string, unknown>, raw: Record<string, unknown>, loc: Loc, errors: ValidationDetail[]) => void;
}

const camel = (k: string): string => k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A model: an object of declared fields. `C` is its camelCase form (a `row`'s keys are data: it is itself). */
export class Model<S extends Shape, C = Camel<S>> extends Type<Out<S>, C> {
  constructor(
    readonly name: string,
    readonly shape: S,
    readonly options: ModelOptions = {},
    /** Its keys are data (a dataset row): kept as they are in camelCase form. */
    readonly keepsKeys = false,
  ) {
    super();
  }

  private field(name: string): Field<unknown, Mode> {
    const f = this.shape[name]!;
    return f instanceof Field ? f : new Field(f, "required");
  }

  read(v: unknown, loc: Loc, errors: ValidationDetail[]): Out<S> | typeof INVALID {
    if (!isObject(v)) return fail(errors, this.notObject(v, loc));
    const before = errors.length;
    const out: Record<string, unknown> = {};
    for (const name of Object.keys(this.shape)) {
      const f = this.field(name);
      const given = v[name];
      const absent = !(name in v) || given === undefined || (f.mode === "optional" && given === null);
      if (!absent) out[name] = f.type.read(given, [...loc, name], errors);
      else if (f.mode === "default") out[name] = structuredClone(f.defaultValue);
      else if (f.mode === "required")
        errors.push({ type: "missing", loc: [...loc, name], msg: "Field required", input: v });
    }
    for (const k of Object.keys(v)) {
      if (k in this.shape) continue;
      if (this.options.extra === "allow") out[k] = v[k];
      else if (this.options.extra === "forbid")
        errors.push({ type: "extra_forbidden", loc: [...loc, k], msg: "Extra inputs are not permitted", input: v[k] });
    }
    if (errors.length === before) this.options.check?.(out, v, loc, errors);
    return errors.length > before ? INVALID : (out as Out<S>);
  }

  /** The error for a body that is not an object. */
  notObject(v: unknown, loc: Loc): ValidationDetail {
    if (this.options.objectError === "dict")
      return { type: "dict_type", loc, msg: "Input should be a valid dictionary", input: v ?? null };
    return {
      type: "model_attributes_type",
      loc,
      msg: "Input should be a valid dictionary or object to extract fields from",
      input: v,
    };
  }

  /** Validate a request body (FastAPI's `loc` starts at "body"); throws `WireValidationError`. */
  parse(body: unknown, loc: Loc = ["body"]): Out<S> {
    if (body === undefined || body === null) {
      if (this.options.absentBody === "empty") body = {};
      else if (body === undefined)
        throw new WireValidationError([{ type: "missing", loc, msg: "Field required", input: null }]);
    }
    const errors: ValidationDetail[] = [];
    const out = this.read(body, loc, errors);
    if (out === INVALID) throw new WireValidationError(errors);
    return out;
  }

  /** The same value with camelCase keys, each field's value converted by its type (nested models, lists...). */
  override toCamel(v: Out<S>): C {
    if (this.keepsKeys) return v as C;
    const out: Record<string, unknown> = {};
    const given = v as Record<string, unknown>;
    for (const name of Object.keys(this.shape)) {
      const x = given[name];
      if (x !== undefined) out[camel(name)] = this.field(name).type.toCamel(x);
    }
    return out as C;
  }

  /** The wire form of a camelCase value: the declared fields under their own names (anything else is left out). */
  override fromCamel(v: C): Out<S> {
    if (this.keepsKeys) return v as Out<S>;
    const out: Record<string, unknown> = {};
    const given = v as Record<string, unknown>;
    for (const name of Object.keys(this.shape)) {
      const x = given[camel(name)];
      if (x !== undefined) out[name] = this.field(name).type.fromCamel(x);
    }
    return out as Out<S>;
  }

  jsonSchema(): JsonSchema {
    const properties: Record<string, JsonSchema> = {};
    const required: string[] = [];
    for (const name of Object.keys(this.shape)) {
      const f = this.field(name);
      // An optional field may also be sent as null (the same as leaving it out).
      const schema = f.mode === "optional" ? { anyOf: [f.type.jsonSchema(), { type: "null" }] } : f.type.jsonSchema();
      properties[name] = { ...schema, ...(f.mode === "default" ? { default: f.defaultValue } : {}) };
      if (f.mode === "required") required.push(name);
    }
    return {
      title: this.name,
      type: "object",
      properties,
      required,
      ...(this.options.extra === "forbid" ? { additionalProperties: false } : {}),
    };
  }
}

export function model<S extends Shape>(name: string, shape: S, options?: ModelOptions): Model<S> {
  return new Model(name, shape, options);
}

/**
 * A model whose keys are data, not API names (a dataset row: `instance_id`, `FAIL_TO_PASS`): its camelCase form is
 * itself, and fields it does not declare are kept.
 */
export function row<S extends Shape>(name: string, shape: S, options?: ModelOptions): Model<S, Out<S>> {
  return new Model<S, Out<S>>(name, shape, { extra: "allow", ...options }, true);
}

// biome-ignore lint/suspicious/noExplicitAny: a union of any models
type Models = Record<string, Model<any, any>>;
// biome-ignore lint/suspicious/noExplicitAny: matching any model
type UnionOut<M extends Models> = { [K in keyof M]: M[K] extends Model<infer S, any> ? Out<S> : never }[keyof M];

/** A discriminated union (pydantic `Field(discriminator=...)`): the tag picks the model; absent, it defaults. */
export class Tagged<M extends Models> {
  constructor(
    readonly name: string,
    readonly tag: string,
    readonly models: M,
    readonly defaultTag: keyof M & string,
  ) {}

  parse(body: unknown): UnionOut<M> {
    if (body === undefined)
      throw new WireValidationError([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
    const first = Object.values(this.models)[0]!;
    if (!isObject(body)) throw new WireValidationError([first.notObject(body, ["body"])]);
    const tag = this.tag in body ? body[this.tag] : this.defaultTag;
    if (typeof tag !== "string" || !(tag in this.models)) throw new WireValidationError([this.badTag(body, tag)]);
    return this.models[tag]!.parse(body, ["body", tag]) as UnionOut<M>;
  }

  private badTag(body: unknown, tag: unknown): ValidationDetail {
    const expected = Object.keys(this.models)
      .map((t) => `'${t}'`)
      .join(", ");
    return {
      type: "union_tag_invalid",
      loc: ["body"],
      msg: `Input tag '${String(tag)}' found using '${this.tag}' does not match any of the expected tags: ${expected}`,
      input: body,
      ctx: { discriminator: `'${this.tag}'`, tag: String(tag), expected_tags: expected },
    };
  }

  jsonSchema(): JsonSchema {
    return {
      title: this.name,
      oneOf: Object.values(this.models).map((m) => m.jsonSchema()),
      discriminator: { propertyName: this.tag },
    };
  }
}

// biome-ignore lint/suspicious/noExplicitAny: matching any model
type ShapeOf<M> = M extends Model<infer S, any> ? S : never;
/** The parsed type of a model value (`typeof SandboxInfo` → its fields). */
export type OutOf<M> = Out<ShapeOf<M>>;
export type InOf<M> = In<ShapeOf<M>>;
/** A model's camelCase form: the TypeScript APIs' shape of the same value. */
export type CamelOf<M> = M extends Type<unknown, infer C> ? C : never;
