/** Public API of the node cache (see README.md). */
export {
  NodeCache,
  type CacheLease,
  type CachedLayer,
  type FetchOptions,
  type PullRecord,
  type MaterializeEvent,
  type NodeCacheEvents,
  type NodeCacheOptions,
} from "./node-cache.js";
export { IoBudget, type IoBudgetOptions } from "./io-budget.js";
