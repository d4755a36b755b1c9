/** Workload 12's ratios, targets and section: a layer's cold start, its image mounted vs materialized by hard links. */
import { ratio } from "./stats.js";
import type { BenchResults, ColdStartLayer, Target } from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type ColdRatios = Pick<
  BenchResults["ratios"],
  "cold_image_vs_links" | "cold_image_vs_links_tree" | "cold_image_vs_links_rootfs"
>;

export const COLD_RATIO_MEANINGS: Record<keyof ColdRatios, string> = {
  cold_image_vs_links: "cold start, environment layer, p50: materialized by hard links ÷ its image mounted",
  cold_image_vs_links_tree: "cold start, generated tree (an image root's size), p50: hard links ÷ image mounted",
  cold_image_vs_links_rootfs:
    "cold start, an OCI image's root filesystem (~40k files), p50: hard links ÷ image mounted",
};

const layerAt = (r: Partial, i: number): ColdStartLayer | undefined =>
  r.coldStart.available ? r.coldStart.layers[i] : undefined;

export function coldRatios(r: Partial, reasons: Record<string, string>): ColdRatios {
  const of = (l: ColdStartLayer | undefined) => (l ? ratio(l.links.ready.p50Ms, l.image.ready.p50Ms) : null);
  const out: ColdRatios = {
    cold_image_vs_links: of(layerAt(r, 0)),
    cold_image_vs_links_tree: of(layerAt(r, 1)),
    cold_image_vs_links_rootfs: of(layerAt(r, 2)),
  };
  const why = r.coldStart.available
    ? "not run (podman disabled: the image root's image is built by it)"
    : r.coldStart.reason;
  for (const k of Object.keys(out) as (keyof ColdRatios)[]) if (out[k] === null) reasons[k] = why;
  return out;
}

export function coldTargets(r: Partial): Target[] {
  const t = (l: ColdStartLayer | undefined, name: string, limitMs: number): Target => ({
    name,
    target: `≤ ${limitMs} ms`,
    measured: l ? `${l.image.ready.p50Ms} ms (hard links ${l.links.ready.p50Ms} ms; ${l.files} files)` : "not run",
    met: l ? l.image.ready.p50Ms <= limitMs : null,
  });
  return [
    t(layerAt(r, 0), "cold ready, layer not in the node cache (p50)", 50),
    t(layerAt(r, 1), "cold ready, a 40k-file root (p50)", 1000),
    t(layerAt(r, 2), "cold ready, an OCI image's root of ~40k files (p50)", 1000),
  ];
}

export function coldLines(r: BenchResults): string[] {
  const L = ["", "## 12. Cold start (layer not in the node cache → first output), image mounted vs hard links", ""];
  const c = r.coldStart;
  if (!c.available) return [...L, `Not available — ${c.reason}`];
  L.push(
    `${c.runs} interleaved rounds, p50 (p90). "Placed": the image linked from the store, or the layer ` +
      'materialized, alone. "Written": the image written into the store, once per layer and store, which a build, ' +
      `a fetch or a pull does ahead (else the first placement). ${c.reason}.`,
    "",
    "| layer | files | image: ready | image: placed | image: written | hard links: ready | hard links: placed |" +
      " links ÷ image |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
  );
  const d = (x: { p50Ms: number; p90Ms: number }): string => `${x.p50Ms} ms (${x.p90Ms})`;
  for (const l of c.layers) {
    const k = ratio(l.links.ready.p50Ms, l.image.ready.p50Ms);
    const written = l.image.write ? d(l.image.write) : "n/a";
    L.push(
      `| ${l.name} | ${l.files} | ${d(l.image.ready)} | ${d(l.image.place)} | ${written} | ${d(l.links.ready)} | ` +
        `${d(l.links.place)} | ${k === null ? "n/a" : `${k.toFixed(1)}×`} |`,
    );
  }
  return L;
}
