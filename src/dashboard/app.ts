/**
 * The dashboard page: sign in (the token is kept in this tab's sessionStorage and sent as X-API-Key; a `#token=`
 * fragment, which never reaches the server, is taken and removed from the address), then the live view fed by the
 * server's event stream (read with fetch, so the header goes with it), and the trajectory viewer.
 */
import type { DashboardSnapshot } from "../view/dashboard-data.js";
import { el, setText } from "./dom.js";
import { LiveView } from "./live.js";
import { ViewerView } from "./viewer.js";

const TOKEN_KEY = "minisandbox.token";

class SignedOut extends Error {}

function takeFragmentToken(): void {
  const m = /^#token=(.+)$/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]!));
  history.replaceState(null, "", location.pathname + location.search);
}

async function refusal(res: Response): Promise<SignedOut> {
  let detail = `HTTP ${res.status}`;
  try {
    detail = String(((await res.json()) as { detail?: unknown }).detail ?? detail);
  } catch {
    /* not JSON */
  }
  return new SignedOut(`the server refused the token: ${detail}`);
}

async function getState(token: string): Promise<DashboardSnapshot> {
  const res = await fetch("state", { headers: { "X-API-Key": token }, cache: "no-store" });
  if (res.status === 401 || res.status === 403) throw await refusal(res);
  if (!res.ok) throw new Error(`GET /dashboard/state: HTTP ${res.status}`);
  return (await res.json()) as DashboardSnapshot;
}

/** Read server-sent events from one response until it ends; each `data:` block is a snapshot. */
async function readEvents(res: Response, onSnapshot: (s: DashboardSnapshot) => void): Promise<void> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
      const data = buf
        .slice(0, i)
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice(6))
        .join("\n");
      buf = buf.slice(i + 2);
      if (data) onSnapshot(JSON.parse(data) as DashboardSnapshot);
    }
  }
}

/** The event stream, reconnected with backoff until the token is refused. */
async function stream(token: string, onSnapshot: (s: DashboardSnapshot) => void, status: (s: string) => void) {
  for (let delay = 1000; ; delay = Math.min(delay * 2, 10_000)) {
    try {
      const res = await fetch("events", { headers: { "X-API-Key": token }, cache: "no-store" });
      if (res.status === 401 || res.status === 403) throw await refusal(res);
      if (res.ok && res.body) {
        status("live");
        delay = 500;
        await readEvents(res, onSnapshot);
      }
    } catch (e) {
      if (e instanceof SignedOut) throw e;
    }
    status("reconnecting…");
    await new Promise((r) => setTimeout(r, delay));
  }
}

function signIn(app: HTMLElement, message = ""): void {
  const input = el("input", { attrs: { type: "password", autocomplete: "off", "aria-label": "token" } });
  const form = el(
    "form",
    { class: "card login" },
    el("h2", { text: "minisandbox dashboard" }),
    el("p", { text: "The server's token (its X-API-Key, in <home>/server/token)." }),
    el("p", { text: "`minisandbox dashboard` prints a link that signs in by itself." }),
    el("p", { class: "muted", text: "Kept in this tab only (sessionStorage), sent as a header, never as a cookie." }),
    input,
    el("p", {}, el("button", { text: "Sign in", attrs: { type: "submit" } })),
    el("p", { class: "error", text: message }),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    void start(app);
  });
  app.replaceChildren(form);
  input.focus();
}

function shell(app: HTMLElement, principal: string): { live: LiveView; status: HTMLElement } {
  const live = new LiveView();
  const viewer = new ViewerView();
  const status = el("span", { class: "status", text: "connecting…" });
  const body = el("main", {}, live.root);
  const tab = (name: string, view: HTMLElement) => {
    const b = el("button", { text: name, attrs: { type: "button", "aria-selected": String(view === live.root) } });
    b.addEventListener("click", () => {
      body.replaceChildren(view);
      for (const x of tabs.children) x.setAttribute("aria-selected", String(x === b));
    });
    return b;
  };
  const tabs = el("nav", { class: "tabs" }, tab("Live", live.root), tab("Trajectories", viewer.root));
  const out = el("button", { text: "sign out", attrs: { type: "button" } });
  out.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  const header = el("header", { class: "top" }, el("h1", { text: "minisandbox" }), tabs);
  header.append(el("span", { class: "sub", text: principal }), status, out);
  app.replaceChildren(header, body);
  return { live, status };
}

async function start(app: HTMLElement): Promise<void> {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return signIn(app);
  try {
    const first = await getState(token);
    const { live, status } = shell(app, `${first.principal.name}${first.principal.admin ? " (admin)" : ""}`);
    live.render(first);
    await stream(
      token,
      (s) => live.render(s),
      (s) => {
        setText(status, s);
        status.className = `status ${s === "live" ? "live" : "down"}`;
      },
    );
  } catch (e) {
    if (!(e instanceof SignedOut)) {
      app.replaceChildren(el("p", { class: "card error", text: `${(e as Error).message}; retrying…` }));
      setTimeout(() => void start(app), 3000);
      return;
    }
    sessionStorage.removeItem(TOKEN_KEY);
    signIn(app, e.message);
  }
}

takeFragmentToken();
void start(document.getElementById("app")!);
