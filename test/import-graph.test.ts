/**
 * The shape of src/ and bench/src: no import cycle (type-only imports and `import()` included), and every import
 * points to the importer's own folder or to a lower layer, so each layer can be read, tested and changed without those
 * above it. The bench is the top layer and lives outside src/: nothing in the product imports it.
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
  ["session", "tasks", "wire"],
  ["sandbox"],
  ["env"],
  ["fixtures"],
  ["eval"],
  ["rollout"],
  ["server", "client"],
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
});
