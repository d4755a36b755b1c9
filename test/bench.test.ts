import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { runBench, writeResults, type BenchResults } from "../bench/src/index.js";
import { imagesLines, imagesRatios, imagesTargets } from "../bench/src/report-images.js";
import type { ImagesResult } from "../bench/src/types.js";
import { benchOptionsFrom } from "../bench/src/cli.js";
import { ALL_WORKLOADS } from "../bench/src/run.js";
import { parsePycProbe } from "../bench/src/pyc.js";
import { summarize } from "../bench/src/stats.js";
import { tempDir } from "./helpers.js";

// One work dir: the images workload's run reuses the environment the first run built.
const work = tempDir("msb-bench-");

// Behaviour, not speed: a tiny configuration of every workload must produce well-formed results.
test("bench: a tiny run of every workload gives well-formed results and files", { timeout: 180_000 }, async () => {
  const r: BenchResults = await runBench({
    quick: true,
    work,
    runs: 1,
    storageNs: [1],
    concurrency: [1, 3],
    memoryUpToK: 3,
    sessionCommands: 5,
    evalInstances: 1,
    coldStampedeK: 2,
    rolloutRounds: 1,
    rolloutTrajectories: 1,
    rolloutForks: 1,
    rolloutLive: 8,
    evalEngine: false,
    sessionHttp: false,
    podman: false,
    fleetInstances: 1,
    fleetCluster: false,
    cliRuns: 1,
    coldRuns: 1,
    coldTreeFiles: 300,
    // Real sympy builds take minutes: here the preparation workload only says why it cannot run.
    sympyRepo: "/nonexistent/sympy",
    workloads: ALL_WORKLOADS.filter((w) => w !== "images"), // below, with the image tests' images
    log: () => {},
  });
  assert.equal(r.schema, 1);
  assert.equal(r.source.kind, "fixture");
  assert.ok(r.preparation && !r.preparation.available);
  assert.match(r.preparation.reason, /no sympy repository at \/nonexistent\/sympy/);
  assert.equal(r.source.instances, 1);
  for (const key of [
    "warm_vs_extract",
    "warm_vs_podman",
    "cold_vs_extract",
    "storage_vs_targz",
    "storage_vs_podman",
  ] as const) {
    assert.ok(key in r.ratios, key);
    const v = r.ratios[key];
    assert.ok(v === null || (typeof v === "number" && v > 0), `${key} = ${v}`);
  }
  // podman was disabled: its ratios are null and say why.
  assert.equal(r.ratios.warm_vs_podman, null);
  assert.match(r.ratio_reasons["warm_vs_podman"] ?? "", /disabled/);
  assert.equal(r.ratios.storage_vs_podman, null);
  assert.ok(r.ratio_reasons["storage_vs_podman"]);
  // Measured ones are numbers.
  assert.equal(typeof r.ratios.warm_vs_extract, "number");
  assert.equal(typeof r.ratios.cold_vs_extract, "number");
  assert.equal(typeof r.ratios.storage_vs_targz, "number");

  for (const name of [
    "minisandbox_warm",
    "minisandbox_warm_resolved",
    "minisandbox_cold",
    "bwrap_raw",
    "extract_per_task",
  ] as const) {
    const v = r.ready.variants[name];
    assert.ok(v.available, `${name}: ${JSON.stringify(v)}`);
    assert.equal(v.echo.n, 1);
    assert.equal(v.failures, 0, name);
    assert.ok(v.echo.p50Ms > 0 && v.echo.p90Ms >= v.echo.p50Ms);
    assert.ok(v.import && v.import.n === 1);
    // Valid bytecode caches and a clean environment in every variant.
    assert.ok(v.pyc, name);
    assert.equal(v.pyc.dontWriteBytecode, false, name);
    assert.equal(v.pyc.compiledFromSource, 0, `${name}: ${v.pyc.examples.join(", ")}`);
    assert.equal(v.pyc.written, 0, name);
  }
  assert.equal(r.ready.variants.podman.available, false);

  assert.equal(r.storage.points.length, 1);
  const p = r.storage.points[0]!;
  assert.ok(p.minisandboxBytes > 0 && p.minisandboxStoreBytes > 0 && p.targzBytes > 0 && p.minisandboxLogicalBytes > 0);
  assert.equal(p.podmanBytes, null);

  assert.deepEqual(
    r.concurrency.levels.map((l) => l.k),
    [1, 3],
  );
  for (const l of r.concurrency.levels) {
    assert.equal(l.failures, 0, l.errors.join("; "));
    assert.equal(l.perSandbox?.n, l.k);
    assert.ok(l.rssPerIdleBytes! > 0 && l.pssPerIdleBytes! > 0 && l.processesPerIdle! >= 3, JSON.stringify(l));
  }
  assert.equal(r.concurrency.k128_failures, null);
  assert.deepEqual(
    { ...r.concurrency.cold_stampede, wallMs: 0 },
    { k: 2, wallMs: 0, failures: 0, materializations: 1 },
  );

  assert.ok("p50Ms" in r.session.inProcess && r.session.inProcess.n === 5);
  assert.equal(r.session.http["available"], false);

  const steps = r.evaluation.minisandbox_steps;
  assert.ok(steps.available);
  assert.equal(steps.instances, 1);
  assert.equal(steps.resolved, 1, JSON.stringify(steps.detail));
  assert.equal(r.evaluation.podman.available, false);
  assert.equal(r.evaluation.minisandbox_engine.available, false);

  const ro = r.rollout;
  assert.ok(ro.available, JSON.stringify(ro));
  assert.equal(ro.groupSize, 8);
  for (const g of [ro.group.minisandbox, ro.group.minisandbox_warm_pool]) {
    assert.ok(g.available, JSON.stringify(g));
    assert.equal(g.failures, 0);
    assert.equal(g.allReady.n, 1);
  }
  for (const t of [ro.trajectory.minisandbox, ro.trajectory.minisandbox_in_place]) {
    assert.ok(t.available, JSON.stringify(t));
    assert.equal(t.resolved, t.trajectories);
    assert.ok(t.meanParts["startMs"]! > 0 && t.meanParts["rewardOverheadMs"]! > 0);
  }
  assert.ok(ro.fork.minisandbox.available && ro.fork.minisandbox.fork.n === 1, JSON.stringify(ro.fork));
  assert.equal(ro.group.podman.available, false);
  assert.equal(r.ratios.rollout_group_vs_podman, null);
  assert.ok(r.targets.some((t) => t.name.startsWith("fork of a rollout") && typeof t.met === "boolean"));
  assert.ok(ro.reset.available && ro.reset.reset.n === 1 && ro.reset.checkpoint.n === 1, JSON.stringify(ro.reset));
  assert.ok(ro.live.available, JSON.stringify(ro.live));
  assert.deepEqual([ro.live.rollouts, ro.live.errors], [8, 0], JSON.stringify(ro.live));
  assert.ok(ro.live.pssPerIdleBytes > 0 && ro.live.processes >= 2, JSON.stringify(ro.live));
  assert.ok(r.targets.some((t) => t.name.startsWith("reset of a rollout") && typeof t.met === "boolean"));

  // The command line beside its floors; podman was disabled, so its ratio is null and says why.
  assert.ok(r.cli.available, JSON.stringify(r.cli));
  assert.ok(r.cli.versionMs > 0 && r.cli.execMs > 0 && r.cli.nodeEmptyMs > 0);
  assert.equal(r.cli.podmanRunMs, null);
  assert.equal(typeof r.ratios.cli_version_vs_node_empty, "number");
  assert.equal(r.ratios.cli_exec_vs_podman_run, null);
  assert.match(r.ratio_reasons["cli_exec_vs_podman_run"] ?? "", /disabled/);
  assert.equal(typeof r.ratios.transfer_http_vs_copy, "number");
  // The warm start beside its floor (raw bwrap ran), a group of 8 beside eight warm starts.
  assert.equal(typeof r.ratios.warm_vs_bwrap_raw, "number");
  for (const name of [
    "command line: minisandbox --version",
    "layer into a fresh node over HTTP (loopback)",
    "warm create → first output, p50, beside raw bwrap on the same trees and podman run",
    "group of 8 ready, no warm pool, p50, beside 8 × the warm start",
  ])
    assert.equal(typeof r.targets.find((t) => t.name === name)?.met, "boolean", name);
  // Cold start in both forms (as root the image form is there), each beside the other.
  const c = r.coldStart;
  if (process.getuid?.() === 0) {
    assert.ok(c.available, JSON.stringify(c));
    assert.deepEqual(
      c.layers.map((l) => [l.files > 0, l.image.ready.n, l.links.ready.n]),
      [
        [true, 1, 1],
        [true, 1, 1],
      ],
    );
    assert.equal(c.layers[1]!.files, 300);
    assert.equal(typeof r.ratios.cold_image_vs_links, "number");
  } else assert.ok(!c.available && c.reason, JSON.stringify(c));
  const d = r.dashboard;
  assert.ok(d.available, JSON.stringify(d));
  assert.equal(d.sandboxes, 16);
  assert.ok(d.commandUnwatched.n > 0 && d.commandWatched.n > 0 && d.eventIntervalMs.n > 0 && d.eventBytes > 0);
  assert.ok(d.browser.available || d.browser.reason, JSON.stringify(d.browser));

  assert.ok(r.targets.length >= 8);
  for (const t of r.targets) assert.ok(t.met === null || typeof t.met === "boolean");

  const out = join(work, "out");
  const files = writeResults(r, { outDir: out });
  assert.equal(files.json, join(out, "results.json"));
  const back = JSON.parse(readFileSync(files.json, "utf8")) as BenchResults;
  assert.deepEqual(back.ratios, r.ratios);
  assert.match(readFileSync(files.markdown, "utf8"), /\| minisandbox warm \|/);
  assert.match(readFileSync(files.markdown, "utf8"), /## 7\. Rollouts for RL trainers/);
  assert.match(readFileSync(files.markdown, "utf8"), /## 10\. Command line/);
  assert.match(readFileSync(files.svg, "utf8"), /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.ok(existsSync(files.svg));
});

test("bench: the images workload pulls N images from a loopback registry and measures the store", {
  timeout: 900_000, // the first run on a machine builds the image tests' images (then cached)
}, async () => {
  const r = await runBench({
    quick: true,
    work,
    storageNs: [1, 2],
    podman: false,
    workloads: ["images"],
    log: () => {},
  });
  const m = r.images;
  assert.ok(m.available, JSON.stringify(m));
  assert.equal(m.images, 2);
  assert.deepEqual(
    m.points.map((p) => p.n),
    [1, 2],
  );
  const [one, two] = m.points;
  assert.ok(one!.minisandboxStoreBytes > 0 && two!.minisandboxStoreBytes > one!.minisandboxStoreBytes);
  assert.ok(two!.minisandboxStoreBytes < 2 * one!.minisandboxStoreBytes, "the 2nd image shares base and env");
  assert.equal(one!.podmanBytes, null);
  assert.ok(m.pulls.every((p) => p.minisandboxMs > 0 && p.podmanMs === null));
  assert.equal(m.laterPullMeanMs.minisandbox, m.pulls[1]!.minisandboxMs);
  assert.equal(r.ratios.images_pull_vs_podman, null);
  assert.match(r.ratio_reasons.images_storage_vs_podman ?? "", /podman/);
  // Both sides run what they pulled: a sandbox on the first image; the gold evaluation on both images.
  assert.ok(m.ready.available, JSON.stringify(m.ready));
  const warm = m.ready.variants.minisandbox_warm;
  assert.ok(warm.available, JSON.stringify(warm));
  assert.equal(warm.failures, 0);
  assert.equal(warm.echo.n, m.ready.runs);
  assert.ok(warm.import && warm.import.n === m.ready.runs);
  assert.equal(m.ready.variants.podman.available, false);
  assert.ok(m.evaluation.available, JSON.stringify(m.evaluation));
  const ours = m.evaluation.minisandbox;
  assert.ok(ours.available, JSON.stringify(ours));
  assert.equal(ours.instances, 2);
  assert.equal(ours.resolved, 2, "gold predictions resolve on the images");
  assert.equal(r.ratios.images_warm_vs_podman, null);
  assert.match(r.ratio_reasons.images_warm_vs_podman ?? "", /podman/);
  assert.equal(r.ratios.images_eval_vs_podman, null);
  assert.match(r.ratio_reasons.images_eval_vs_podman ?? "", /podman/);
  assert.ok(!existsSync(join(work, "images")), "the registry, store and podman storage are removed after the run");
  const files = writeResults(r, { outDir: join(work, "out-images") });
  const md = readFileSync(files.markdown, "utf8");
  assert.match(md, /## 11\. Environments from images/);
  assert.match(md, /### Ready on an image[\s\S]*\| minisandbox on the image, warm \| /);
  assert.match(md, /### Evaluation on the images[\s\S]*\| minisandbox eval engine on the images [^|]*\| 2 \| 2 \| /);
});

test("bench: the images report's ready and evaluation ratios, targets and tables", () => {
  const dist = (p50Ms: number) => summarize([p50Ms, p50Ms]);
  const variant = (label: string, p50Ms: number) => ({
    available: true as const,
    label,
    method: `${label}'s way`,
    echo: dist(p50Ms),
    import: dist(p50Ms * 2),
    pyc: null,
    failures: 0,
  });
  const run = (label: string, perMinute: number, resolved: number) => ({
    available: true as const,
    label,
    instances: 3,
    workers: 2,
    wallMs: 1000,
    instancesPerMinute: perMinute,
    resolved,
    perInstance: dist(500),
  });
  const images = (podmanResolved: number): ImagesResult => ({
    available: true,
    images: 3,
    historyMiB: 0,
    pulls: [],
    points: [],
    laterPullMeanMs: { minisandbox: null, podman: null },
    ready: {
      available: true,
      image: "127.0.0.1:5000/img:1",
      runs: 2,
      importModule: "calc",
      variants: { minisandbox_warm: variant("ours", 20), podman: variant("theirs", 300) },
    },
    evaluation: {
      available: true,
      instances: 3,
      workers: 2,
      minisandbox: run("ours", 30, 3),
      podman: run("theirs", 20, podmanResolved),
    },
  });
  const results = (m: ImagesResult) => ({ images: m }) as unknown as BenchResults;
  const reasons: Record<string, string> = {};
  const q = imagesRatios(results(images(3)), reasons);
  assert.equal(q.images_warm_vs_podman, 15);
  assert.equal(q.images_eval_vs_podman, 1.5);
  assert.equal(reasons.images_warm_vs_podman, undefined);
  const targetsOf = (m: ImagesResult, ratios: typeof q) =>
    imagesTargets({ ...results(m), ratios: ratios as BenchResults["ratios"] });
  const met = (ts: ReturnType<typeof imagesTargets>, start: string) => ts.find((t) => t.name.startsWith(start))?.met;
  const all = targetsOf(images(3), q);
  assert.equal(met(all, "images: warm ready on an image"), true);
  assert.equal(met(all, "images: evaluation throughput"), true);
  // Faster but one instance unresolved on a side: the evaluation target is not met.
  assert.equal(met(targetsOf(images(2), q), "images: evaluation throughput"), false);
  const md = imagesLines({ ...results(images(3)), ratios: q } as BenchResults).join("\n");
  assert.match(md, /\| ours \| 20\.0 ms \| 20\.0 ms \| 40\.0 ms \| 40\.0 ms \| 15\.0× \| 0 \| n\/a \|/);
  assert.match(md, /\| theirs \| 3 \| 2 \| 1000 ms \| 20 \| 3 \| 500 ms \| n\/a \|/);
});

test("bench: option parsing and helpers", () => {
  assert.throws(() => benchOptionsFrom({ only: "ready,bogus" }), /unknown workload/);
  assert.throws(() => benchOptionsFrom({ repos: "/x" }), /--dataset/);
  assert.throws(() => benchOptionsFrom({ runs: "0" }), /positive integer/);
  assert.deepEqual(benchOptionsFrom({ only: "ready, storage", quick: true }).workloads, ["ready", "storage"]);
  // The CLI measures a sympy-sized workspace, quick or not; 0 is the small repository; a dataset brings its own.
  assert.equal(benchOptionsFrom({ quick: true }).historyMiB, 200);
  assert.equal(benchOptionsFrom({}).historyMiB, 200);
  assert.equal(benchOptionsFrom({ historyMb: "0" }).historyMiB, 0);
  assert.throws(() => benchOptionsFrom({ historyMb: "-3" }), /non-negative integer/);
  assert.throws(() => benchOptionsFrom({ historyMb: "8", dataset: "d.json" }), /--dataset/);

  const d = summarize([5, 1, 4, 2, 3]);
  assert.equal(d.p50Ms, 3);
  assert.equal(d.minMs, 1);
  assert.equal(d.maxMs, 5);

  const good = parsePycProbe(
    "# code object from '/opt/venv/lib/python3.11/site-packages/calc/__pycache__/ops.cpython-311.pyc'\nMSB_DWB=False\n",
  );
  assert.ok(good.ok);
  const stale = parsePycProbe(
    "# code object from /testbed/calc/ops.py\n" +
      "# created '/testbed/calc/__pycache__/ops.cpython-311.pyc'\nMSB_DWB=False\n",
  );
  assert.equal(stale.ok, false);
  assert.equal(stale.compiledFromSource, 1);
  assert.equal(stale.written, 1);
});
