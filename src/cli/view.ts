/**
 * `minisandbox view FILE`: one self-contained HTML page of a trajectories JSONL (the rollout writer's) or of a
 * fleet's status (`{"nodes": [...]}`, what `python -m minisandbox.fleet status --html` hands it, or what
 * `fleet status --json` prints).
 */
import type { Command } from "commander";
import { readFile } from "node:fs/promises";
import { basename, resolve } from "node:path";
import { InvalidInputError } from "../errors.js";
import type { Html } from "../view/html.js";
import { fail, openInBrowser } from "./common.js";

/** The page's title and main content for a file's text. */
async function contentOf(file: string, text: string): Promise<{ title: string; main: Html }> {
  const [{ fleetHtml, fleetStatusOf }, { parseTrajectories, trajectoriesHtml }] = await Promise.all([
    import("../view/fleet.js"),
    import("../view/trajectory.js"),
  ]);
  const nodes = fleetStatusOf(text);
  if (nodes) return { title: "Fleet", main: fleetHtml(nodes) };
  const parsed = parseTrajectories(text);
  if (parsed.trajectories.length === 0)
    throw new InvalidInputError(
      `${file} is neither a trajectories JSONL nor a fleet's status (${parsed.problems[0] ?? "it is empty"}); ` +
        "give the rollout writer's JSONL, or what python -m minisandbox.fleet status --json prints",
    );
  return { title: "Trajectories", main: trajectoriesHtml(parsed, basename(file)) };
}

export function registerViewCommand(program: Command): void {
  program
    .command("view")
    .description("write a trajectories JSONL (or a fleet's status) as a self-contained HTML page; prints its path")
    .argument("<FILE>", "trajectories JSONL, or a fleet's status (JSON, or `fleet status --json` output)")
    .option("-o, --output <FILE>", "where the page goes (default: FILE with .html)")
    .option("--open", "open it in a browser")
    .action(async (file: string, opts: { output?: string; open?: boolean }) => {
      try {
        const out = resolve(opts.output ?? `${file.replace(/\.jsonl?$/, "")}.html`);
        if (out === resolve(file)) throw new InvalidInputError(`--output ${out} would overwrite ${file}`);
        const text = await readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
          throw new InvalidInputError(`${file} cannot be read (${e.code ?? e.message}); give a file that exists`);
        });
        const { title, main } = await contentOf(file, text);
        const [{ html }, { writePage }] = await Promise.all([import("../view/html.js"), import("../view/page.js")]);
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
