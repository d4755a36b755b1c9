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

/** A value type: reads (validates and coerces) a JSON value, and describes itself as JSON schema. */
export abstract class Type<T> {
  declare readonly _t: T;
  abstract read(v: unknown, loc: Loc, errors: ValidationDetail[]): T | typeof INVALID;
  abstract jsonSchema(): JsonSchema;

  nullable(): Type<T | null> {
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
export class Field<T, M extends Mode, Ty extends Type<T> = Type<T>> {
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

class Nullable<T> extends Type<T | null> {
  constructor(readonly inner: Type<T>) {
    super();
  }
  read(v: unknown, loc: Loc, errors: ValidationDetail[]): T | null | typeof INVALID {
    return v === null ? null : this.inner.read(v, loc, errors);
  }
  jsonSchema(): JsonSchema {
    return { anyOf: [this.inner.jsonSchema(), { type: "null" }] };
  }
}
