/** Public API of wire/: the wire contracts of the server's protocols, shared by the server and the SDK. */
import { NATIVE_MODELS } from "./native.js";
import { PLAN_MODELS } from "./plan.js";
import { ROLLOUT_MODELS } from "./rollout.js";
import { SWEREX_MODELS } from "./swerex.js";

export * as swerex from "./swerex.js";
export * as native from "./native.js";
export * as rollout from "./rollout.js";
export * as plan from "./plan.js";
export {
  model,
  row,
  Model,
  Tagged,
  type Out,
  type In,
  type Camel,
  type Shape,
  type OutOf,
  type InOf,
  type CamelOf,
} from "./model.js";
export { WireValidationError, type ValidationDetail, type JsonSchema } from "./schema.js";
export { t } from "./types.js";
export { readTokenFile, tokenFilePath } from "./token-file.js";

/**
 * Every contract as JSON schema, one entry per model: the file `integrations/python/wire-contract.json`, against which
 * the Python adapters are checked. Regenerate it with `npm run build && node dist/src/wire/contract-json.js`.
 */
export function contractJson(): string {
  const schemas = (models: Record<string, { jsonSchema(): unknown }>) =>
    Object.fromEntries(Object.entries(models).map(([name, m]) => [name, m.jsonSchema()]));
  const doc = {
    swerex: schemas(SWEREX_MODELS),
    native: schemas(NATIVE_MODELS),
    rollout: schemas(ROLLOUT_MODELS),
    plan: schemas(PLAN_MODELS),
  };
  return `${JSON.stringify(doc, null, 2)}\n`;
}
