/**
 * What a build takes from the builds of the same repository before it, and leaves to the ones after: its history's
 * year packs (`history-packs.ts`) and its sources' bytecode (`pyc-reuse.ts`), both from the store. Where the build
 * sandbox's writer is another host user than the store's owner, they are hard links to the objects (nothing to copy,
 * nothing to hash at ingest: `IngestOptions.linked`); the sandbox can read them, never write them (owned by the
 * store's owner, read-only). Otherwise they are copies.
 */
import { copyFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { runOk } from "../util/run.js";
import { HistoryPacks } from "./history-packs.js";
import { indexEntries, SourceLinks } from "./source-links.js";
import { PycReuse, type PycScope } from "./pyc-reuse.js";
import type { PackRange } from "./repos.js";
import type { LayerManifest, LinkedObject, Store } from "./store/index.js";
import type { LayerKey } from "./types.js";

export class BuildReuse {
  readonly history: HistoryPacks;
  readonly sources: SourceLinks;
  private pyc: PycReuse | undefined;
  private ranges: readonly PackRange[] = [];
  private link: boolean;

  constructor(
    private readonly home: string,
    private readonly store: Store,
    repo: string,
    linkFiles: boolean,
  ) {
    // As root, a build sandbox's root is a host user of its own (checked again once the sandbox exists: `writer`).
    this.link = process.getuid?.() === 0;
    this.history = new HistoryPacks(home, store, this.link);
    this.sources = new SourceLinks(home, repo, store, this.link && linkFiles);
  }

  /** The testbed's history as checked out: its ranges, recorded after the ingest for the next builds. */
  checkedOut(ranges: readonly PackRange[]): void {
    this.ranges = ranges;
  }

  /**
   * The build sandbox's writer on the host: if it is the store's owner, every link becomes a copy (it could write
   * the objects through them), and what is placed from now on is copied.
   */
  writer(ids: { uid: number }, testbed: string): void {
    if (ids.uid !== process.getuid?.()) return;
    this.link = false;
    for (const links of [this.history.linked, this.sources.linked]) {
      for (const key of links.keys()) {
        const path = join(testbed, key.slice("testbed/".length));
        copyFileSync(path, `${path}.copy`);
        renameSync(`${path}.copy`, path);
      }
      links.clear();
    }
  }

  /** Bytecode of identical sources from this repository's last layers built with this interpreter (count placed). */
  async placeBytecode(testbed: string, scope: PycScope, owner: { uid: number; gid: number }): Promise<number> {
    this.pyc = new PycReuse(this.home, this.store, scope, this.link);
    return this.pyc.place(testbed, owner);
  }

  /** Every file that is an object's hard link, by `<tree>/<path>`. */
  linked(): Map<string, LinkedObject> {
    return new Map([...this.history.linked, ...this.sources.linked, ...(this.pyc?.linked ?? [])]);
  }

  /** The layer is stored: its packs, files and bytecode are offered to the next builds. */
  async remember(key: LayerKey, manifest: LayerManifest, testbed: string): Promise<void> {
    this.history.remember(this.ranges, manifest);
    const index = await runOk("git", ["-C", testbed, "ls-files", "-s", "-z"]).catch(() => "");
    this.sources.remember(testbed, indexEntries(index), manifest);
    this.pyc?.remember(key);
  }
}
