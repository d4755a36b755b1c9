/** Public API of SWE-bench-compatible evaluation (pure logic and file formats). See README.md. */
export * from "./types.js";
export * from "./parsers.js";
export * from "./grading.js";
export * from "./diff.js";
export * from "./eval-script.js";
export * from "./report.js";
export * from "./predictions.js";
export { pyJsonDumps, pySorted } from "./pystr.js";
