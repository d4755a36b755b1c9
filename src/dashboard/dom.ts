/** A few DOM helpers. Text goes in as text; markup only from `src/view` renderers, which escape every value. */
import type { Html } from "../view/html.js";

interface Props {
  class?: string;
  text?: string;
  attrs?: Record<string, string>;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Node[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (props.class) e.className = props.class;
  if (props.text !== undefined) e.textContent = props.text;
  for (const [k, v] of Object.entries(props.attrs ?? {})) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

/** Set a node's text, touching the DOM only when it changed. */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) node.textContent = text;
}

const shown = new WeakMap<Element, string>();

/** Put a renderer's markup in a node (only when it changed). */
export function setMarkup(node: Element, markup: Html): void {
  if (shown.get(node) === markup.text) return;
  shown.set(node, markup.text);
  node.innerHTML = markup.text;
}

/** A card with a title and a body to fill. */
export function card(title: string, body: HTMLElement): HTMLElement {
  return el("section", { class: "card" }, el("h2", { text: title }), body);
}

export function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export const clock = (at: number): string => new Date(at).toLocaleTimeString([], { hour12: false });
