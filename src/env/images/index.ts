/** Public API of images: pull, import, the images a store holds (see README.md). */
export { pullImage, type PullOptions, type PullResult } from "./pull.js";
export {
  fetchImageFromPeers,
  fetchImageHttp,
  type PeerImageOptions,
  type PeerImageResult,
} from "./peer.js";
export { importImage, type ImportOptions, type ImportResult } from "./import.js";
export {
  acquireImageRootfs,
  findStoredImage,
  getImage,
  listStoredImages,
  removeStoredImage,
  type ImageRootfs,
} from "./stored.js";
export { imageRuntime, type ImageRuntime } from "./runtime.js";
export type { ImageEvent, LayerOutcome, StoreImageResult } from "./store-image.js";
export { canonicalReference, formatReference, parseReference, type ImageRef } from "./reference.js";
export { DEFAULT_PLATFORM, formatPlatform, parsePlatform } from "./platform.js";
export {
  httpAllowed,
  loadRegistryConfig,
  registriesFile,
  withMirrorFlags,
  type RegistryConfig,
} from "./registries.js";
export { authFiles, findCredentials, type Credentials } from "./credentials.js";
