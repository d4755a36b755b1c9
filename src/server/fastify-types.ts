/** Fastify type augmentations used by the server's routes and hooks. */
declare module "fastify" {
  interface FastifyContextConfig {
    /** "runtime": SWE-ReX routes (errors become 511 swerexceptions); "lifecycle": native API ({"detail"} errors). */
    kind?: "runtime" | "lifecycle";
  }
  interface FastifyRequest {
    /** Set while a request carrying X-Request-ID runs, so its response can be stored for replay. */
    replayKey?: string;
  }
}
export {};
