/** Public API of the content-addressed store (see README.md). */
export { NORMALIZED_MTIME_SEC, processAlive, removeTree, selfIdentity } from "./fsutil.js";
export { lockFile, tryLockFile, type FileLock, type LockOptions } from "./lock.js";
export {
  openStore,
  assertLayerKey,
  isLayerKey,
  manifestPath,
  objectPath,
  OBJECT_ID_RE,
  type Store,
  type ObjectId,
} from "./layout.js";
export {
  hasLayer,
  listLayers,
  readManifest,
  resolveLayerKey,
  summarizeManifest,
  validateManifest,
  type DirEntry,
  type FileEntry,
  type HardlinkEntry,
  type JsonValue,
  type LayerManifest,
  type ManifestEntry,
  type ManifestSummary,
  type SymlinkEntry,
  type TreeManifest,
} from "./manifest.js";
export { decodeName, encodeName, type EncodedName } from "./names.js";
export { ingestLayer, normalizeMtimes, type IngestOptions, type IngestResult } from "./ingest.js";
export { materializeLayer, type MaterializeOptions, type MaterializeResult } from "./materialize.js";
export { exportPack, importPack, type ExportResult, type ImportResult } from "./pack.js";
export { pullLayer, type PullOptions, type PullResult } from "./remote.js";
export {
  fetchPackHttp,
  MAX_OBJECTS_PER_REQUEST,
  objectsAnswer,
  pullLayerHttp,
  sourceBase,
  type HttpPullOptions,
  type HttpSource,
} from "./http-remote.js";
export {
  gcStore,
  removeLayer,
  storeStats,
  verifyStore,
  type GcResult,
  type StoreStats,
  type VerifyReport,
} from "./maintenance.js";
