/**
 * Declare a wire model once: its TypeScript type, its validator and its defaults come from one declaration (as a
 * pydantic model is all three). Validation answers like pydantic 2 / FastAPI (`type`, `loc`, `msg`, `input`, `ctx`),
 * lax where pydantic is lax (numeric strings, "yes"/"no"); `jsonSchema()` describes the same model for other
 * languages. No dependencies.
 */
import { RequestValidationError } from "../errors.js";

export type Loc = (string | number)[];

export interface ValidationDetail {
  type: string;
  loc: Loc;
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

/** A request (or response) that does not match its model: HTTP 422 with pydantic's details. */
export class WireValidationError extends RequestValidationError<ValidationDetail> {
  constructor(override readonly detail: ValidationDetail[]) {
    super(detail, `request validation failed: ${detail.map((d) => d.loc.join(".")).join(", ")}`);
  }
}

export type JsonSchema = Record<string, unknown>;

/** Returned by `read` when the value had errors (they are in `errors`). */
export const INVALID: unique symbol = Symbol("invalid");

/**
 * A value type: reads (validates and coerces) a JSON value, describes itself as JSON schema, and converts a value to
 * its camelCase form `C` and back (the TypeScript APIs' shape of the same value: models rename their fields, lists,
 * nullables and maps convert what they hold, everything else is itself).
 */
export abstract class Type<T, C = T> {
  declare readonly _t: T;
  declare readonly _c: C;
  abstract read(v: unknown, loc: Loc, errors: ValidationDetail[]): T | typeof INVALID;
  abstract jsonSchema(): JsonSchema;

  toCamel(v: T): C {
    return v as unknown as C;
  }
  fromCamel(v: C): T {
    return v as unknown as T;
  }

  nullable(): Type<T | null, C | null> {
    return new Nullable(this);
  }
  /** Absent (or null) is allowed and stays absent. */
  optional(): Field<T, "optional", this> {
    return new Field(this, "optional");
  }
  /** Absent means `value` (a fresh copy each time). */
  default(value: T): Field<T, "default", this> {
    return new Field(this, "default", value);
  }
}

export type Mode = "required" | "default" | "optional";

/** A model field: its type and whether it is required, defaulted or optional. */
export class Field<T, M extends Mode, Ty extends Type<T, unknown> = Type<T>> {
  constructor(
    readonly type: Ty,
    readonly mode: M,
    readonly defaultValue?: T,
  ) {}
}

export function fail(errors: ValidationDetail[], d: ValidationDetail): typeof INVALID {
  errors.push(d);
  return INVALID;
}

class Nullable<T, C> extends Type<T | null, C | null> {
  constructor(readonly inner: Type<T, C>) {
    super();
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]): T | null | typeof INVALID {
    return v === null ? null : this.inner.read(v, loc, errors);
  }
  override toCamel(v: T | null): C | null {
    return v === null ? null : this.inner.toCamel(v);
  }
  override fromCamel(v: C | null): T | null {
    return v === null ? null : this.inner.fromCamel(v);
  }
  jsonSchema(): JsonSchema {
    return { anyOf: [this.inner.jsonSchema(), { type: "null" }] };
  }
}
