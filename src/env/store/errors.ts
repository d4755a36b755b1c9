import { MinisandboxError } from "../../util/errors.js";

/** The store's on-disk state contradicts itself (missing or corrupt object, unreadable manifest). */
export class StoreCorruptError extends MinisandboxError {
  constructor(message: string) {
    super("store_corrupt", message);
  }
}

/** errno code of a Node system error, or undefined. */
export function errCode(e: unknown): string | undefined {
  return typeof e === "object" && e !== null && "code" in e ? String((e as { code: unknown }).code) : undefined;
}

export function errMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
