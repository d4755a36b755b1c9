/** Public API of server/: the HTTP server (native lifecycle API + SWE-ReX runtime) and its provider interface. */
export { startServer, isLoopback, type ServerOptions, type RunningServer } from "./server.js";
export type { WorkspaceProvider, ProvidedWorkspace, ProviderFactory } from "./provider.js";
export { ServerMetrics } from "./metrics.js";
export { loadTokensFile, generateToken, type Principal, type TokenEntry } from "./auth.js";
export { extractZipChecked, DEFAULT_ZIP_LIMITS, type ZipLimits } from "./upload.js";
