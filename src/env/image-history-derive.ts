/**
 * One derivation of an image's chronological `.git`, in a sandbox of its own: the host's git (a known version,
 * whatever the image has), the image's `/testbed` mounted copy-on-write (its owners mapped as on the image's root),
 * no network, and nothing of the host writable. The new repository is written in the sandbox's own memory and copied
 * out by a reader that keeps regular files, directories and (refused afterwards) symlinks, bounded in bytes and time.
 * A sandbox that makes a layer, not a workspace (as a build's).
 */
import { ImageInvalidError, SandboxError } from "../errors.js";
import { Sandbox } from "../sandbox/sandbox.js";
import { parseReport } from "./image-history-check.js";
import { DERIVE_SCRIPT, type DeriveReport, OUT_PATH, REFUSED, SCRIPT_ENV, SRC_PATH } from "./image-history-script.js";

export interface DeriveInput {
  home: string;
  /** The image's repository, a directory of its materialized root filesystem (checked: `sourceRepository`). */
  testbed: string;
  /** The first host id of the range the image's files belong to (root mode), as its root's overlay has it. */
  owner?: number;
  /** Where the new repository is copied to (`dest/.git`). */
  dest: string;
  /** The image's name, for messages. */
  what: string;
  /** Most bytes the new repository may take (default 8 GiB, a sandbox's default disk). */
  maxBytes?: number;
  /** Longest the derivation may take (default 30 minutes). */
  timeoutMs?: number;
}

const DEFAULT_MAX_BYTES = 8 * 1024 ** 3;
const DEFAULT_TIMEOUT_MS = 30 * 60_000;

/** Derive into `dest`; what the derivation reports. The image's problems are `ImageInvalidError`s. */
export async function deriveTestbedGit(input: DeriveInput): Promise<DeriveReport> {
  const timeoutMs = input.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  const sb = await Sandbox.create({
    home: input.home,
    overlays: [
      { lower: [input.testbed], target: SRC_PATH, ...(input.owner === undefined ? {} : { owner: input.owner }) },
    ],
    cwd: "/",
    env: SCRIPT_ENV,
    labels: { purpose: "image-history", image: input.what },
  });
  try {
    const r = await sb.exec(DERIVE_SCRIPT, { timeoutMs, outputLimitBytes: 1024 * 1024 });
    if (r.exitCode !== 0) throw failure(input.what, r);
    const report = parseReport(r.stdout, input.what);
    const left = Math.max(1, deadline - Date.now());
    await sb.files.download(OUT_PATH, input.dest, { maxBytes: input.maxBytes ?? DEFAULT_MAX_BYTES, timeoutMs: left });
    return report;
  } finally {
    await sb.close();
  }
}

/** A failed derivation: the image's repository (a refusal, or git failing on it), else the sandbox's. */
function failure(what: string, r: { exitCode: number; stderr: string; timedOut: boolean; limit?: string }): Error {
  const last =
    r.stderr
      .trim()
      .split("\n")
      .pop()
      ?.replace(/^fatal: /, "") ?? "";
  if (r.timedOut || r.limit)
    return new SandboxError(`image ${what}: deriving its history hit its ${r.limit ?? "time"} limit`);
  const why = r.exitCode === REFUSED ? last : `git failed on its repository: ${last || `exit ${r.exitCode}`}`;
  return new ImageInvalidError(`image ${what}: its repository's history cannot be made chronological: ${why}`);
}
