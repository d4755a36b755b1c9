/**
 * The trajectory viewer: a trajectories JSONL as the rollout writer writes it (`Trajectory.to_record()`, one per
 * line) shown as its groups, each group's rollouts side by side, each rollout's steps (the policy's action, the
 * environment's observation, tokens, loss mask), its reward and outcome. Every field is read defensively: a record
 * is data from an agent, not a promise about its shape.
 */
import { clip, formatMs, html, stats, type Html } from "./html.js";
import { histogram } from "./plot.js";

interface Turn {
  modelMs?: number;
  execMs?: number;
  returncode?: number;
  promptTokens?: number;
  completionTokens?: number;
  formatError: boolean;
}

interface Message {
  role: string;
  content: string;
  /** Loss mask: 1 for the policy's own tokens. */
  own: boolean;
}

export interface TrajectoryView {
  line: number;
  id: string;
  instanceId: string;
  groupId: string;
  repetition: number;
  parent: string;
  status: string;
  reward: number | null;
  resolved: boolean;
  exitStatus: string;
  failure: string;
  outcome: string;
  totalMs?: number;
  promptMessages: number;
  messages: Message[];
  turns: Turn[];
}

export interface ParsedTrajectories {
  trajectories: TrajectoryView[];
  /** Lines that are not a JSON object, with why. */
  problems: string[];
}

type Rec = Record<string, unknown>;
const isRec = (v: unknown): v is Rec => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string =>
  typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v);
const numOr = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** Every line of a JSONL text; blank lines skipped, bad lines reported by number. */
export function parseTrajectories(text: string): ParsedTrajectories {
  const out: ParsedTrajectories = { trajectories: [], problems: [] };
  text.split("\n").forEach((raw, i) => {
    if (raw.trim() === "") return;
    try {
      const v: unknown = JSON.parse(raw);
      if (isRec(v)) out.trajectories.push(toView(v, i + 1));
      else out.problems.push(`line ${i + 1}: not a JSON object`);
    } catch (e) {
      out.problems.push(`line ${i + 1}: ${(e as Error).message}`);
    }
  });
  return out;
}

function toView(r: Rec, line: number): TrajectoryView {
  const prompt = numOr(r.prompt_messages) ?? 2;
  const mask = list(r.loss_mask);
  const messages = list(r.messages).map((m, i): Message => {
    const role = isRec(m) ? str(m.role) : "";
    const own = mask.length > i ? mask[i] === 1 : i >= prompt && role === "assistant";
    return { role, content: isRec(m) ? str(m.content) : str(m), own };
  });
  const failure = isRec(r.failure) ? `${str(r.failure.kind)}: ${str(r.failure.message)}` : "";
  return {
    line,
    id: str(r.trajectory_id) || `line ${line}`,
    instanceId: str(r.instance_id),
    groupId: str(r.group_id) || str(r.instance_id),
    repetition: numOr(r.repetition) ?? 0,
    parent: str(r.parent),
    status: str(r.status) || "unknown",
    reward: numOr(r.reward) ?? null,
    resolved: r.resolved === true,
    exitStatus: str(r.exit_status),
    failure,
    outcome: describeOutcome(r.outcome),
    totalMs: isRec(r.timings) ? numOr(r.timings.total_ms) : undefined,
    promptMessages: prompt,
    messages,
    turns: list(r.turns).map(toTurn),
  };
}

function toTurn(t: unknown): Turn {
  const o = isRec(t) ? t : {};
  const usage = isRec(o.usage) ? o.usage : {};
  return {
    modelMs: numOr(o.model_ms),
    execMs: numOr(o.exec_ms),
    returncode: numOr(o.returncode),
    promptTokens: numOr(usage.prompt_tokens),
    completionTokens: numOr(usage.completion_tokens),
    formatError: o.format_error === true,
  };
}

function describeOutcome(o: unknown): string {
  if (!isRec(o)) return "";
  const tests = (name: string, v: unknown): string =>
    isRec(v) ? `${name} ${str(v.passed)}/${str(v.total)}` : `${name} –`;
  const parts = [str(o.resolution) || str(o.status), tests("FAIL_TO_PASS", o.fail_to_pass)];
  parts.push(tests("PASS_TO_PASS", o.pass_to_pass));
  if (isRec(o.failure)) parts.push(`${str(o.failure.kind)}: ${str(o.failure.message)}`);
  if (o.note) parts.push(str(o.note));
  return parts.join(" · ");
}

/** One step: an assistant message (the action) with the observations that followed it. */
interface Step {
  action?: Message;
  observations: Message[];
  turn?: Turn;
}

function stepsOf(t: TrajectoryView): { prompt: Message[]; steps: Step[] } {
  const prompt = t.messages.slice(0, t.promptMessages);
  const steps: Step[] = [];
  let turn = 0;
  for (const m of t.messages.slice(t.promptMessages)) {
    if (m.role === "assistant") steps.push({ action: m, observations: [], turn: t.turns[turn++] });
    else if (steps.length === 0) steps.push({ observations: [m] });
    else steps[steps.length - 1]!.observations.push(m);
  }
  return { prompt, steps };
}

const MAX_MESSAGE = 12_000;

function messageBlock(m: Message): Html {
  const cls = m.own ? "step own" : "step env";
  return html`<div class="${cls}"><header><span>${m.role}</span><span>loss mask ${m.own ? 1 : 0}</span>
</header><pre>${clip(m.content, MAX_MESSAGE)}</pre></div>`;
}

function turnFacts(turn: Turn | undefined): string {
  if (!turn) return "";
  const facts: string[] = [];
  if (turn.promptTokens !== undefined) facts.push(`prompt ${turn.promptTokens} tok`);
  if (turn.completionTokens !== undefined) facts.push(`completion ${turn.completionTokens} tok`);
  if (turn.modelMs !== undefined) facts.push(`model ${formatMs(turn.modelMs)}`);
  if (turn.execMs !== undefined) facts.push(`exec ${formatMs(turn.execMs)}`);
  if (turn.returncode !== undefined) facts.push(`exit ${turn.returncode}`);
  if (turn.formatError) facts.push("format error");
  return facts.join(" · ");
}

function stepHtml(s: Step, i: number): Html {
  return html`<div class="stepgroup"><h4>step ${i + 1} <span class="muted">${turnFacts(s.turn)}</span></h4>
${s.action ? messageBlock(s.action) : ""}${s.observations.map(messageBlock)}</div>`;
}

export const statusKind = (t: TrajectoryView): string =>
  t.status === "scored" ? (t.resolved ? "resolved" : "unresolved") : "infra-failure";

function rolloutHtml(t: TrajectoryView): Html {
  const { prompt, steps } = stepsOf(t);
  const reward = t.reward === null ? "none (masked)" : String(t.reward);
  return html`<div class="rollout s-${t.status === "scored" ? "scored" : "infra"}">
<h3>${t.id} <span class="pill k-${statusKind(t)}">${t.status}</span></h3>
<dl class="facts"><dt>reward</dt><dd>${reward}</dd><dt>exit</dt><dd>${t.exitStatus || "–"}</dd>
<dt>steps</dt><dd>${steps.length}</dd>
${t.totalMs !== undefined ? html`<dt>time</dt><dd>${formatMs(t.totalMs)}</dd>` : ""}
${t.parent ? html`<dt>forked from</dt><dd>${t.parent}</dd>` : ""}</dl>
${t.outcome ? html`<p class="muted">${t.outcome}</p>` : ""}${t.failure ? html`<p class="error">${t.failure}</p>` : ""}
<details><summary>prompt (${prompt.length} messages)</summary>${prompt.map(messageBlock)}</details>
${steps.map(stepHtml)}</div>`;
}

/** Trajectories by group, in file order of each group's first line; a group's rollouts by repetition. */
export function groupTrajectories(all: readonly TrajectoryView[]): Map<string, TrajectoryView[]> {
  const groups = new Map<string, TrajectoryView[]>();
  for (const t of all) groups.set(t.groupId, [...(groups.get(t.groupId) ?? []), t]);
  for (const g of groups.values()) g.sort((a, b) => a.repetition - b.repetition);
  return groups;
}

function groupHtml(id: string, ts: readonly TrajectoryView[], open: boolean): Html {
  const scored = ts.filter((t) => t.status === "scored");
  const rewards = scored.map((t) => String(t.reward)).join(", ");
  return html`<details class="group"${open ? html` open` : ""}><summary><strong>${id}</strong>
<span>${ts[0]?.instanceId ?? ""}</span><span class="muted">${ts.length} rollouts, ${scored.length} scored</span>
<span class="mono">rewards: ${rewards || "–"}</span></summary>
<div class="compare">${ts.map(rolloutHtml)}</div></details>`;
}

/** The viewer's body: summary, reward histogram, filter by status, then every group. */
export function trajectoriesHtml(parsed: ParsedTrajectories, source: string): Html {
  const all = parsed.trajectories;
  const groups = groupTrajectories(all);
  const scored = all.filter((t) => t.status === "scored");
  const resolved = scored.filter((t) => t.resolved).length;
  const rewards = scored.map((t) => t.reward ?? 0);
  const mean = rewards.length ? (rewards.reduce((a, b) => a + b, 0) / rewards.length).toFixed(3) : "–";
  const figures = stats([
    ["trajectories", all.length],
    ["groups", groups.size],
    ["scored", scored.length],
    ["infra failures", all.length - scored.length],
    ["resolved", resolved],
    ["mean reward", mean],
  ]);
  const bad = parsed.problems;
  const problems = bad.length
    ? html`<p class="error">${bad.length} unreadable line(s): ${bad.slice(0, 5).join("; ")}</p>`
    : "";
  return html`<section class="card"><h2>${source}</h2>${figures}${problems}
<h3>Reward histogram (scored rollouts)</h3>${histogram(rewards)}</section>
<section class="card traj"><fieldset class="filters"><legend>show</legend>
<label><input type="radio" name="tf" id="tf-all" checked> all</label>
<label><input type="radio" name="tf" id="tf-scored"> scored</label>
<label><input type="radio" name="tf" id="tf-infra"> infra failures</label></fieldset>
${[...groups].map(([id, ts], i) => groupHtml(id, ts, i === 0))}</section>`;
}
