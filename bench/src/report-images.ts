/** The images workload's ratios, targets and Markdown section (see images.ts). */
import { formatBytes } from "../../src/util/size.js";
import { ratio } from "./stats.js";
import type { BenchResults, ImagesResult, Target, Unavailable } from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type ImagesRatios = Pick<BenchResults["ratios"], "images_storage_vs_podman" | "images_pull_vs_podman">;

const measured = (r: Partial): ImagesResult | undefined => (r.images.available ? r.images : undefined);

export function imagesRatios(r: Partial, reasons: Record<string, string>): ImagesRatios {
  const m = measured(r);
  const last = m ? [...m.points].sort((a, b) => b.n - a.n)[0] : undefined;
  const storage = last ? ratio(last.podmanBytes, last.minisandboxStoreBytes) : null;
  const pull = m ? ratio(m.laterPullMeanMs.podman, m.laterPullMeanMs.minisandbox) : null;
  const why = m ? "podman not measured" : (r.images as Unavailable).reason;
  if (storage === null) reasons.images_storage_vs_podman = why;
  if (pull === null) reasons.images_pull_vs_podman = m && m.images < 2 ? "fewer than 2 images" : why;
  return { images_storage_vs_podman: storage, images_pull_vs_podman: pull };
}

export const IMAGES_RATIO_MEANINGS: Record<keyof ImagesRatios, string> = {
  images_storage_vs_podman: "N instance images: podman's graph root ÷ the store (du, every inode once), largest N",
  images_pull_vs_podman: "pull of a repository's 2nd…Nth image from a loopback registry, mean: podman ÷ minisandbox",
};

const x = (n: number | null): string => (n === null ? "n/a" : `${n.toFixed(1)}×`);

export function imagesTargets(r: Omit<BenchResults, "targets">): Target[] {
  const n = measured(r)?.images ?? 0;
  const storage = r.ratios.images_storage_vs_podman;
  const pull = r.ratios.images_pull_vs_podman;
  return [
    {
      name: `images: store vs podman's storage of the same ${n || "N"} images`,
      target: "≤ 1/5 (≥ 5×)",
      measured: x(storage),
      met: storage === null ? null : storage >= 5,
    },
    {
      name: "images: pull of the 2nd…Nth image vs podman pull",
      target: "≥ 3× faster",
      measured: x(pull),
      met: pull === null ? null : pull >= 3,
    },
  ];
}

const ms = (n: number | null): string => (n === null ? "n/a" : `${(n / 1000).toFixed(2)} s`);
const bytes = (n: number | null): string => (n === null ? "n/a" : formatBytes(n));

export function imagesLines(r: BenchResults): string[] {
  const L = ["", "## 11. Environments from images (a loopback registry; side by side with podman pull)", ""];
  const m = measured(r);
  if (!m) return [...L, `Not available: ${(r.images as Unavailable).reason}`];
  L.push(
    `${m.images} SWE-bench-style instance images of one repository (base → env → instance layers, built by podman ` +
      `from a Debian root; a ${m.historyMiB} MiB git history in each /testbed), pulled one after the other, ` +
      "`minisandbox images pull` and `podman pull` interleaved image by image.",
    "",
    "| N images | store | podman's graph root | podman ÷ store |",
    "|---|---|---|---|",
  );
  for (const p of m.points) {
    const q = ratio(p.podmanBytes, p.minisandboxStoreBytes);
    L.push(`| ${p.n} | ${bytes(p.minisandboxStoreBytes)} | ${bytes(p.podmanBytes)} | ${x(q)} |`);
  }
  const first = m.pulls[0];
  L.push(
    "",
    "| pull | minisandbox | podman |",
    "|---|---|---|",
    `| 1st image | ${ms(first?.minisandboxMs ?? null)} | ${ms(first?.podmanMs ?? null)} |`,
    `| 2nd…${m.images}th, mean | ${ms(m.laterPullMeanMs.minisandbox)} | ${ms(m.laterPullMeanMs.podman)} |`,
  );
  return L;
}
