/** `minisandbox view FILE`: a trajectories JSONL (the rollout writer's) as one self-contained HTML file. */
import type { Command } from "commander";
import { readFile } from "node:fs/promises";
import { basename, resolve } from "node:path";
import { InvalidInputError } from "../errors.js";
import { html } from "../view/html.js";
import { writePage } from "../view/page.js";
import { parseTrajectories, trajectoriesHtml } from "../view/trajectory.js";
import { fail, openInBrowser } from "./common.js";

export function registerViewCommand(program: Command): void {
  program
    .command("view")
    .description("write a trajectories JSONL (rollout writer) as a self-contained HTML viewer; prints its path")
    .argument("<FILE>", "trajectories JSONL")
    .option("-o, --output <FILE>", "where the page goes (default: FILE with .html)")
    .option("--open", "open it in a browser")
    .action(async (file: string, opts: { output?: string; open?: boolean }) => {
      try {
        const out = resolve(opts.output ?? `${file.replace(/\.jsonl?$/, "")}.html`);
        if (out === resolve(file)) throw new InvalidInputError(`--output ${out} would overwrite ${file}`);
        const parsed = parseTrajectories(await readFile(file, "utf8"));
        if (parsed.trajectories.length === 0)
          throw new InvalidInputError(`${file} holds no trajectory (${parsed.problems[0] ?? "it is empty"})`);
        const body = html`<header class="top"><h1>Trajectories</h1><span class="sub">${basename(file)}</span></header>
<main>${trajectoriesHtml(parsed, basename(file))}</main>`;
        await writePage(out, { title: `Trajectories ${basename(file)}`, body });
        process.stdout.write(`${out}\n`);
        if (opts.open) openInBrowser(out);
      } catch (e) {
        fail(e);
      }
    });
}
