// minisandbox is ESM only. This file answers `require("minisandbox")` with how to load it instead of Node's generic
// ERR_REQUIRE_ESM.
const message =
  'minisandbox is an ES module (ESM only) and cannot be loaded with require(): use `import { Sandbox } from "minisandbox"`, ' +
  'or from CommonJS `const { Sandbox } = await import("minisandbox")`';
throw Object.assign(new Error(message), { code: "ERR_REQUIRE_ESM" });
