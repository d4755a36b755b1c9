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
  removeLayer,
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
export { ingestLayer, normalizeMtimes, type IngestOptions, type IngestResult, type LinkedObject } from "./ingest.js";
export { isObjectInode, linkObject } from "./objects.js";
export { materializeLayer, type MaterializeOptions, type MaterializeResult } from "./materialize.js";
export { exportPack, importPack, type ExportResult, type ImportResult } from "./pack.js";
export { pullLayer, type PullOptions, type PullResult } from "./remote.js";
export {
  fetchObjectsHttp,
  fetchPackHttp,
  MAX_OBJECTS_PER_REQUEST,
  peerRequest,
  objectsAnswer,
  pullLayerHttp,
  sourceBase,
  type HttpPullOptions,
  type HttpSource,
} from "./http-remote.js";
export {
  gcStore,
  storeStats,
  verifyStore,
  type GcResult,
  type StoreStats,
  type VerifyReport,
} from "./maintenance.js";
export {
  canChown,
  configuredStoreIds,
  DEFAULT_STORE_IDS,
  IMAGE_ID_COUNT,
  storeIds,
  STORE_SUBID_USER,
  type StoreIds,
} from "./ids.js";
export { imageFileAttrs, imageObjectId, objectHash, type ImageFileAttrs } from "./layout.js";
export { DIGEST_RE, digestHex, ensureImageDirs, imageDirs, type ImageDirs } from "./image-layout.js";
export {
  cleanPath,
  diffPath,
  hasDiff,
  readDiff,
  unpackError,
  unpackLayer,
  writeDiff,
  type DiffEntry,
  type DiffRecord,
  type UnpackBudget,
  type UnpackResult,
} from "./layer-diff.js";
export { checkDiffRecord, diffObjects } from "./diff-check.js";
export {
  chainId,
  derivedKey,
  flattenImage,
  rootfsManifest,
  isDerivedFrom,
  rootfsKey,
  ROOTFS_TREE,
  type NotApplied,
} from "./flatten.js";
export {
  blobPath,
  findImage,
  imageRoots,
  listImages,
  readImage,
  removeImage,
  writeBlob,
  writeImage,
  type ImageConfig,
  type ImageLayer,
  type ImageListing,
  type ImagePlatform,
  type ImageRecord,
  type RemoveImageResult,
} from "./images.js";
export {
  findStoredLayerImage,
  layerImagesDir,
  storeLayerImage,
  type LayerImageResult,
  type StoredLayerImage,
} from "./layer-image.js";
