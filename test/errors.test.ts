/** One error hierarchy: stable codes, an HTTP status per code, and the SWE-ReX class of every session error. */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BuildError,
  CheckpointNotFoundError,
  CommandTimeoutError,
  DiskFullError,
  errorCode,
  ForbiddenError,
  httpStatus,
  ImageInvalidError,
  ImageNotFoundError,
  InvalidInputError,
  LayerUnavailableError,
  LimitError,
  type MinisandboxError,
  NotFoundError,
  NotImplementedError,
  PeerNotAllowedError,
  RegistryDeniedError,
  RegistryError,
  RemoteRuntimeError,
  RequestValidationError,
  SandboxError,
  SandboxLostError,
  SandboxNotFoundError,
  SessionError,
  StoreCorruptError,
  SWEREX_CLASSES,
  TarFormatError,
  TaskInvalidError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  UploadTooLargeError,
} from "../src/index.js";
import { nonZeroExit, sessionExists, sessionMissing } from "../src/session/errors.js";

test("each error's code answers with its HTTP status; unknown codes and foreign errors are 500", () => {
  const cases: [MinisandboxError, string, number][] = [
    [new InvalidInputError("bad", { field: "limits.pids" }), "invalid_input", 400],
    [new RequestValidationError([{ loc: ["body"] }]), "validation_failed", 422],
    [new UnauthorizedError("wrong key"), "unauthorized", 401],
    [new ForbiddenError("no key"), "forbidden", 403],
    [new PeerNotAllowedError("not a peer"), "peer_not_allowed", 403],
    [new NotFoundError("gone"), "not_found", 404],
    [new SandboxNotFoundError("gone"), "sandbox_not_found", 404],
    [new CheckpointNotFoundError("dropped"), "checkpoint_not_found", 404],
    [new SandboxLostError("killed"), "sandbox_lost", 410],
    [new TaskInvalidError("gold fails"), "task_invalid", 422],
    [new UploadTooLargeError("1 GiB max"), "upload_too_large", 413],
    [new LimitError("full", { retryAfterMs: 2000 }), "limit_reached", 429],
    [new SandboxError("broke"), "sandbox_error", 500],
    [new BuildError("install 1", "/log", "tail"), "build_failed", 500],
    [new StoreCorruptError("object missing"), "store_corrupt", 500],
    [new NotImplementedError("no provider"), "not_implemented", 501],
    [new UnavailableError("shutting down"), "unavailable", 503],
    [new LayerUnavailableError("no source had it"), "layer_unavailable", 503],
    [new TimeoutError("slow"), "timeout", 504],
    [new CommandTimeoutError("slow"), "timeout", 504],
    [new ImageInvalidError("digest mismatch"), "image_invalid", 422],
    [new ImageNotFoundError("no such tag"), "image_not_found", 404],
    [new RegistryDeniedError("401"), "registry_denied", 403],
    [new RegistryError("503 after 5 attempts", { retryAfterMs: 1000 }), "registry_error", 502],
    [new DiskFullError("ENOSPC"), "disk_full", 507],
  ];
  for (const [e, code, status] of cases) {
    assert.equal(e.code, code, e.name);
    assert.equal(errorCode(e), code);
    assert.equal(httpStatus(e.code), status, `${e.name} (${code})`);
    assert.equal(e.name, e.constructor.name);
  }
  assert.equal(errorCode(new Error("plain")), "internal_error");
  assert.equal(httpStatus("no_such_code"), 500);
  assert.equal(httpStatus("constructor"), 500, "only the table's own codes");
});

test("subclasses are caught as their family; optional details are kept", () => {
  assert.ok(new SandboxNotFoundError("x") instanceof NotFoundError);
  assert.ok(new CheckpointNotFoundError("x") instanceof NotFoundError);
  assert.ok(new RequestValidationError([]) instanceof InvalidInputError);
  assert.equal(new TarFormatError("truncated archive").code, "invalid_input");
  assert.ok(new UnavailableError("x") instanceof SandboxError);
  assert.ok(new CommandTimeoutError("x") instanceof TimeoutError);
  assert.ok(new RemoteRuntimeError("x", "builtins.OSError") instanceof SandboxError);
  assert.equal(new InvalidInputError("x", { field: "dir" }).field, "dir");
  assert.equal(new InvalidInputError("x").field, undefined);
  assert.equal(new LimitError("x", { retryAfterMs: 5 }).retryAfterMs, 5);
  assert.equal(new UnauthorizedError("x").status, 401);
  assert.equal(new ForbiddenError("x").status, 403);
  assert.deepEqual(new RequestValidationError([{ type: "missing" }]).detail, [{ type: "missing" }]);
});

test("session errors carry the SWE-ReX class of their code and SWE-ReX's message text", () => {
  const e = nonZeroExit("ls 'x'", 2, "out\n", "");
  assert.ok(e instanceof SessionError);
  assert.equal(e.swerexClass, SWEREX_CLASSES.non_zero_exit);
  assert.equal(e.message, `Command "ls 'x'" failed with exit code 2. Here is the output:\n'out\\n'`);
  assert.equal(sessionExists("main").swerexClass, "swerex.exceptions.SessionExistsError");
  assert.equal(httpStatus(sessionExists("main").code), 409);
  const missing = sessionMissing("main");
  assert.equal(missing.code, "not_found");
  assert.equal(missing.swerexClass, "swerex.exceptions.SessionDoesNotExistError");
  assert.equal(new CommandTimeoutError("t").swerexClass, SWEREX_CLASSES.timeout);
});
