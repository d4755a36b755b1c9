/** The images workload's ratios, targets and Markdown section (see images.ts). */
import { formatBytes } from "../../src/util/size.js";
import { pycVerdict } from "./pyc.js";
import { ratio } from "./stats.js";
import type {
  BenchResults,
  EvalMeasurement,
  ImagesEvaluation,
  ImagesReady,
  ImagesResult,
  ReadyVariant,
  Target,
  Unavailable,
} from "./types.js";

type Partial = Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">;
type ImagesRatios = Pick<
  BenchResults["ratios"],
  "images_storage_vs_podman" | "images_pull_vs_podman" | "images_warm_vs_podman" | "images_eval_vs_podman"
>;

const measured = (r: Partial): ImagesResult | undefined => (r.images.available ? r.images : undefined);

export function imagesRatios(r: Partial, reasons: Record<string, string>): ImagesRatios {
  const m = measured(r);
  const last = m ? [...m.points].sort((a, b) => b.n - a.n)[0] : undefined;
  const storage = last ? ratio(last.podmanBytes, last.minisandboxStoreBytes) : null;
  const pull = m ? ratio(m.laterPullMeanMs.podman, m.laterPullMeanMs.minisandbox) : null;
  const why = m ? "podman not measured" : (r.images as Unavailable).reason;
  if (storage === null) reasons.images_storage_vs_podman = why;
  if (pull === null) reasons.images_pull_vs_podman = m && m.images < 2 ? "fewer than 2 images" : why;
  const ready = m ? readyRatio(m.ready) : { value: null, why };
  if (ready.value === null) reasons.images_warm_vs_podman = ready.why;
  const evaluation = m ? evalRatio(m.evaluation) : { value: null, why };
  if (evaluation.value === null) reasons.images_eval_vs_podman = evaluation.why;
  return {
    images_storage_vs_podman: storage,
    images_pull_vs_podman: pull,
    images_warm_vs_podman: ready.value,
    images_eval_vs_podman: evaluation.value,
  };
}

type Ratio = { value: number | null; why: string };
const reasonOf = (v: { available: false; reason: string } | { available: true }, what: string): string =>
  v.available ? `${what} not measured` : v.reason;

function readyRatio(r: ImagesReady | Unavailable): Ratio {
  if (!r.available) return { value: null, why: r.reason };
  const ours = r.variants.minisandbox_warm;
  const theirs = r.variants.podman;
  const value = ours.available && theirs.available ? ratio(theirs.echo.p50Ms, ours.echo.p50Ms) : null;
  return { value, why: !theirs.available ? theirs.reason : reasonOf(ours, "minisandbox on the image") };
}

/** Throughputs compare only where both sides graded every instance resolved (a failing run is not an evaluation). */
function evalRatio(e: ImagesEvaluation | Unavailable): Ratio {
  if (!e.available) return { value: null, why: e.reason };
  const { minisandbox: ours, podman: theirs } = e;
  if (!theirs.available) return { value: null, why: theirs.reason };
  if (!ours.available) return { value: null, why: ours.reason };
  for (const [side, m] of [
    ["minisandbox", ours],
    ["podman", theirs],
  ] as const) {
    if (m.resolved !== e.instances) {
      const first = (m.detail as { errors?: string[] } | undefined)?.errors?.[0];
      return { value: null, why: `${side} resolved ${m.resolved} of ${e.instances}${first ? `: ${first}` : ""}` };
    }
  }
  return { value: ratio(ours.instancesPerMinute, theirs.instancesPerMinute), why: "" };
}

export const IMAGES_RATIO_MEANINGS: Record<keyof ImagesRatios, string> = {
  images_storage_vs_podman: "N instance images: podman's graph root ÷ the store (du, every inode once), largest N",
  images_pull_vs_podman: "pull of a repository's 2nd…Nth image from a loopback registry, mean: podman ÷ minisandbox",
  images_warm_vs_podman:
    "create → first output (echo) p50 on a pulled instance image: podman run of it ÷ a sandbox on its root, warm",
  images_eval_vs_podman:
    "gold evaluation on the pulled instance images, instances/min: minisandbox eval engine ÷ podman run -i",
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
    ...runTargets(r),
  ];
}

/** Both evaluations graded every instance resolved (their counts then equal), or what they graded. */
function allResolved(e: ImagesEvaluation | Unavailable | undefined): { ok: boolean | null; text: string } {
  if (!e?.available || !e.minisandbox.available || !e.podman.available) return { ok: null, text: "" };
  const ok = e.minisandbox.resolved === e.instances && e.podman.resolved === e.instances;
  return { ok, text: `, resolved ${e.minisandbox.resolved} and ${e.podman.resolved} of ${e.instances}` };
}

function runTargets(r: Omit<BenchResults, "targets">): Target[] {
  const warm = r.ratios.images_warm_vs_podman;
  const evaluation = r.ratios.images_eval_vs_podman;
  const resolved = allResolved(measured(r)?.evaluation);
  return [
    {
      name: "images: warm ready on an image vs podman run of it",
      target: "≥ 5×",
      measured: x(warm),
      met: warm === null ? null : warm >= 5,
    },
    {
      name: "images: evaluation throughput on the images vs podman on the same images (all resolved)",
      target: "≥ 1×",
      measured: `${x(evaluation)}${resolved.text}`,
      met: resolved.ok === false ? false : evaluation === null ? null : evaluation >= 1,
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
  return [...L, ...readyLines(m.ready), ...evaluationLines(m.evaluation)];
}

const msShort = (n: number | null | undefined): string =>
  n == null || !Number.isFinite(n) ? "n/a" : n >= 100 ? `${Math.round(n)} ms` : `${n.toFixed(1)} ms`;

/** Workload 1's table, on the pulled image. */
function readyLines(r: ImagesReady | Unavailable): string[] {
  const L = ["", "### Ready on an image (create → first output)", ""];
  if (!r.available) return [...L, `Not available: ${r.reason}`];
  L.push(
    `${r.runs} interleaved rounds on ${r.image}: \`echo ready\`, then \`python -c "import ${r.importModule}"\` ` +
      "(the fixture repository's module, in the image's venv), each in a fresh sandbox or container.",
    "",
    "| variant | echo p50 | echo p90 | import p50 | import p90 | podman ÷ this | failures | .pyc |",
    "|---|---|---|---|---|---|---|---|",
  );
  const podman = r.variants.podman;
  for (const [name, v] of Object.entries(r.variants) as [string, ReadyVariant | Unavailable][]) {
    if (!v.available) {
      L.push(`| ${name} | not available: ${v.reason} | | | | | | |`);
      continue;
    }
    const vsPodman = podman.available ? x(podman.echo.p50Ms / v.echo.p50Ms) : "n/a";
    const times = [v.echo.p50Ms, v.echo.p90Ms, v.import?.p50Ms, v.import?.p90Ms].map(msShort).join(" | ");
    L.push(`| ${v.label} | ${times} | ${vsPodman} | ${v.failures} | ${pycVerdict(v)} |`);
  }
  L.push("");
  for (const v of Object.values(r.variants)) if (v.available) L.push(`- ${v.label}: ${v.method}`);
  return L;
}

/** Workload 5's table, on the pulled instance images. */
function evaluationLines(e: ImagesEvaluation | Unavailable): string[] {
  const L = ["", "### Evaluation on the images (gold patches, graded)", ""];
  if (!e.available) return [...L, `Not available: ${e.reason}`];
  L.push(
    `${e.instances} instance image(s), ${e.workers} at a time: the eval engine on a dataset whose rows name the ` +
      "images, and the same eval script in `podman run -i` of each image (patch applied, eval.sh run, log graded).",
    "",
    "| runner | instances | workers | wall | instances/min | resolved | p50 per instance | " +
      "mean overhead outside the tests |",
    "|---|---|---|---|---|---|---|---|",
  );
  const runners: [string, EvalMeasurement | Unavailable][] = [
    ["minisandbox", e.minisandbox],
    ["podman", e.podman],
  ];
  for (const [name, m] of runners) {
    if (!m.available) {
      L.push(`| ${name} | not available: ${m.reason} | | | | | | |`);
      continue;
    }
    const run = `${m.instances} | ${m.workers} | ${msShort(m.wallMs)} | ${m.instancesPerMinute} | ${m.resolved}`;
    L.push(`| ${m.label} | ${run} | ${msShort(m.perInstance?.p50Ms)} | ${msShort(m.overheadMs)} |`);
  }
  return L;
}
