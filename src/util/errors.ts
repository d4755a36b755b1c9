/** Kept for modules that still import errors from here; the hierarchy lives in `src/errors.ts`. */
export * from "../errors.js";
