/**
 * `minisandbox view FILE`: one self-contained HTML page of a trajectories JSONL (the rollout writer's) or of a
 * fleet's status (`{"nodes": [...]}`, what `python -m minisandbox.fleet status --html` hands it).
 */
import type { Command } from "commander";
import { readFile } from "node:fs/promises";
import { basename, resolve } from "node:path";
import { InvalidInputError } from "../errors.js";
import { fleetHtml, parseFleetStatus } from "../view/fleet.js";
import { html, type Html } from "../view/html.js";
import { writePage } from "../view/page.js";
import { parseTrajectories, trajectoriesHtml } from "../view/trajectory.js";
import { fail, openInBrowser } from "./common.js";

function wholeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined; // JSON lines
  }
}

/** The page's title and main content for a file's text. */
function contentOf(file: string, text: string): { title: string; main: Html } {
  const nodes = parseFleetStatus(wholeJson(text));
  if (nodes) return { title: "Fleet", main: fleetHtml(nodes) };
  const parsed = parseTrajectories(text);
  if (parsed.trajectories.length === 0)
    throw new InvalidInputError(`${file} holds no trajectory (${parsed.problems[0] ?? "it is empty"})`);
  return { title: "Trajectories", main: trajectoriesHtml(parsed, basename(file)) };
}

export function registerViewCommand(program: Command): void {
  program
    .command("view")
    .description("write a trajectories JSONL (or a fleet's status) as a self-contained HTML page; prints its path")
    .argument("<FILE>", "trajectories JSONL, or a fleet status JSON")
    .option("-o, --output <FILE>", "where the page goes (default: FILE with .html)")
    .option("--open", "open it in a browser")
    .action(async (file: string, opts: { output?: string; open?: boolean }) => {
      try {
        const out = resolve(opts.output ?? `${file.replace(/\.jsonl?$/, "")}.html`);
        if (out === resolve(file)) throw new InvalidInputError(`--output ${out} would overwrite ${file}`);
        const { title, main } = contentOf(file, await readFile(file, "utf8"));
        const body = html`<header class="top"><h1>${title}</h1><span class="sub">${basename(file)}</span></header>
<main>${main}</main>`;
        await writePage(out, { title: `${title} ${basename(file)}`, body });
        process.stdout.write(`${out}\n`);
        if (opts.open) openInBrowser(out);
      } catch (e) {
        fail(e);
      }
    });
}
