/** `minisandbox store …`: list, stats, verify, gc, export, import. Parsing and printing only; logic is in env/store. */
import type { Command } from "commander";
import { homeLayout } from "../util/home.js";
import { formatBytes } from "../util/size.js";
import type { Store, VerifyReport } from "../env/store/index.js";
import { exitCodeFor } from "./common.js";

interface JsonFlag {
  json?: boolean;
}

/** The store's API, loaded when a store command runs (not when the program starts). */
type StoreApi = typeof import("../env/store/index.js");

/** The home's store and the API to work on it. */
type StoreOf = () => Promise<{ api: StoreApi; store: Store }>;

export function registerStoreCommand(program: Command, getHome: () => string): void {
  const cmd = program
    .command("store")
    .description("content-addressed layer store: layers, dedup stats, integrity, gc, packs");
  const store: StoreOf = async () => {
    const api = await import("../env/store/index.js");
    return { api, store: api.openStore(homeLayout(getHome()).store) };
  };
  for (const register of [listCommand, statsCommand, verifyCommand, gcCommand, exportCommand, importCommand])
    register(cmd, store);
}

/** What `store list` says of a layer: its full key (what export takes) and what it holds. */
interface LayerRow {
  key: string;
  repo: string | null;
  commit: string | null;
  python: string | null;
  builtAt: string | null;
  files: number;
  logicalBytes: number;
}

async function layerRows(api: StoreApi, s: Store): Promise<LayerRow[]> {
  const rows: LayerRow[] = [];
  for (const key of await api.listLayers(s)) {
    const m = await api.readManifest(s, key);
    const meta = (m.meta ?? {}) as { spec?: { repo?: string; commit?: string }; python?: string; builtAt?: string };
    const { files, logicalBytes } = api.summarizeManifest(m);
    const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
    rows.push({
      key,
      repo: str(meta.spec?.repo),
      commit: str(meta.spec?.commit),
      python: str(meta.python),
      builtAt: str(meta.builtAt),
      files,
      logicalBytes,
    });
  }
  return rows;
}

function listCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("list")
    .alias("ls")
    .description("every layer with its full key (what export takes), repository, Python and size")
    .option("--json", "machine-readable output")
    .action(
      action("list", async (opts: JsonFlag) => {
        const { api, store: st } = await store();
        const rows = await layerRows(api, st);
        if (opts.json) return printJson(rows);
        const { table } = await import("../util/progress.js");
        const cells = rows.map((r) => [
          r.key,
          r.repo ? `${r.repo}@${(r.commit ?? "").slice(0, 8)}` : "",
          r.python ?? "",
          formatBytes(r.logicalBytes),
          r.builtAt?.slice(0, 19).replace("T", " ") ?? "",
        ]);
        process.stdout.write(table(["key", "repository", "python", "size", "built"], cells));
      }),
    );
}

function statsCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("stats")
    .description("layers, logical vs stored bytes, dedup ratio")
    .option("--json", "machine-readable output")
    .action(
      action("stats", async (opts: JsonFlag) => {
        const { api, store: st } = await store();
        const s = await api.storeStats(st);
        if (opts.json) return printJson(s);
        print(
          `layers:        ${s.layers}`,
          `objects:       ${s.objects}`,
          `logical bytes: ${formatBytes(s.logicalBytes)} (${s.logicalBytes})`,
          `stored bytes:  ${formatBytes(s.storedBytes)} (${s.storedBytes})`,
          `dedup ratio:   ${s.dedupRatio.toFixed(2)}x`,
          `unreferenced:  ${s.unreferencedObjects} objects, ${formatBytes(s.unreferencedBytes)} (run 'store gc')`,
        );
      }),
    );
}

function verifyCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("verify")
    .description("rehash every object and check every manifest; exits 1 on any problem")
    .option("--json", "machine-readable output")
    .action(
      action("verify", async (opts: JsonFlag) => {
        const progress = !opts.json && process.stderr.isTTY;
        const { api, store: st } = await store();
        const report = await api.verifyStore(st, {
          onProgress: progress
            ? (done, total) => process.stderr.write(`\rverifying ${done}/${total} objects`)
            : undefined,
        });
        if (progress) process.stderr.write("\n");
        if (opts.json) printJson(report);
        else print(...verifyLines(report));
        if (!report.ok) process.exitCode = 1;
      }),
    );
}

function gcCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("gc")
    .description("remove objects no layer references, and stale scratch files")
    .option("--json", "machine-readable output")
    .action(
      action("gc", async (opts: JsonFlag) => {
        const { api, store: st } = await store();
        const r = await api.gcStore(st);
        if (opts.json) return printJson(r);
        const freed = formatBytes(r.freedBytes);
        print(`removed ${r.removedObjects} objects and ${r.removedTemp} scratch entries, freed ${freed}`);
      }),
    );
}

function exportCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("export")
    .description("write layers (manifests + objects) to a tar+zstd pack")
    .argument("<layers...>", "layer keys, or the start of each (as prepare and `store list` show them)")
    .requiredOption("-o, --output <file>", "pack file to write")
    .option("--json", "machine-readable output")
    .action(
      action("export", async (layers: string[], opts: JsonFlag & { output: string }) => {
        const { api, store: st } = await store();
        const keys: string[] = [];
        for (const given of layers) keys.push(await api.resolveLayerKey(st, given));
        const r = await api.exportPack(st, keys, opts.output);
        if (opts.json) return printJson(r);
        const bytes = `${formatBytes(r.objectBytes)} -> ${formatBytes(r.packBytes)}`;
        print(`wrote ${r.file}: ${r.layers.length} layer(s), ${r.objects} objects, ${bytes}`);
      }),
    );
}

function importCommand(cmd: Command, store: StoreOf): void {
  cmd
    .command("import")
    .description("validate a pack and add its layers to the store")
    .argument("<file>", "pack file")
    .option("--replace", "overwrite layers the store already has with different content")
    .option("--json", "machine-readable output")
    .action(
      action("import", async (file: string, opts: JsonFlag & { replace?: boolean }) => {
        const { api, store: st } = await store();
        const r = await api.importPack(st, file, { replace: opts.replace });
        if (opts.json) return printJson(r);
        const added = `${r.objectsAdded} new objects (${formatBytes(r.bytesAdded)})`;
        print(`imported ${r.layers.join(", ")}: ${added}, ${r.objectsPresent} already present`);
      }),
    );
}

function verifyLines(r: VerifyReport): string[] {
  const lines = [`checked ${r.objectsChecked} objects (${formatBytes(r.bytesChecked)})`];
  for (const c of r.corrupt) lines.push(`corrupt object ${c.id}: ${c.reason}`);
  for (const m of r.missing) lines.push(`missing object ${m.id} (layers ${m.layers.join(", ")})`);
  for (const b of r.badManifests) lines.push(`bad manifest ${b.key}: ${b.error}`);
  for (const b of r.badImages) lines.push(`bad image ${b.id}: ${b.error}`);
  for (const b of r.badLayerImages) lines.push(`bad layer image of ${b.key}: ${b.error}`);
  for (const s of r.stray) lines.push(`stray file ${s}`);
  lines.push(r.ok ? "store OK" : "store has problems");
  return lines;
}

function print(...lines: string[]): void {
  process.stdout.write(`${lines.join("\n")}\n`);
}

function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Failures become one clear line on stderr, never a stack trace; exit code 2 for bad input, else 1. */
function action<A extends unknown[]>(name: string, fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      process.stderr.write(`minisandbox store ${name}: ${message.split("\n")[0]}\n`);
      process.exitCode = exitCodeFor(e);
    }
  };
}
