/**
 * The shape of src/ and bench/src: no import cycle (type-only imports and `import()` included), and every import
 * points to the importer's own folder or to a lower layer, so each layer can be read, tested and changed without those
 * above it. The bench is the top layer and lives outside src/: nothing in the product imports it. One door to a
 * sandbox (only src/env/workspace.ts starts one for a workspace); an SDK free of the engine.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SRC = join(ROOT, "src");
const BENCH = join(ROOT, "bench", "src");

/** Lowest first. A module may import from its own part of src/ or from a part of a lower layer, never sideways. */
const LAYERS: string[][] = [
  ["errors.ts"],
  ["util"],
  ["wire"],
  ["session", "tasks", "view"],
  ["sandbox"],
  ["env"],
  ["fixtures"],
  ["eval"],
  ["rollout"],
  ["server", "client", "dashboard"],
  ["index.ts"],
  ["cli"],
  ["bench"],
];

const inside = (dir: string, file: string): boolean => !relative(dir, file).startsWith("..");

/** The part a file belongs to: `bench` for bench/src, else its top folder of src/ (its own name at the top). */
function partOf(file: string): string {
  return inside(BENCH, file) ? "bench" : relative(SRC, file).split("/")[0]!;
}

function layerOf(part: string): number {
  return LAYERS.findIndex((parts) => parts.includes(part));
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Every module specifier of a file: imports, re-exports, `import type`, `import("…")` calls and type references. */
function specifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      if (ts.isStringLiteral(node.moduleSpecifier)) out.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const arg = node.arguments[0];
      if (arg && ts.isStringLiteralLike(arg)) out.push(arg.text);
    } else if (ts.isImportTypeNode(node)) {
      const arg = node.argument;
      if (ts.isLiteralTypeNode(arg) && ts.isStringLiteral(arg.literal)) out.push(arg.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** file -> the files it imports (relative specifiers), for every module of src/ and bench/src. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of [...sourceFiles(SRC), ...sourceFiles(BENCH)]) {
    const targets = specifiers(file)
      .filter((s) => s.startsWith("."))
      .map((s) => resolve(dirname(file), s).replace(/\.js$/, ".ts"));
    graph.set(file, targets);
  }
  return graph;
}

/** One cycle per strongly connected component of more than one file (or a file importing itself). */
function cycles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const connect = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component);
  };
  for (const v of graph.keys()) if (!index.has(v)) connect(v);
  return found;
}

const show = (file: string): string => relative(ROOT, file);

test("src/ and bench/src have no import cycle, type-only imports included", () => {
  const found = cycles(importGraph()).map((c) => c.map(show).sort().join(" <-> "));
  assert.deepEqual(found, [], `import cycles:\n${found.join("\n")}`);
});

test("every import goes to the importer's own part of src/ or to a lower layer", () => {
  const graph = importGraph();
  const unplaced = [...new Set([...graph.keys()].map(partOf))].filter((p) => layerOf(p) < 0);
  assert.deepEqual(unplaced, [], "parts of src/ missing from LAYERS");
  const wrong: string[] = [];
  for (const [file, targets] of graph) {
    for (const target of targets) {
      if (!inside(SRC, target) && !inside(BENCH, target)) {
        wrong.push(`${show(file)} -> ${show(target)} (outside src/ and bench/src)`);
        continue;
      }
      const [from, to] = [partOf(file), partOf(target)];
      if (from !== to && layerOf(to) >= layerOf(from)) wrong.push(`${show(file)} -> ${show(target)}`);
    }
  }
  assert.deepEqual(wrong, [], `imports against the layer order ${LAYERS.map((l) => l.join("/")).join(" → ")}`);
});

/** What the SDK may import: the wire contract, errors, util, and the in-process sandbox and session shapes. */
const SDK_MAY_IMPORT = new Set(["client", "wire", "errors.ts", "util", "sandbox", "session"]);

test("the SDK imports nothing of the engine: its types come from the wire contract", () => {
  const wrong: string[] = [];
  for (const [file, targets] of importGraph())
    if (partOf(file) === "client")
      for (const target of targets)
        if (!SDK_MAY_IMPORT.has(partOf(target))) wrong.push(`${show(file)} -> ${show(target)}`);
  assert.deepEqual(wrong, [], "src/client imports the engine (take the type from src/wire instead)");
});

/** The one door: the only module that starts a sandbox for a workspace (src/env/workspace.ts, `Workspace.start`). */
const DOOR = "src/env/workspace.ts";
/**
 * Sandboxes that are not workspaces: the sandbox's own (its doctor), and those that make a layer (a build's, and the
 * one deriving an image's chronological history).
 */
const NOT_WORKSPACES = ["src/sandbox/", "src/env/build.ts", "src/env/image-history-derive.ts"];

/** `Sandbox.create(...)` calls in a file, on the core class (src/sandbox/sandbox.ts) however it was imported. */
function sandboxCreations(file: string, text = readFileSync(file, "utf8")): number {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const core = (spec: string): boolean => resolve(dirname(file), spec).replace(/\.js$/, ".ts") === CORE_SANDBOX;
  const names = new Set<string>();
  const namespaces = new Set<string>();
  for (const st of source.statements) {
    if (!ts.isImportDeclaration(st) || !ts.isStringLiteral(st.moduleSpecifier) || !core(st.moduleSpecifier.text))
      continue;
    const bindings = st.importClause?.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) namespaces.add(bindings.name.text);
    if (bindings && ts.isNamedImports(bindings))
      for (const el of bindings.elements) if ((el.propertyName ?? el.name).text === "Sandbox") names.add(el.name.text);
  }
  const isCore = (e: ts.Expression): boolean =>
    (ts.isIdentifier(e) && names.has(e.text)) ||
    (ts.isPropertyAccessExpression(e) &&
      e.name.text === "Sandbox" &&
      ts.isIdentifier(e.expression) &&
      namespaces.has(e.expression.text));
  let found = 0;
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
      const callee = node.expression;
      if (callee.name.text === "create" && isCore(callee.expression)) found++;
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const CORE_SANDBOX = join(SRC, "sandbox", "sandbox.ts");

test("one door: only src/env/workspace.ts starts a sandbox for a workspace (src/ and bench/src)", () => {
  const doors: string[] = [];
  for (const file of [...sourceFiles(SRC), ...sourceFiles(BENCH)]) {
    const at = show(file);
    if (at === DOOR || NOT_WORKSPACES.some((p) => at.startsWith(p))) continue;
    if (sandboxCreations(file) > 0) doors.push(at);
  }
  assert.deepEqual(doors, [], "a second door: start sandboxes through resolveWorkspace / openSandbox instead");
  assert.ok(sandboxCreations(join(ROOT, DOOR)) > 0, "the door itself starts them");
});

test("the checks see what they must: a planted cycle and a planted upward import are found", () => {
  const a = join(SRC, "util", "a.ts");
  const b = join(SRC, "util", "b.ts");
  const planted = new Map<string, string[]>();
  planted.set(a, [b]);
  planted.set(b, [a]);
  assert.equal(cycles(planted).length, 1);
  assert.ok(layerOf(partOf(join(SRC, "env", "x.ts"))) > layerOf(partOf(join(SRC, "sandbox", "x.ts"))));
  assert.ok(layerOf(partOf(join(BENCH, "run.ts"))) > layerOf(partOf(join(SRC, "cli", "index.ts"))), "bench on top");
  const graph = importGraph();
  assert.ok(graph.has(join(BENCH, "index.ts")), "bench/src is part of the graph");
  assert.ok(
    (graph.get(join(BENCH, "fleet.ts")) ?? []).some((t) => partOf(t) === "util"),
    "bench/src's imports of src/ resolve into src/",
  );
  const typeOnly = specifiers(join(SRC, "eval", "runner", "sandbox.ts"));
  assert.ok(typeOnly.includes("../../env/workspace.js"), "type-only imports are part of the graph");
  const plantedFile = join(SRC, "server", "x.ts");
  const doors = [
    'import { Sandbox } from "../sandbox/sandbox.js";\nawait Sandbox.create({});',
    'import { Sandbox as Core } from "../sandbox/sandbox.js";\nconst s = await Core.create(o);',
    'import * as sb from "../sandbox/sandbox.js";\nsb.Sandbox.create({ dir });',
  ];
  for (const text of doors) assert.equal(sandboxCreations(plantedFile, text), 1, text);
  const notADoor = 'import { Sandbox } from "../index.js";\nawait Sandbox.create({ instance });';
  assert.equal(sandboxCreations(plantedFile, notADoor), 0, "the root façade goes through the door");
});
