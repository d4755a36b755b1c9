/**
 * Shared environment types. An EnvSpec is everything that affects a built environment; its key (hash) names
 * the layer that building it produces.
 */

import { TESTBED_PATH } from "../sandbox/plan.js";

/** Where a layer's trees are mounted inside every sandbox (fixed, so venv shebangs stay valid). */
export { TESTBED_PATH };
export const VENV_PATH = "/opt/venv";

export interface EnvSpec {
  /** "owner/name" */
  repo: string;
  /** Commit the testbed is checked out at. */
  commit: string;
  /** Interpreter version, e.g. "3.9". */
  python: string;
  /** SWE-bench `packages`: "requirements.txt", "environment.yml" or space-separated package names. */
  packages?: string;
  pip_packages: string[];
  pre_install: string[];
  /** e.g. "python -m pip install -e ." */
  install?: string;
  eval_commands: string[];
  test_cmd: string;
  /** Extra environment variables for build, sandboxes and tests. */
  env: Record<string, string>;
  /** Everything else from the spec table (kept so nothing is lost; included in the key). */
  extra?: Record<string, unknown>;
  /**
   * The testbed's git history: absent (chronological, the default) keeps only what the base commit reaches;
   * "full" keeps every ref of the source, the fix included (what testbeds were before; gameable).
   */
  history?: "full";
  /**
   * An image of the store (canonical reference) the environment is built and run on, as its `/` instead of the
   * host's /usr and /etc: hermetic builds, the same system on every node. Absent: the host's.
   */
  base?: string;
}

/** `chronological`: nothing that postdates the base commit is in the testbed; `full`: the source's whole history. */
export type HistoryPolicy = "chronological" | "full";

/** Whether a value names a history (a spec field, a request's option): the one check for both. */
export const isHistoryPolicy = (v: unknown): v is HistoryPolicy => v === "chronological" || v === "full";

/** The histories, as an error message lists them. */
export const HISTORY_CHOICES = '"chronological" or "full"';

/** A layer is named by the key of the spec that built it (hex sha256). */
export type LayerKey = string;
