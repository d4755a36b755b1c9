/** Fastify type augmentations used by the server's routes and hooks. */
import type { Principal } from "./auth.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** "runtime": SWE-ReX routes (errors become 511 swerexceptions); "lifecycle": native API ({"detail"} errors). */
    kind?: "runtime" | "lifecycle";
  }
  interface FastifyRequest {
    /** Who sent the request (set by the auth hook). */
    principal?: Principal;
    /** SHA-256 of the raw body (set by the body parser; empty bodies hash as ""). */
    bodyDigest?: string;
    /** Set while a request carrying X-Request-ID runs, so its response can be stored for replay. */
    replayKey?: string;
  }
}
