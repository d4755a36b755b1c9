/** Public API of the node cache (see README.md). */
export {
  NodeCache,
  type AcquireOptions,
  type CacheLease,
  type CachedLayer,
  type FetchOptions,
  type PullRecord,
  type MaterializeEvent,
  type NodeCacheEvents,
  type NodeCacheOptions,
} from "./node-cache.js";
export { chooseLayerForm, type FormChoice, type LayerForm } from "./layer-form.js";
export { IoBudget, type IoBudgetOptions } from "./io-budget.js";
