/** `minisandbox images pull|import|ls|rm`: parsing and printing only; the work is in env/images. */
import type { Command } from "commander";
import type { ImageEvent, StoreImageResult } from "../env/images/index.js";
import type { ImagePlatform as Platform, Store, UnpackBudget } from "../env/store/index.js";
import { homeLayout } from "../util/home.js";
import { table, TransferProgress } from "../util/progress.js";
import { formatBytes, parseSize } from "../util/size.js";
import { collect, fail, parsePositive } from "./common.js";

interface CommonFlags {
  platform?: string;
  jobs: string;
  maxLayerBytes?: string;
  maxLayerEntries?: string;
  json?: boolean;
}

interface PullFlags extends CommonFlags {
  mirror: string[];
  insecure: string[];
}

interface ImportFlags extends CommonFlags {
  name?: string;
  tag: string[];
}

export function registerImagesCommand(program: Command, getHome: () => string): void {
  const cmd = program
    .command("images")
    .description("OCI/Docker images in the deduplicated store: pull from registries, import archives, list, remove");
  // The image and store modules load when a command runs, not when the program declares its commands.
  const images = () => import("../env/images/index.js");
  const store = async (): Promise<Store> =>
    (await import("../env/store/index.js")).openStore(homeLayout(getHome()).store);
  addCommon(cmd.command("pull"))
    .description("pull images from OCI registries (Docker Hub, ghcr.io, quay.io, any v2 registry) into the store")
    .argument("<refs...>", "image references, e.g. debian:12, ghcr.io/org/img@sha256:...")
    .option("--mirror <REGISTRY=URL>", "try this mirror first for REGISTRY (repeatable)", collect, [] as string[])
    .option("--insecure <HOST>", "allow plain http to HOST (loopback always is)", collect, [] as string[])
    .action(async (refs: string[], o: PullFlags) => {
      try {
        const { loadRegistryConfig, parsePlatform, pullImage, withMirrorFlags } = await images();
        const registries = withMirrorFlags(loadRegistryConfig(getHome()), o.mirror, o.insecure);
        const s = await store();
        for (const ref of refs) {
          const r = await withProgress(`pull ${ref}`, o, (onEvent) =>
            pullImage(s, ref, { ...common(o, parsePlatform), registries, onEvent }),
          );
          report(`pulled ${r.ref} from ${r.from}`, r, o);
        }
      } catch (e) {
        fail(e);
      }
    });
  addCommon(cmd.command("import"))
    .description(
      "import images from docker/podman save archives, oci-archives, OCI layout dirs, podman:NAME, docker:NAME",
    )
    .argument("<sources...>", "archive files, OCI layout directories, podman:IMAGE or docker:IMAGE")
    .option("--name <NAME>", "which image of an archive that holds several")
    .option(
      "--tag <NAME>",
      "name to record the image under (repeatable; default: the names the source gives)",
      collect,
      [] as string[],
    )
    .action(async (sources: string[], o: ImportFlags) => {
      try {
        const { importImage, parsePlatform } = await images();
        const s = await store();
        for (const source of sources) {
          const r = await withProgress(`import ${source}`, o, (onEvent) =>
            importImage(s, source, {
              ...common(o, parsePlatform),
              ...(o.name ? { name: o.name } : {}),
              ...(o.tag.length ? { tags: o.tag } : {}),
              onEvent,
            }),
          );
          report(`imported ${r.refs.join(", ") || r.image.id} from ${source}`, r, o);
        }
      } catch (e) {
        fail(e);
      }
    });
  registerListAndRemove(cmd, store, images);
}

function addCommon(cmd: Command): Command {
  return cmd
    .option("--platform <OS/ARCH[/VARIANT]>", "platform of a multi-platform image", "linux/amd64")
    .option("--jobs <N>", "layers fetched and unpacked at once", "3")
    .option("--max-layer-bytes <SIZE>", "refuse a layer that expands past this (default 64G)")
    .option("--max-layer-entries <N>", "refuse a layer with more entries (default 1000000)")
    .option("--json", "machine-readable output");
}

function common(
  o: CommonFlags,
  parsePlatform: (s: string) => Platform,
): { platform: Platform; jobs: number; budget: UnpackBudget } {
  const budget: UnpackBudget = {};
  if (o.maxLayerBytes) budget.maxBytes = parseSize(o.maxLayerBytes);
  if (o.maxLayerEntries) budget.maxEntries = parsePositive(o.maxLayerEntries, "--max-layer-entries", { integer: true });
  return {
    platform: parsePlatform(o.platform ?? "linux/amd64"),
    jobs: parsePositive(o.jobs, "--jobs", { integer: true }),
    budget,
  };
}

/** Run one pull or import with a progress line on stderr (bytes, layers, ETA); none with --json off a terminal. */
async function withProgress<T>(
  label: string,
  o: CommonFlags,
  run: (onEvent: (e: ImageEvent) => void) => Promise<T>,
): Promise<T> {
  if (o.json && !process.stderr.isTTY) return run(() => {});
  const bar = new TransferProgress(label, "layers");
  const onEvent = (e: ImageEvent): void => {
    if (e.type === "layers") bar.setTotals(e.bytes, e.missing);
    else if (e.type === "bytes") bar.addBytes(e.n);
    else if (e.type === "layer" && e.stored) bar.itemDone(`${e.diffId.slice(0, 19)}: ${e.newObjects} new files`);
    else if (e.type === "retry") bar.note(`retrying in ${Math.round(e.waitMs / 100) / 10} s: ${e.reason}`);
    else if (e.type === "resume") bar.note(`resuming ${e.what.slice(0, 19)} at byte ${e.fromByte}`);
  };
  try {
    return await run(onEvent);
  } finally {
    bar.finish();
  }
}

function report(head: string, r: StoreImageResult, o: CommonFlags): void {
  if (o.json) {
    process.stdout.write(`${JSON.stringify({ refs: r.refs, cached: r.cached, layers: r.layers, image: r.image })}\n`);
    return;
  }
  const fetched = r.layers.filter((l) => l.stored);
  const newBytes = fetched.reduce((n, l) => n + l.newBytes, 0);
  const newFiles = fetched.reduce((n, l) => n + l.newObjects, 0);
  const what = r.cached
    ? "already in the store"
    : `${r.layers.length} layers, ${fetched.length} unpacked (${newFiles} new files, ${formatBytes(newBytes)})`;
  const size = formatBytes(r.image.sizes.rootfsBytes);
  process.stdout.write(
    `${head}: ${r.image.id.slice(0, 19)}, ${what}, root filesystem ${size}, ` +
      `${(r.durationMs / 1000).toFixed(1)} s\n`,
  );
}

function registerListAndRemove(
  cmd: Command,
  store: () => Promise<Store>,
  images: () => Promise<typeof import("../env/images/index.js")>,
): void {
  cmd
    .command("ls")
    .description("images in the store: names, id, platform, size")
    .option("--json", "machine-readable output")
    .action(async (o: { json?: boolean }) => {
      try {
        const listed = await (await images()).listStoredImages(await store());
        if (o.json) return void process.stdout.write(`${JSON.stringify(listed, null, 2)}\n`);
        const rows = listed.map(({ record: r, refs }) => [
          refs.filter((n) => !n.includes("@")).join(", ") || "<none>",
          r.id.slice(7, 19),
          [r.platform.os, r.platform.architecture].join("/"),
          formatBytes(r.sizes.rootfsBytes),
          String(r.layers.length),
          r.storedAt.slice(0, 19).replace("T", " "),
        ]);
        process.stdout.write(table(["NAME", "ID", "PLATFORM", "SIZE", "LAYERS", "STORED"], rows));
      } catch (e) {
        fail(e);
      }
    });
  cmd
    .command("rm")
    .description("remove image names (an image goes with its last name; its files at the next `store gc`)")
    .argument("<images...>", "names or ids")
    .option("--json", "machine-readable output")
    .action(async (names: string[], o: { json?: boolean }) => {
      try {
        const { removeStoredImage } = await images();
        const s = await store();
        for (const name of names) {
          const r = await removeStoredImage(s, name);
          if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
          else {
            const gone = r.removed.length ? `; image ${r.removed.join(", ").slice(0, 19)} removed` : "";
            process.stdout.write(
              `untagged ${r.refs.join(", ") || name}${gone} (run 'minisandbox store gc' to free its files)\n`,
            );
          }
        }
      } catch (e) {
        fail(e);
      }
    });
}
