/** Public API of tasks/: dataset formats (SWE-bench, SWE-smith) -> normalized instances. */
export type { Instance, LoadDatasetOptions, TaskFormat } from "./types.js";
export { loadDataset, selectInstances } from "./dataset.js";
export { asTaskInstance, normalizeInstance } from "./normalize.js";
export { reversePatch } from "./patch.js";
export { sweSmithSnapshot, type SnapshotId } from "./swesmith.js";
