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
export type Shape = Record<string, Type<any> | Field<any, Mode, any>>;

type TypeOf<V> = V extends Field<infer T, Mode, infer _> ? T : V extends Type<infer T> ? T : never;
// biome-ignore lint/suspicious/noExplicitAny: matching any field
type ModeOf<V> = V extends Field<any, infer M, any> ? M : "required";
// biome-ignore lint/suspicious/noExplicitAny: matching any field
type InnerOf<V> = V extends Field<any, Mode, infer Ty> ? Ty : V;
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
type CamelValue<V, T> = InnerOf<V> extends Model<infer S2> ? Camel<S2> : T;

/** `Out<S>` with camelCase keys (nested models too; maps such as labels keep their keys). */
export type Camel<S extends Shape> = Simplify<
  {
    [K in keyof S as ModeOf<S[K]> extends "optional" ? never : CamelCase<K & string>]: CamelValue<S[K], TypeOf<S[K]>>;
  } & {
    [K in keyof S as ModeOf<S[K]> extends "optional" ? CamelCase<K & string> : never]?: CamelValue<S[K], TypeOf<S[K]>>;
  }
>;

export interface ModelOptions {
  /** Unknown fields: ignored (pydantic's default) or refused (`extra_forbidden`). */
  extra?: "ignore" | "forbid";
  /** The error for a body that is not an object: pydantic model (`model_attributes_type`) or dict (`dict_type`). */
  objectError?: "model" | "dict";
  /** A missing body: an error (`missing`), or the same as `{}`. */
  absentBody?: "missing" | "empty";
  /** Cross-field rules, after the fields validated. */
  check?: (value: Record<string, unknown>, raw: Record<string, unknown>, loc: Loc, errors: ValidationDetail[]) => void;
}

const camel = (k: string): string => k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

export class Model<S extends Shape> extends Type<Out<S>> {
  constructor(
    readonly name: string,
    readonly shape: S,
    readonly options: ModelOptions = {},
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
    if (this.options.extra === "forbid")
      for (const k of Object.keys(v))
        if (!(k in this.shape))
          errors.push({
            type: "extra_forbidden",
            loc: [...loc, k],
            msg: "Extra inputs are not permitted",
            input: v[k],
          });
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

  /** The same value with camelCase keys, nested models included. */
  toCamel(v: Out<S>): Camel<S> {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      const f = k in this.shape ? this.field(k) : undefined;
      out[camel(k)] = f?.type instanceof Model && isObject(x) ? f.type.toCamel(x) : x;
    }
    return out as Camel<S>;
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

// biome-ignore lint/suspicious/noExplicitAny: a union of any models
type Models = Record<string, Model<any>>;
type UnionOut<M extends Models> = { [K in keyof M]: M[K] extends Model<infer S> ? Out<S> : never }[keyof M];

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

type ShapeOf<M> = M extends Model<infer S> ? S : never;
/** The parsed type of a model value (`typeof SandboxInfo` → its fields). */
export type OutOf<M> = Out<ShapeOf<M>>;
export type InOf<M> = In<ShapeOf<M>>;
export type CamelOf<M> = Camel<ShapeOf<M>>;
