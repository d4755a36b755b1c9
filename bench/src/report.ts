/** Ratios, targets, and the Markdown table and SVG chart written next to the results JSON. */
import { formatBytes } from "../../src/util/size.js";
import { IMAGES_RATIO_MEANINGS, imagesLines, imagesRatios, imagesTargets } from "./report-images.js";
import type { Dist } from "../../src/util/stats.js";
import { ROLLOUT_RATIO_MEANINGS, rolloutLines, rolloutRatios, rolloutTargets } from "./report-rollout.js";
import { COLD_RATIO_MEANINGS, coldLines, coldRatios, coldTargets } from "./report-cold.js";
import { preparationLines, preparationTargets } from "./report-prepare.js";
import { cliLines, SPEED_RATIO_MEANINGS, speedRatios, speedTargets } from "./report-speed.js";
import { pycVerdict } from "./pyc.js";
import { ratio } from "./stats.js";
import type { DashboardBenchResult } from "./dashboard.js";
import type { Leftovers, ServerLoadResult } from "./server-load.js";
import type { BenchResults, FleetResult, ReadyVariant, ReadyVariantName, Target, Unavailable } from "./types.js";

const ok = (v: ReadyVariant | Unavailable | undefined): v is ReadyVariant => v?.available === true;

export function computeRatios(
  r: Omit<BenchResults, "ratios" | "ratio_reasons" | "targets">,
): Pick<BenchResults, "ratios" | "ratio_reasons"> {
  const v = r.ready.variants;
  const reasons: Record<string, string> = {};
  const why = (name: ReadyVariantName): string => {
    const x = v[name];
    return x && !x.available ? x.reason : `${name} not measured`;
  };
  const readyRatio = (
    key: string,
    base: ReadyVariantName,
    ours: ReadyVariantName,
    kind: "echo" | "import",
  ): number | null => {
    const b = v[base];
    const o = v[ours];
    const val = ok(b) && ok(o) ? ratio(b[kind]?.p50Ms, o[kind]?.p50Ms) : null;
    if (val === null) reasons[key] = !ok(b) ? why(base) : why(ours);
    return val;
  };
  const last = [...r.storage.points].sort((a, b) => b.n - a.n)[0];
  const storageTargz = last ? ratio(last.targzBytes, last.minisandboxStoreBytes) : null;
  if (storageTargz === null) reasons["storage_vs_targz"] = "storage not measured";
  // podman's actual disk use (shared layers counted once): every layer of the N images, base OS included.
  const storagePodman = last ? ratio(last.podmanTotalBytes, last.minisandboxStoreBytes) : null;
  const storagePodmanEnv = last ? ratio(last.podmanBytes, last.minisandboxStoreBytes) : null;
  const podmanWhy = r.storage.podman.available ? "podman storage not measured" : r.storage.podman.reason;
  if (storagePodman === null) reasons["storage_vs_podman"] = podmanWhy;
  if (storagePodmanEnv === null) reasons["storage_vs_podman_env_layers"] = podmanWhy;
  return {
    ratios: {
      warm_vs_extract: readyRatio("warm_vs_extract", "extract_per_task", "minisandbox_warm", "echo"),
      warm_vs_podman: readyRatio("warm_vs_podman", "podman", "minisandbox_warm", "echo"),
      cold_vs_extract: readyRatio("cold_vs_extract", "extract_per_task", "minisandbox_cold", "echo"),
      storage_vs_targz: storageTargz,
      storage_vs_podman: storagePodman,
      storage_vs_podman_env_layers: storagePodmanEnv,
      warm_import_vs_extract_import: readyRatio(
        "warm_import_vs_extract_import",
        "extract_per_task",
        "minisandbox_warm",
        "import",
      ),
      warm_import_vs_podman_import: readyRatio("warm_import_vs_podman_import", "podman", "minisandbox_warm", "import"),
      ...evaluationRatios(r, reasons),
      ...rolloutRatios(r, reasons),
      ...speedRatios(r, reasons),
      ...imagesRatios(r, reasons),
      ...coldRatios(r, reasons),
    },
    ratio_reasons: reasons,
  };
}

function evaluationRatios(
  r: Pick<BenchResults, "evaluation">,
  reasons: Record<string, string>,
): Pick<BenchResults["ratios"], "eval_vs_podman" | "eval_steps_vs_podman"> {
  const e = r.evaluation;
  const ours = e.minisandbox_engine.available
    ? e.minisandbox_engine
    : e.minisandbox_steps.available
      ? e.minisandbox_steps
      : undefined;
  const evalRatio = ours && e.podman.available ? ratio(ours.instancesPerMinute, e.podman.instancesPerMinute) : null;
  if (evalRatio === null)
    reasons["eval_vs_podman"] = !e.podman.available ? e.podman.reason : "minisandbox evaluation not measured";
  const stepsRatio =
    e.minisandbox_steps.available && e.podman.available
      ? ratio(e.minisandbox_steps.instancesPerMinute, e.podman.instancesPerMinute)
      : null;
  if (stepsRatio === null)
    reasons["eval_steps_vs_podman"] = !e.podman.available ? e.podman.reason : "minisandbox evaluation not measured";
  return { eval_vs_podman: evalRatio, eval_steps_vs_podman: stepsRatio };
}

const x = (n: number | null | undefined, d = 1): string => (n == null ? "n/a" : `${n.toFixed(d)}×`);
const ms = (n: number | null | undefined): string =>
  n == null || !Number.isFinite(n) ? "n/a" : n >= 100 ? `${Math.round(n)} ms` : `${n.toFixed(1)} ms`;
const mb = (n: number | null | undefined): string => (n == null ? "n/a" : `${(n / 1024 / 1024).toFixed(1)} MB`);

type TargetAt = (name: string, target: string, measured: string, met: boolean | null) => void;

const ge = (v: number | null, min: number): boolean | null => (v === null ? null : v >= min);

export function computeTargets(r: Omit<BenchResults, "targets">): Target[] {
  const t: Target[] = [];
  const at: TargetAt = (name, target, measured, met) => void t.push({ name, target, measured, met });
  readyAndStorageTargets(r, at);
  sandboxTargets(r, at);
  evaluationTargets(r, at);
  t.push(...rolloutTargets(r));
  fleetTargets(r.fleet, at);
  t.push(...speedTargets(r));
  t.push(...imagesTargets(r));
  t.push(...coldTargets(r));
  t.push(...preparationTargets(r));
  return t;
}

function fleetTargets(f: FleetResult | Unavailable | undefined, at: TargetAt): void {
  const c = f?.available && f.cluster.available ? f.cluster : undefined;
  at(
    "fleet: each layer fetched at most once per node",
    "≤ 1 fetch per node and layer",
    c ? `${c.fetches.maxPerNodeAndLayer} at most (${c.fetches.total} fetches)` : "not run",
    c ? c.fetches.maxPerNodeAndLayer <= 1 : null,
  );
  at(
    "fleet: report on 3 nodes vs 1 node",
    "identical",
    c ? (c.sameReport ? "identical" : "different") : "not run",
    c ? c.sameReport : null,
  );
}

function readyAndStorageTargets(r: Omit<BenchResults, "targets">, at: TargetAt): void {
  const q = r.ratios;
  at("warm ready vs extract-per-task", "≥ 50×", x(q.warm_vs_extract), ge(q.warm_vs_extract, 50));
  at("warm ready vs podman", "≥ 5×", x(q.warm_vs_podman), ge(q.warm_vs_podman, 5));
  at("cold ready vs extract-per-task", "≤ 1/3 (≥ 3×)", x(q.cold_vs_extract), ge(q.cold_vs_extract, 3));
  const last = [...r.storage.points].sort((a, b) => b.n - a.n)[0];
  const first = r.storage.points.find((p) => p.n === 1);
  const n = last?.n ?? "?";
  at(`storage, ${n} instances vs tar.gz per task`, "≤ 10% (≥ 10×)", x(q.storage_vs_targz), ge(q.storage_vs_targz, 10));
  at(
    `storage, ${n} instances vs podman's disk use (all layers once, base OS + toolchain included)`,
    "≤ 10% (≥ 10×)",
    x(q.storage_vs_podman),
    ge(q.storage_vs_podman, 10),
  );
  if (last && first && last.n > 1) {
    const g = last.minisandboxStoreBytes / first.minisandboxStoreBytes;
    at(`stored bytes, ${last.n} instances vs 1`, "≤ 1.5×", `${g.toFixed(2)}×`, g <= 1.5);
  }
}

function sandboxTargets(r: Omit<BenchResults, "targets">, at: TargetAt): void {
  const k128 = r.concurrency.levels.find((l) => l.k === 128);
  const k128Ready = k128 ? `${k128.k - k128.failures}/${k128.k} ready in ${ms(k128.wallMs)}` : "not run";
  at("128 concurrent sandboxes", "all ready, 0 failures", k128Ready, k128 ? k128.failures === 0 : null);
  const warm = r.ready.variants.minisandbox_warm;
  const warmP50 = ok(warm) ? warm.echo.p50Ms : null;
  at("create → first output, p50 (warm)", "≤ 100 ms", ms(warmP50), warmP50 === null ? null : warmP50 <= 100);
  const s = r.session.inProcess;
  const sessionP50 = "p50Ms" in s ? s.p50Ms : null;
  at("session round trip, p50 (in process)", "≤ 5 ms", ms(sessionP50), sessionP50 === null ? null : sessionP50 <= 5);
  const concurrent = "concurrent" in r.session.http ? r.session.http.concurrent : undefined;
  const errors = num(concurrent, "errors");
  at(
    `${num(concurrent, "sessions") ?? "?"} sessions at once over HTTP`,
    "0 errors",
    errors === null ? "n/a" : `${errors} errors`,
    errors === null ? null : errors === 0,
  );
  serverLoadTargets(r.serverLoad, at);
  const mem = r.concurrency.levels.filter((l) => l.rssPerIdleBytes !== null).sort((a, b) => b.k - a.k)[0];
  // Both readings: summed RSS counts shared pages (libc, bash text) once per process; PSS splits them fairly.
  at(
    "memory per idle sandbox with a session, summed RSS",
    "≤ 10 MB",
    mem ? `${mb(mem.rssPerIdleBytes)} (${mem.processesPerIdle} processes, K=${mem.k})` : "n/a",
    mem ? mem.rssPerIdleBytes! <= 10 * 1024 * 1024 : null,
  );
  at(
    "memory per idle sandbox with a session, summed PSS",
    "≤ 10 MB",
    mem ? `${mb(mem.pssPerIdleBytes)} (K=${mem.k})` : "n/a",
    mem ? mem.pssPerIdleBytes! <= 10 * 1024 * 1024 : null,
  );
  const stampede = r.concurrency.cold_stampede;
  if (stampede)
    at(
      `${stampede.k} sandboxes on a cold env materialize once`,
      "1 materialization",
      `${stampede.materializations}, ${stampede.failures} failures`,
      stampede.materializations === 1 && stampede.failures === 0,
    );
}

function evaluationTargets(r: Omit<BenchResults, "targets">, at: TargetAt): void {
  for (const e of [r.evaluation.minisandbox_engine, r.evaluation.minisandbox_engine_1worker]) {
    if (e?.available && e.overheadMs !== undefined) {
      const workers = `${e.workers} worker${e.workers === 1 ? "" : "s"}`;
      at(
        `evaluation overhead per instance outside the tests, ${workers}`,
        "≤ 0.5 s",
        ms(e.overheadMs),
        e.overheadMs <= 500,
      );
    }
  }
  const pycs = Object.entries(r.ready.variants).filter(([, v]) => ok(v) && v.pyc) as [string, ReadyVariant][];
  const bad = pycs.filter(([, v]) => !v.pyc!.ok).map(([n]) => n);
  at(
    "no .pyc recompiled or rewritten (every variant)",
    "0",
    bad.length ? `stale/rewritten in ${bad.join(", ")}` : `0 (${pycs.length} variants checked)`,
    pycs.length ? bad.length === 0 : null,
  );
}

export function renderMarkdown(r: BenchResults): string {
  const L: string[] = [
    ...headerLines(r),
    ...ratioLines(r),
    ...readyLines(r),
    ...storageLines(r),
    ...concurrencyLines(r),
    ...sessionLines(r),
    ...evaluationLines(r),
    "",
    "## 6. Server load and faults (a real serve process on 127.0.0.1)",
    "",
    ...serverLoadLines(r.serverLoad),
    ...rolloutLines(r),
    "",
    "## 8. Many nodes (layer transfer over loopback; a 3-node Ray cluster simulated on this host)",
    "",
    ...fleetLines(r.fleet),
    "",
    "## 9. The dashboard with many live sandboxes (a real serve process; event streams read as a browser does)",
    "",
    ...dashboardLines(r.dashboard),
    ...cliLines(r),
    ...imagesLines(r),
    ...coldLines(r),
    ...preparationLines(r),
  ];
  if (r.notes.length) L.push("", "## Notes", "", ...r.notes.map((n) => `- ${n}`));
  return `${L.join("\n")}\n`;
}

function headerLines(r: BenchResults): string[] {
  const m = r.machine;
  const s = r.source;
  const podman = `podman ${m.podman ?? "n/a"}${m.podmanRuntime ? ` (${m.podmanRuntime})` : ""}`;
  const phases = Object.entries(r.phaseMs)
    .map(([k, v]) => `${k} ${(v / 1000).toFixed(0)} s`)
    .join(", ");
  const builds = s.builtEnvironments
    ? ` (including ${s.builtEnvironments} environment build(s), ${(s.buildMs / 1000).toFixed(0)} s)`
    : "";
  return [
    `# minisandbox bench — ${r.date}${r.quick ? " (--quick)" : ""}`,
    "",
    `Machine: ${m.cpus} × ${m.cpuModel}, ${formatBytes(m.memoryBytes)} RAM, ${m.os}, kernel ${m.kernel}, ` +
      `Node ${m.node}, bwrap ${m.bwrap ?? "n/a"}, ${podman}; ` +
      `load average ${m.loadAverageStart} at start, ${m.loadAverageEnd} at end.`,
    `Environment: ${describeSource(s)}, ${s.instances} instance(s), Python ${s.python}, ` +
      `testbeds with ${s.testbedHistory === "full" ? "their full git history" : "history up to the base commit"}.`,
    `Measured workspace (${s.instance}, single-environment workloads): ${workspaceSizes(s)}; ` +
      "for scale, SWE-bench's sympy environment: testbed 247 MB, of which git pack 203 MB; venv 23 MB. " +
      `Real first command \`python -c "import ${s.importModule}"\`.`,
    `Run took ${(r.durationMs / 1000).toFixed(0)} s (${phases})${builds}.`,
    "",
  ];
}

function ratioLines(r: BenchResults): string[] {
  const L = ["## Ratios (how many times better minisandbox is; > 1 = better)", "", "| ratio | value | what |"];
  L.push("|---|---|---|");
  for (const [k, v] of Object.entries(r.ratios)) {
    const value = v === null ? `n/a — ${r.ratio_reasons[k] ?? ""}` : x(v, 2);
    L.push(`| ${k} | ${value} | ${RATIO_MEANINGS[k as keyof BenchResults["ratios"]] ?? ""} |`);
  }
  L.push("", "## Targets", "", "| target | wanted | measured | met |", "|---|---|---|---|");
  for (const t of r.targets) {
    const met = t.met === null ? "not measured" : t.met ? "yes" : "**no**";
    L.push(`| ${t.name} | ${t.target} | ${t.measured} | ${met} |`);
  }
  return L;
}

function readyLines(r: BenchResults): string[] {
  const L = [
    "",
    `## 1. Workspace ready (create → first output), ${r.ready.runs} runs each`,
    "",
    "| variant | echo p50 | echo p90 | import p50 | import p90 | extract ÷ this | podman ÷ this | failures | .pyc |",
    "|---|---|---|---|---|---|---|---|---|",
  ];
  const extract = r.ready.variants.extract_per_task;
  const podman = r.ready.variants.podman;
  for (const [name, v] of Object.entries(r.ready.variants)) {
    if (!v.available) {
      L.push(`| ${name} | not available: ${v.reason} | | | | | | | |`);
      continue;
    }
    const vsExtract = ok(extract) ? x(extract.echo.p50Ms / v.echo.p50Ms, 1) : "n/a";
    const vsPodman = ok(podman) ? x(podman.echo.p50Ms / v.echo.p50Ms, 1) : "n/a";
    const times = [v.echo.p50Ms, v.echo.p90Ms, v.import?.p50Ms, v.import?.p90Ms].map(ms).join(" | ");
    L.push(`| ${v.label} | ${times} | ${vsExtract} | ${vsPodman} | ${v.failures} | ${pycVerdict(v)} |`);
  }
  L.push("");
  for (const v of Object.values(r.ready.variants)) if (v.available) L.push(`- ${v.label}: ${v.method}`);
  return L;
}

function storageLines(r: BenchResults): string[] {
  const L = [
    "",
    "## 2. Storage (allocated disk bytes)",
    "",
    "| N instances | minisandbox store | store + node cache (all N materialized) | logical (undeduplicated) | " +
      "tar.gz per task | podman disk use (all layers once) | podman env layers only | tar.gz ÷ store | " +
      "podman ÷ store | podman env layers ÷ store |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  const b = (n: number | null): string => (n === null ? "n/a" : formatBytes(n));
  for (const p of r.storage.points) {
    const bytes = [p.minisandboxStoreBytes, p.minisandboxBytes, p.minisandboxLogicalBytes, p.targzBytes];
    const podmanBytes = [p.podmanTotalBytes, p.podmanBytes];
    const ratios = [p.targzBytes, p.podmanTotalBytes, p.podmanBytes].map((o) => x(ratio(o, p.minisandboxStoreBytes)));
    L.push(`| ${p.n} | ${[...bytes, ...podmanBytes].map(b).join(" | ")} | ${ratios.join(" | ")} |`);
  }
  if (!r.storage.podman.available) L.push("", `podman: not available — ${r.storage.podman.reason}`);
  else L.push("", `podman: ${r.storage.podman.method}`);
  return L;
}

function concurrencyLines(r: BenchResults): string[] {
  const L = [
    "",
    "## 3. Concurrency (K sandboxes created at once on one warm environment)",
    "",
    "| K | all ready | p50 per sandbox | p99 per sandbox | failures | RSS per idle sandbox | PSS per idle sandbox | " +
      "processes |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const c of r.concurrency.levels) {
    const times = [c.wallMs, c.perSandbox?.p50Ms, c.perSandbox?.p99Ms].map(ms).join(" | ");
    const memory = `${mb(c.rssPerIdleBytes)} | ${mb(c.pssPerIdleBytes)} | ${c.processesPerIdle ?? "n/a"}`;
    L.push(`| ${c.k} | ${times} | ${c.failures} | ${memory} |`);
  }
  const st = r.concurrency.cold_stampede;
  if (st)
    L.push(
      "",
      `Cold stampede: ${st.k} sandboxes at once on an evicted layer: ${st.materializations} materialization(s), ` +
        `${st.failures} failure(s), all created in ${ms(st.wallMs)}.`,
    );
  return L;
}

function sessionLines(r: BenchResults): string[] {
  const si = r.session.inProcess;
  const h = r.session.http as Record<string, unknown>;
  return [
    "",
    "## 4. Session round trip",
    "",
    "p50Ms" in si
      ? `In process: p50 ${ms(si.p50Ms)}, p90 ${ms(si.p90Ms)}, p99 ${ms(si.p99Ms)} over ${si.n} commands.`
      : `In process: not available — ${si.reason}`,
    h["available"] === false ? `Over HTTP: not available — ${String(h["reason"])}` : `Over HTTP: ${summarizeHttp(h)}`,
  ];
}

function evaluationLines(r: BenchResults): string[] {
  const L = [
    "",
    "## 5. Evaluation throughput (gold patches, graded)",
    "",
    "| runner | instances | workers | wall | instances/min | resolved | p50 per instance | " +
      "mean overhead outside the tests |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const [name, e] of Object.entries(r.evaluation)) {
    if (!e) continue;
    if (!e.available) {
      L.push(`| ${name} | not available: ${e.reason} | | | | | | |`);
      continue;
    }
    const resolved = Number.isNaN(e.resolved) ? "n/a" : e.resolved;
    const run = `${e.instances} | ${e.workers} | ${ms(e.wallMs)} | ${e.instancesPerMinute} | ${resolved}`;
    L.push(`| ${e.label} | ${run} | ${ms(e.perInstance?.p50Ms)} | ${ms(e.overheadMs)} |`);
  }
  return L;
}

const none = (l: Leftovers): boolean => Object.values(l).every((v) => v === 0);
const left = (l: Leftovers): string =>
  none(l)
    ? "nothing left"
    : Object.entries(l)
        .filter(([, v]) => v > 0)
        .map(([k, v]) => `${v} ${k}`)
        .join(", ");

function serverLoadTargets(
  s: ServerLoadResult | Unavailable | undefined,
  at: (...a: [string, string, string, boolean | null]) => void,
) {
  if (!s?.available) return at("server load over HTTP", "0 errors, nothing left", "not run", null);
  at(
    `server load: ${s.sandboxes} sandboxes x ${s.commandsPerSandbox} commands over HTTP`,
    "0 errors",
    `${s.errors} errors, p50 ${ms(s.command.p50Ms)}, p99 ${ms(s.command.p99Ms)}`,
    s.errors === 0,
  );
  const clean = none(s.leftoversAfterLoad) && none(s.kill.leftoversAfterRestart) && none(s.disconnects.leftovers);
  at(
    `SIGKILL with ${s.kill.liveAtKill} live sandboxes, restart; disconnected clients`,
    "nothing left",
    `${s.kill.reapedAtRestart} reaped at restart; ${left(s.kill.leftoversAfterRestart)}`,
    clean && s.kill.reapedAtRestart === s.kill.liveAtKill,
  );
}

function fleetLines(f: FleetResult | Unavailable | undefined): string[] {
  if (!f) return ["Not run."];
  if (!f.available) return [`Not available — ${f.reason}`];
  const L: string[] = [];
  const t = f.transfer;
  if (!t.available) L.push(`Layer transfer: not available — ${t.reason}`);
  else {
    const mib = (b: number): string => `${(b / 1024 ** 2).toFixed(1)} MiB`;
    const names = {
      http_objects: "HTTP, missing objects (the fleet's way)",
      http_pack: "HTTP, one pack (export + zstd + import)",
      shared_dir: "shared directory (store to store)",
      plain_copy: "plain copy of the materialized tree (cp -a)",
    } as const;
    L.push(
      `One layer (${mib(t.layerBytes)} in ${t.files} files; ${mib(t.packBytes)} as a pack) into a fresh store, ` +
        `median of ${t.rounds}:`,
      "",
      "| method | time | rate | rate ÷ cp -a |",
      "|---|---:|---:|---:|",
      ...Object.entries(t.methods).map(
        ([k, v]) =>
          `| ${names[k as keyof typeof names]} | ${ms(v.ms)} | ${v.mbPerS} MB/s | ` +
          `${x(ratio(v.mbPerS, t.methods.plain_copy.mbPerS), 2)} |`,
      ),
      "",
    );
    if (t.incremental)
      L.push(
        `A second layer of the same repository after the first: ${t.incremental.objectsMoved} objects ` +
          `(${mib(t.incremental.bytesMoved)} of ${mib(t.incremental.layerBytes)}) moved in ${ms(t.incremental.ms)}; ` +
          `${t.incremental.objectsPresent} were there already.`,
        "",
      );
  }
  const c = f.cluster;
  if (!c.available) return [...L, `Cluster: not available — ${c.reason}`];
  const e1 = c.evaluation.oneNode;
  const e3 = c.evaluation.threeNodes;
  L.push(
    `Cluster up ${ms(c.clusterUpMs)}, a server on each node ${ms(c.serversUpMs)}. ` +
      `Placement decision ${c.decisionUs} µs. One sandbox at a time (create, \`true\`, delete): ` +
      `${ms(c.sandbox.directP50Ms)} directly on a node, ${ms(c.sandbox.fleetP50Ms)} through the fleet ` +
      `(placement + a Ray task): **${ms(c.sandbox.overheadP50Ms)} overhead per sandbox** ` +
      `(median of ${c.sandbox.rounds} paired rounds, alternating). ` +
      `${c.sandboxBurst.sandboxes} at once: ${c.sandboxBurst.perSecond}/s, ${c.sandboxBurst.errors} errors.`,
    "",
    "| evaluation (gold) | nodes | instances | wall | instances/min | resolved | placed |",
    "|---|---:|---:|---:|---:|---:|---|",
    ...[e1, e3].map(
      (e) =>
        `| ${e.nodes === 1 ? "1 node" : `${e.nodes} nodes`} | ${e.nodes} | ${e.instances} | ${ms(e.wallMs)} | ` +
        `${e.instancesPerMinute} | ${e.resolved} | ${Object.entries(e.placed)
          .map(([n, k]) => `${n}: ${k}`)
          .join(", ")} |`,
    ),
    "",
    `Same report on 3 nodes as on 1: ${c.sameReport ? "yes" : "NO"}. Fetches: ${c.fetches.total}, at most ` +
      `${c.fetches.maxPerNodeAndLayer} per node and layer. The simulated nodes share this machine's ${f.cpus} ` +
      "CPUs: on few cores, 3 nodes show the fleet's overhead, not a speed-up.",
  );
  return L;
}

function serverLoadLines(s: ServerLoadResult | Unavailable | undefined): string[] {
  if (!s) return ["Not run."];
  if (!s.available) return [`Not available — ${s.reason}`];
  const mib = (b: number): string => `${(b / 1024 ** 2).toFixed(0)} MiB`;
  const rss = s.serverRssBytes;
  return [
    `${s.sandboxes} clients (one token and sandbox each) × ${s.commandsPerSandbox} \`run_in_session\` commands, ` +
      `all at once: ${s.errors} errors, p50 ${ms(s.command.p50Ms)}, p99 ${ms(s.command.p99Ms)}, ` +
      `${s.commandsPerSecond} commands/s; create p50 ${ms(s.create.p50Ms)}, p99 ${ms(s.create.p99Ms)}.`,
    `Server RSS ${mib(rss.start)} at start, ${mib(rss.peak)} at peak, ${mib(rss.end)} after.`,
    `After deleting them: ${left(s.leftoversAfterLoad)}. ` +
      `SIGKILL with ${s.kill.liveAtKill} live sandboxes, then restart: ` +
      `${s.kill.reapedAtRestart} reaped, ${left(s.kill.leftoversAfterRestart)}. ` +
      `Clients gone mid-upload and mid-command: ${left(s.disconnects.leftovers)}.`,
  ];
}

function dashboardLines(d: DashboardBenchResult | Unavailable | undefined): string[] {
  if (!d) return ["Not run."];
  if (!d.available) return [`Not available — ${d.reason}`];
  const row = (what: string, x: Dist, cpu: number): string => `| ${what} | ${ms(x.p50Ms)} | ${ms(x.p99Ms)} | ${cpu}% |`;
  const b = d.browser;
  const page = b.available
    ? `The page in headless Chromium: all ${d.sandboxes} rows shown ${ms(b.firstRenderMs)} after it was opened; ` +
      `while it follows the updates its 50 ms timer runs late by p50 ${ms(b.timerLagMs.p50Ms)}, ` +
      `p99 ${ms(b.timerLagMs.p99Ms)}, at most ${ms(b.timerLagMs.maxMs)}.`
    : `The page in a browser: not measured — ${b.reason}.`;
  return [
    `${d.sandboxes} live sandboxes, each with a bash session (created in ${(d.createWallMs / 1000).toFixed(1)} s). ` +
      `8 clients × ${d.commandUnwatched.n / 8} session round trips:`,
    "",
    "| | round trip p50 | p99 | server CPU |",
    "|---|---|---|---|",
    row("nobody watching", d.commandUnwatched, d.serverCpuUnwatched),
    row("two dashboard streams open", d.commandWatched, d.serverCpuWatched),
    "",
    `A live sample of all ${d.sandboxes} sandboxes (memory, CPU, newest process) takes p50 ${ms(d.sampleMs.p50Ms)}, ` +
      `p99 ${ms(d.sampleMs.p99Ms)} of the server's event loop (in slices of 50, the API's work in between); an event ` +
      `every ${ms(d.eventIntervalMs.p50Ms)} (p50), ${(d.eventBytes / 1024).toFixed(0)} KiB each.`,
    page,
  ];
}

const RATIO_MEANINGS: Record<keyof BenchResults["ratios"], string> = {
  warm_vs_extract: "workspace ready, echo p50: extract-per-task ÷ minisandbox warm",
  warm_vs_podman: "workspace ready, echo p50: podman run ÷ minisandbox warm",
  cold_vs_extract: "workspace ready, echo p50: extract-per-task ÷ minisandbox cold",
  storage_vs_targz: "storage, largest N: tar.gz per task ÷ store",
  storage_vs_podman: "storage, largest N: podman's disk use, every layer once incl. base OS and toolchain ÷ store",
  storage_vs_podman_env_layers: "storage, largest N: podman's env layers only, without base OS and toolchain ÷ store",
  warm_import_vs_extract_import: "real first command (import) p50: extract-per-task ÷ minisandbox warm",
  warm_import_vs_podman_import: "real first command (import) p50: podman run ÷ minisandbox warm",
  eval_vs_podman: "evaluation throughput: minisandbox eval engine (else harness steps) ÷ podman",
  eval_steps_vs_podman: "evaluation throughput, the very same script: Sandbox API ÷ podman run -i",
  ...ROLLOUT_RATIO_MEANINGS,
  ...SPEED_RATIO_MEANINGS,
  ...IMAGES_RATIO_MEANINGS,
  ...COLD_RATIO_MEANINGS,
};

/** Which environment: the fixture with its history size, or the dataset. */
function describeSource(s: BenchResults["source"]): string {
  if (s.kind === "dataset") return `dataset ${s.dataset} — ${s.repo}`;
  if (!s.historyMiB)
    return (
      `fixture — ${s.repo} alone, no generated history ` +
      "(`--history-mb 0`: far smaller than a real SWE-bench testbed)"
    );
  return `fixture — ${s.repo} after a generated ${s.historyMiB} MiB git history (\`--history-mb ${s.historyMiB}\`)`;
}

function workspaceSizes(s: BenchResults["source"]): string {
  const [testbed, pack, venv] = [s.testbedBytes, s.gitPackBytes, s.venvBytes].map(formatBytes);
  return `testbed ${testbed}, of which git pack ${pack}; venv ${venv}`;
}

/** A number field of a loosely typed result (the HTTP workload's), or null. */
const num = (o: unknown, k: string): number | null =>
  o && typeof o === "object" && typeof (o as Record<string, unknown>)[k] === "number"
    ? ((o as Record<string, unknown>)[k] as number)
    : null;

function summarizeHttp(h: Record<string, unknown>): string {
  const parts = [
    `run_in_session p50 ${ms(num(h, "p50Ms"))}, p90 ${ms(num(h, "p90Ms"))} ` +
      `over ${num(h, "roundTrips") ?? "?"} sequential round trips`,
  ];
  const overhead = num(h, "httpOverheadP50Ms");
  if (overhead !== null) parts.push(`HTTP overhead at p50 ${ms(overhead)}`);
  const c = h["concurrent"];
  if (c && typeof c === "object") {
    parts.push(
      `${num(c, "sessions")} sessions at once × ${num(c, "commandsPerSession")} commands: ` +
        `p50 ${ms(num(c, "p50Ms"))}, p99 ${ms(num(c, "p99Ms"))}, ` +
        `${num(c, "commandsPerSecond")?.toFixed(0) ?? "?"} commands/s, ${num(c, "errors") ?? "?"} errors`,
    );
  }
  return `${parts.join("; ")}.`;
}

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** Two panels of horizontal bars on a log scale: time to ready (echo p50) per variant, and storage at the largest N. */
export function renderSvg(r: BenchResults): string {
  const W = 760;
  const barH = 22;
  const gap = 8;
  const left = 250;
  const right = 110;
  const plotW = W - left - right;
  const rows: {
    title: string;
    unit: (v: number) => string;
    bars: { label: string; value: number; ours: boolean }[];
  }[] = [];
  const ready = Object.values(r.ready.variants)
    .filter(ok)
    .map((v) => ({ label: v.label, value: v.echo.p50Ms, ours: v.label.startsWith("minisandbox") }));
  rows.push({
    title: "Workspace ready: create → first output (p50, log scale, lower is better)",
    unit: ms,
    bars: ready,
  });
  const last = [...r.storage.points].sort((a, b) => b.n - a.n)[0];
  if (last) {
    const bars = [
      { label: "minisandbox store", value: last.minisandboxStoreBytes, ours: true },
      { label: "tar.gz per task", value: last.targzBytes, ours: false },
      ...(last.podmanTotalBytes !== null
        ? [{ label: "podman disk use (all layers)", value: last.podmanTotalBytes, ours: false }]
        : []),
      ...(last.podmanBytes !== null ? [{ label: "podman env layers only", value: last.podmanBytes, ours: false }] : []),
    ];
    rows.push({
      title: `Storage for ${last.n} instances of ${r.source.repo} (log scale, lower is better)`,
      unit: formatBytes,
      bars,
    });
  }
  let y = 40;
  const parts: string[] = [];
  for (const row of rows) {
    parts.push(`<text x="10" y="${y}" font-size="14" font-weight="bold">${esc(row.title)}</text>`);
    y += 12;
    const vals = row.bars.map((b) => b.value).filter((v) => v > 0);
    const lo = Math.log10(Math.min(...vals)) - 0.3;
    const hi = Math.log10(Math.max(...vals)) + 0.05;
    for (const b of row.bars) {
      const w = Math.max(2, ((Math.log10(Math.max(b.value, 1e-9)) - lo) / (hi - lo)) * plotW);
      parts.push(`<text x="${left - 8}" y="${y + barH * 0.7}" font-size="12" text-anchor="end">${esc(b.label)}</text>`);
      parts.push(
        `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barH}" ` +
          `fill="${b.ours ? "#2b7a4b" : "#9aa5b1"}"/>`,
      );
      parts.push(
        `<text x="${(left + w + 6).toFixed(1)}" y="${y + barH * 0.7}" font-size="12">${esc(row.unit(b.value))}</text>`,
      );
      y += barH + gap;
    }
    y += 24;
  }
  parts.push(`<text x="10" y="${y}" font-size="11" fill="#555">${esc(footer(r))}</text>`);
  y += 14;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${y}" viewBox="0 0 ${W} ${y}" ` +
      'font-family="sans-serif">',
    '<rect width="100%" height="100%" fill="white"/>',
    '<text x="10" y="20" font-size="16" font-weight="bold">minisandbox bench</text>',
    ...parts,
    "</svg>\n",
  ].join("\n");
}

/** The chart's last line: when, where, and what was measured. */
function footer(r: BenchResults): string {
  const m = r.machine;
  const s = r.source;
  const [testbed, pack, venv] = [s.testbedBytes, s.gitPackBytes, s.venvBytes].map(formatBytes);
  const what = s.kind === "fixture" ? "fixture env" : s.dataset;
  const machine = `${m.cpus} × ${m.cpuModel} · kernel ${m.kernel} · podman ${m.podman ?? "n/a"}`;
  return `${r.date} · ${machine} · ${what} · testbed ${testbed} (git pack ${pack}), venv ${venv}`;
}
