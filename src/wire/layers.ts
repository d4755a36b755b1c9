/**
 * The native API's part for many nodes: layers moving between servers (store listing, manifests, objects, packs,
 * prefetch), the peers a server may fetch from, and one job of a run planned elsewhere (prepare an environment,
 * evaluate an instance) with its files returned.
 */
import { model, type Out } from "./model.js";
import { TaskInstance } from "./plan.js";
import { t } from "./types.js";

/** A peer's server to fetch a layer from; `manifest_sha256` is what that peer's manifest must hash to. */
export const PeerSource = model(
  "PeerSource",
  { url: t.str(), token: t.str().optional(), manifest_sha256: t.str().optional() },
  { extra: "forbid", objectError: "dict" },
);

export const StoreLayer = model("StoreLayer", {
  key: t.str(),
  manifest_sha256: t.str(),
  /** Also materialized in this node's cache (else only in its store). */
  materialized: t.bool(),
});
/** An image this node's store holds, by each of its names (canonical references), and its root filesystem's layer. */
export const StoreImage = model("StoreImage", { name: t.str(), rootfs: t.str() });
export const StoreLayers = model("StoreLayers", {
  layers: t.list(StoreLayer),
  /** Absent from older servers. */
  images: t.list(StoreImage).optional(),
});

export const ObjectsRequest = model("ObjectsRequest", { ids: t.list(t.str(), 1) }, { extra: "forbid" });

export const FetchLayerRequest = model(
  "FetchLayerRequest",
  { sources: t.list(PeerSource).default([]) },
  { extra: "forbid", objectError: "dict", absentBody: "empty" },
);

export const FetchLayerResponse = model("FetchLayerResponse", {
  key: t.str(),
  /** False when this node had the layer already. */
  fetched: t.bool(),
  /** The peer's origin or the remote directory it came from. */
  source: t.str().nullable(),
  objects_fetched: t.int(),
  bytes_fetched: t.int(),
  ms: t.float(),
});

/** An image to take from peers (its name: a reference as users type it; stored under its canonical form). */
export const FetchImageRequest = model(
  "FetchImageRequest",
  { name: t.str(), sources: t.list(PeerSource).default([]) },
  { extra: "forbid", objectError: "dict" },
);

export const FetchImageResponse = model("FetchImageResponse", {
  /** The canonical reference it is stored under. */
  name: t.str(),
  /** The image id (its config's digest). */
  id: t.str(),
  /** Its root filesystem's layer key. */
  rootfs: t.str(),
  /** False when this node had the image already. */
  fetched: t.bool(),
  /** The peer's origin it came from. */
  source: t.str().nullable(),
  /** Diff records of layers this node lacked (a later pull of an image sharing them skips them). */
  diffs_fetched: t.int(),
  objects_fetched: t.int(),
  bytes_fetched: t.int(),
  ms: t.float(),
});

/**
 * What a node's store keeps of an image (`GET /store/images/record?name=`): its record (by id: its config's
 * digest; what a fetching node checks against the config and manifest it takes next) and its names here.
 */
export const StoreImageRecord = model("StoreImageRecord", { record: t.dict(t.any()), refs: t.list(t.str()) });

export const PeersRequest = model("PeersRequest", { urls: t.list(t.str()) }, { extra: "forbid", objectError: "dict" });
export const PeersResponse = model("PeersResponse", {
  /** Registered peers (origins). */
  peers: t.list(t.str()),
  /** Hosts and networks allowed at start (`serve --peer-allow`). */
  allow: t.list(t.str()),
});

export const PrepareRequest = model(
  "PrepareRequest",
  {
    instance: TaskInstance,
    /** The image the row runs on (a plan's `image`): present, taken from a peer, else pulled. */
    image: t.str().optional(),
    sources: t.list(PeerSource).default([]),
    build: t.bool().default(true),
  },
  { extra: "forbid", objectError: "dict" },
);
export const PrepareResponse = model("PrepareResponse", {
  instance_id: t.str(),
  /** The layer's key; for an image, its root filesystem's. */
  env_key: t.str().nullable(),
  /** `pulled`: an image, from its registry. */
  status: t.literal("present", "fetched", "built", "pulled", "failed"),
  ms: t.float(),
  error: t.str().nullable(),
  /** sha256 of the layer's manifest on this node (what a peer fetching it from here checks). */
  manifest_sha256: t.str().nullable(),
});

export const EvaluationRequest = model(
  "EvaluationRequest",
  {
    instance: TaskInstance,
    /** Evaluated on this image (a plan's `image`), made present first as `POST /environments` does. */
    image: t.str().optional(),
    model_patch: t.str(),
    model_name_or_path: t.str(),
    timeout_seconds: t.float().gt(0).optional(),
    labels: t.dict(t.str()).optional(),
    sources: t.list(PeerSource).default([]),
    build: t.bool().default(true),
  },
  { extra: "forbid", objectError: "dict" },
);
export const EvaluationResponse = model("EvaluationResponse", {
  instance_id: t.str(),
  env_key: t.str().nullable(),
  status: t.literal("resolved", "unresolved", "error"),
  resolution: t.str().nullable(),
  /** `{kind, message}` when the instance has no grade. */
  error: t.dict(t.str()).nullable(),
  /** How the environment got to this node: present, fetched or built. */
  layer: t.str().nullable(),
  /** The harness's files (and timings.json, integrity.json), base64: written as they are into the run's instance
   * directory. */
  files: t.dict(t.str()),
  warnings: t.list(t.str()),
  /** sha256 of the layer's manifest on this node. */
  manifest_sha256: t.str().nullable(),
});

export const DeleteSandboxesResponse = model("DeleteSandboxesResponse", { deleted: t.list(t.str()) });

export type PeerSource = Out<typeof PeerSource.shape>;
export type FetchImageResponse = Out<typeof FetchImageResponse.shape>;
export type EvaluationRequest = Out<typeof EvaluationRequest.shape>;
export type EvaluationResponse = Out<typeof EvaluationResponse.shape>;
export type PrepareRequest = Out<typeof PrepareRequest.shape>;
export type PrepareResponse = Out<typeof PrepareResponse.shape>;

export const LAYER_MODELS = {
  PeerSource,
  StoreLayer,
  StoreImage,
  StoreLayers,
  ObjectsRequest,
  FetchLayerRequest,
  FetchLayerResponse,
  FetchImageRequest,
  FetchImageResponse,
  StoreImageRecord,
  PeersRequest,
  PeersResponse,
  PrepareRequest,
  PrepareResponse,
  EvaluationRequest,
  EvaluationResponse,
  DeleteSandboxesResponse,
} as const;
