/** The trajectories tab: a JSONL picked from this computer, read in the browser (nothing is uploaded). */
import { html } from "../view/html.js";
import { parseTrajectories, trajectoriesHtml } from "../view/trajectory.js";
import { el, setMarkup } from "./dom.js";

export class ViewerView {
  readonly root = el("div");
  private readonly input = el("input", { attrs: { type: "file", accept: ".jsonl,.json,application/jsonl" } });
  private readonly out = el("div");

  constructor() {
    const note = el("span", {
      class: "muted",
      text: "a trajectories JSONL written by TrajectoryWriter; read here only",
    });
    this.root.append(el("section", { class: "card" }, el("div", { class: "toolbar" }, this.input, note)), this.out);
    this.input.addEventListener("change", () => void this.open());
  }

  private async open(): Promise<void> {
    const file = this.input.files?.[0];
    if (!file) return;
    try {
      const parsed = parseTrajectories(await file.text());
      setMarkup(this.out, trajectoriesHtml(parsed, file.name));
    } catch (e) {
      setMarkup(this.out, html`<p class="error">${file.name}: ${(e as Error).message}</p>`);
    }
  }
}
