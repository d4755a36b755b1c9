/**
 * The SWE-ReX remote runtime protocol (swe-rex 1.4, `swerex/runtime/abstract.py`): every request and response model
 * with its fields, types and defaults, declared once. The server validates with these; the SDK sends and reads them.
 */
import { type In, model, type Out, Tagged } from "./model.js";
import { t } from "./types.js";

const session = t.str().default("default");

export const CreateBashSessionRequest = model("CreateBashSessionRequest", {
  startup_source: t.list(t.str()).default([]),
  session,
  session_type: t.literal("bash").default("bash"),
  startup_timeout: t.float().default(1.0),
});

export const BashAction = model("BashAction", {
  command: t.str(),
  session,
  timeout: t.float().nullable().default(null),
  is_interactive_command: t.bool().default(false),
  is_interactive_quit: t.bool().default(false),
  check: t.literal("silent", "raise", "ignore").default("raise"),
  error_msg: t.str().default(""),
  expect: t.list(t.str()).default([]),
  action_type: t.literal("bash").default("bash"),
});

export const BashInterruptAction = model("BashInterruptAction", {
  session,
  timeout: t.float().default(0.2),
  n_retry: t.int().default(3),
  expect: t.list(t.str()).default([]),
  action_type: t.literal("bash_interrupt").default("bash_interrupt"),
});

export const CloseBashSessionRequest = model("CloseBashSessionRequest", {
  session,
  session_type: t.literal("bash").default("bash"),
});

export const Command = model("Command", {
  command: t.strOrList(),
  timeout: t.float().nullable().default(null),
  shell: t.bool().default(false),
  check: t.bool().default(false),
  error_msg: t.str().default(""),
  env: t.dict(t.str()).nullable().default(null),
  cwd: t.str().nullable().default(null),
  merge_output_streams: t.bool().default(false),
});

export const ReadFileRequest = model("ReadFileRequest", {
  path: t.str(),
  encoding: t.str().nullable().default(null),
  errors: t.str().nullable().default(null),
});

export const WriteFileRequest = model("WriteFileRequest", { content: t.str(), path: t.str() });

/** The form fields of `/upload` (multipart; the file itself is the `file` part). */
export const UploadForm = model("UploadForm", { target_path: t.str(), unzip: t.bool().default(false) });

// Discriminated unions: the tag picks the model, and defaults when absent.
export const CreateSessionRequest = new Tagged(
  "CreateSessionRequest",
  "session_type",
  { bash: CreateBashSessionRequest },
  "bash",
);
export const Action = new Tagged(
  "Action",
  "action_type",
  { bash: BashAction, bash_interrupt: BashInterruptAction },
  "bash",
);
export const CloseSessionRequest = new Tagged(
  "CloseSessionRequest",
  "session_type",
  { bash: CloseBashSessionRequest },
  "bash",
);

// Responses.
export const HelloResponse = model("HelloResponse", { message: t.str() });
export const IsAliveResponse = model("IsAliveResponse", { is_alive: t.bool(), message: t.str().default("") });
export const CreateBashSessionResponse = model("CreateBashSessionResponse", {
  output: t.str().default(""),
  session_type: t.literal("bash").default("bash"),
});
export const BashObservation = model("BashObservation", {
  output: t.str().default(""),
  exit_code: t.int().nullable().default(null),
  failure_reason: t.str().default(""),
  expect_string: t.str().default(""),
  session_type: t.literal("bash").default("bash"),
});
export const CloseBashSessionResponse = model("CloseBashSessionResponse", {
  session_type: t.literal("bash").default("bash"),
});
export const CommandResponse = model("CommandResponse", {
  stdout: t.str().default(""),
  stderr: t.str().default(""),
  exit_code: t.int().nullable().default(null),
});
export const ReadFileResponse = model("ReadFileResponse", { content: t.str().default("") });
/** `{}`: write_file, upload, close. */
export const EmptyResponse = model("EmptyResponse", {});

/** A failure other than validation: HTTP 511, re-raised by clients as the class named by `class_path`. */
export const SwerexceptionBody = model("SwerexceptionBody", {
  swerexception: model("ExceptionTransfer", {
    message: t.str(),
    class_path: t.str(),
    traceback: t.str(),
    extra_info: t.dict(t.any()).default({}),
  }),
});

export type CreateBashSessionRequest = Out<typeof CreateBashSessionRequest.shape>;
export type BashAction = Out<typeof BashAction.shape>;
export type BashInterruptAction = Out<typeof BashInterruptAction.shape>;
export type CloseBashSessionRequest = Out<typeof CloseBashSessionRequest.shape>;
export type Command = Out<typeof Command.shape>;
export type CommandIn = In<typeof Command.shape>;
export type ReadFileRequest = Out<typeof ReadFileRequest.shape>;
export type WriteFileRequest = Out<typeof WriteFileRequest.shape>;
export type BashObservation = Out<typeof BashObservation.shape>;
export type CommandResponse = Out<typeof CommandResponse.shape>;
export type SwerexceptionBody = Out<typeof SwerexceptionBody.shape>;

/** Every model of the protocol, by name (for the JSON schema the Python adapters are checked against). */
export const SWEREX_MODELS = {
  CreateBashSessionRequest,
  BashAction,
  BashInterruptAction,
  CloseBashSessionRequest,
  Command,
  ReadFileRequest,
  WriteFileRequest,
  UploadForm,
  IsAliveResponse,
  CreateBashSessionResponse,
  BashObservation,
  CloseBashSessionResponse,
  CommandResponse,
  ReadFileResponse,
  EmptyResponse,
  SwerexceptionBody,
} as const;
