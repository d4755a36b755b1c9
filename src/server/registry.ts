/**
 * The live sandboxes of one server: creation (server-wide and per-principal caps), lookup (a principal sees only its
 * own sandboxes; an admin sees all), deletion, TTL and idle reaping, and closing everything at shutdown. Each sandbox
 * is started on its workspace (the one door, src/env/workspace.ts), which gives its environment back exactly once,
 * whatever ends the sandbox.
 */
import type { WorkspaceKind } from "../env/workspace.js";
import { Sandbox } from "../sandbox/sandbox.js";
import type { Limits } from "../sandbox/limits.js";
import type { BindMount } from "../sandbox/plan.js";
import { ForbiddenError, LimitError } from "../errors.js";
import type { Principal } from "./auth.js";
import type { DirRoots } from "./dir-roots.js";
import { SandboxNotFoundError, UnavailableError } from "../errors.js";

const shuttingDown = (): UnavailableError => new UnavailableError("the server is shutting down; no new sandboxes");
const notFound = (id: string): SandboxNotFoundError =>
  new SandboxNotFoundError(`sandbox ${id} not found (it was deleted, reaped, or never existed)`);
import type { ServerMetrics } from "./metrics.js";
import type { native } from "../wire/index.js";

type CreateSandboxRequest = native.CreateSandboxRequest;
import type { ProvidedWorkspace, WorkspaceProvider } from "./provider.js";
import { limitsFor, resolveSource, type ResolvedSource } from "./sandbox-source.js";

export type CloseReason = "delete" | "ttl" | "idle" | "shutdown" | "exited";

export interface Entry {
  id: string;
  sandbox: Sandbox;
  /** Name of the principal that created it. */
  owner: string;
  createdAt: Date;
  expiresAt?: Date;
  idleTimeoutMs?: number;
  lastActive: number;
  /** Requests in progress on this sandbox (a sandbox busy with a long command is never idle). */
  inflight: number;
  source: WorkspaceKind;
  dir?: string;
  instanceId?: string;
  envKey?: string;
  network: boolean;
  limits: Limits;
  labels: Record<string, string>;
  meta: Record<string, unknown>;
  isDefault: boolean;
  /** SWE-ReX's close ends the sandbox (instance-addressed runtimes, `delete_on_close`). */
  deleteOnClose: boolean;
  closeReason?: CloseReason;
}

export interface Logger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface RegistryOptions {
  home: string;
  provider?: WorkspaceProvider;
  /** Live sandboxes at most, over all principals. */
  maxSandboxes: number;
  roots: DirRoots;
  /** Defaults for sandboxes that do not say. */
  ttlSeconds?: number;
  idleTimeoutSeconds?: number;
  /** Server-wide resource limits, under which each request's limits must stay. */
  defaultLimits?: Limits;
  metrics: ServerMetrics;
  log: Logger;
  /** How often TTL / idle deadlines are checked. */
  reapIntervalMs?: number;
}

/** Sandboxes another part of the server holds: per principal, and all of them. */
export interface SandboxHoldings {
  of(name: string): number;
  total(): number;
}

export interface CreateOptions {
  isDefault?: boolean;
  /** The operator's own directory (serve --dir), mounted without the root check. */
  trustedDir?: string;
  /** A workspace the caller resolved already (e.g. an evaluation job's), used instead of the request's source. */
  provided?: ProvidedWorkspace;
  /** The operator's own binds (serve --bind), for the default sandbox. */
  trustedBinds?: BindMount[];
}

export class SandboxRegistry {
  private readonly entries = new Map<string, Entry>();
  /** Creations in progress, per owner (they count against the caps). */
  private readonly starting = new Map<string, number>();
  /** Creations in progress: shutdown waits for them (they close what they made). */
  private readonly inProgress = new Set<Promise<unknown>>();
  /** Workspaces being given back (an image's lease): shutdown waits for them, so no lease file outlives it. */
  private readonly releasing = new Set<Promise<unknown>>();
  private closing = false;
  private readonly timer: NodeJS.Timeout;
  /** Sandboxes held outside the registry (the rollout engine's), counted against the same caps. */
  private elsewhere: SandboxHoldings = { of: () => 0, total: () => 0 };

  constructor(private readonly o: RegistryOptions) {
    this.timer = setInterval(() => this.reap(), o.reapIntervalMs ?? 250);
    this.timer.unref();
  }

  get size(): number {
    return this.entries.size;
  }

  get pendingCreations(): number {
    let n = 0;
    for (const v of this.starting.values()) n += v;
    return n;
  }

  get provider(): WorkspaceProvider | undefined {
    return this.o.provider;
  }

  get maxSandboxes(): number {
    return this.o.maxSandboxes;
  }

  /** The sandboxes `who` may see. */
  list(who: Principal): Entry[] {
    return [...this.entries.values()].filter((e) => who.admin || e.owner === who.name);
  }

  sessionCount(): number {
    let n = 0;
    for (const e of this.entries.values()) n += e.sandbox.sessions.names().length;
    return n;
  }

  /** A live sandbox `who` may use; anything else is the same 404. */
  get(id: string, who: Principal): Entry {
    const e = this.entries.get(id);
    if (!e || e.sandbox.isClosed || !(who.admin || e.owner === who.name)) throw notFound(id);
    return e;
  }

  /** Mark the start / end of a request on a sandbox (idle reaping skips busy sandboxes). */
  begin(e: Entry): void {
    e.inflight++;
    e.lastActive = Date.now();
  }

  end(e: Entry): void {
    e.inflight = Math.max(0, e.inflight - 1);
    e.lastActive = Date.now();
  }

  create(req: CreateSandboxRequest, who: Principal, opts: CreateOptions = {}): Promise<Entry> {
    const p = this.createCounted(req, who, opts);
    const settled = p.catch(() => undefined);
    this.inProgress.add(settled);
    void settled.then(() => this.inProgress.delete(settled));
    return p;
  }

  /** Count `holdings` (e.g. rollouts) against the server's and each principal's caps too. */
  countAlso(holdings: SandboxHoldings): void {
    this.elsewhere = holdings;
  }

  /** The registry's sandboxes of `name`, starting ones included (not those held elsewhere). */
  ownedHere(name: string): number {
    let n = this.starting.get(name) ?? 0;
    for (const e of this.entries.values()) if (e.owner === name) n++;
    return n;
  }

  private owned(name: string): number {
    return this.ownedHere(name) + this.elsewhere.of(name);
  }

  private checkCaps(who: Principal): void {
    const live = this.entries.size + this.pendingCreations + this.elsewhere.total();
    let msg: string | undefined;
    if (live >= this.o.maxSandboxes)
      msg =
        `sandbox limit reached: ${this.entries.size} live and ${this.pendingCreations} starting ` +
        `of at most ${this.o.maxSandboxes} (--max-sandboxes)`;
    else if (who.maxSandboxes !== undefined && this.owned(who.name) >= who.maxSandboxes)
      msg = `sandbox limit reached: ${who.name} holds ${this.owned(who.name)} of at most ${who.maxSandboxes} sandboxes`;
    if (msg) {
      this.o.metrics.creations.inc({ result: "rejected" });
      throw new LimitError(`${msg}; delete a sandbox or retry later`);
    }
  }

  private async createCounted(req: CreateSandboxRequest, who: Principal, opts: CreateOptions): Promise<Entry> {
    if (this.closing) throw shuttingDown();
    if (req.network === true && !who.admin && !who.network)
      throw new ForbiddenError(
        `network: principal ${who.name} may not give sandboxes the host's network; ` +
          'the operator allows it with "network": true in its entry of the tokens file',
      );
    this.checkCaps(who);
    this.starting.set(who.name, (this.starting.get(who.name) ?? 0) + 1);
    const started = performance.now();
    let source: ResolvedSource | undefined;
    try {
      const sourceCtx = { provider: this.o.provider, roots: this.o.roots, home: this.o.home };
      source = opts.provided
        ? { ...opts.provided, done: () => {} }
        : await resolveSource(req, sourceCtx, opts.trustedDir, opts.trustedBinds);
      source.workspace.onReleased((done) => {
        const settled = done.catch((err) => this.o.log.warn({ err }, "provider release failed"));
        this.releasing.add(settled);
        void settled.then(() => this.releasing.delete(settled));
      });
      const entry = await this.launch(req, who, source, opts);
      const kind = source.workspace.kind;
      this.o.metrics.creations.inc({ result: "ok" });
      this.o.metrics.creationLatency.observe({ source: kind }, (performance.now() - started) / 1000);
      const ms = Math.round(performance.now() - started);
      this.o.log.info({ sandbox: entry.id, owner: who.name, source: kind, dir: entry.dir, ms }, "sandbox created");
      for (const n of entry.sandbox.notices) this.o.log.warn({ sandbox: entry.id }, n);
      return entry;
    } catch (e) {
      this.o.metrics.creations.inc({ result: "error" });
      throw e;
    } finally {
      // A workspace that no sandbox holds (creation failed or refused) is given back here; else when its sandbox ends.
      source?.workspace.release();
      source?.done();
      this.starting.set(who.name, (this.starting.get(who.name) ?? 1) - 1);
    }
  }

  /** The sandbox, started on the workspace with what is the server's: network, limits, env, cwd, labels. */
  private async launch(req: CreateSandboxRequest, who: Principal, src: ResolvedSource, o: CreateOptions) {
    const labels: Record<string, string> = { ...(req.labels ?? {}) };
    if (req.instance_id) labels.instance_id = req.instance_id;
    if (req.env_key) labels.env_key = req.env_key;
    const base = src.workspace.options;
    const network = req.network ?? base.network ?? false;
    const limits = limitsFor(req.limits, maximaFor(who, this.o.defaultLimits));
    const sandbox = await src.workspace.start({
      home: this.o.home,
      network,
      limits,
      env: req.env,
      cwd: req.cwd,
      labels,
    });
    const entry = this.entryFor(sandbox, req, who, src, o);
    sandbox.onClose(() => this.closed(entry));
    if (this.closing) {
      entry.closeReason = "shutdown";
      await sandbox.close();
      throw shuttingDown();
    }
    this.entries.set(entry.id, entry);
    return entry;
  }

  private entryFor(sb: Sandbox, req: CreateSandboxRequest, who: Principal, src: ResolvedSource, o: CreateOptions) {
    const ttl = req.ttl_seconds ?? this.o.ttlSeconds;
    const idle = req.idle_timeout_seconds ?? (o.isDefault ? undefined : this.o.idleTimeoutSeconds);
    const entry: Entry = {
      id: sb.id,
      sandbox: sb,
      owner: who.name,
      createdAt: sb.createdAt,
      expiresAt: ttl ? new Date(Date.now() + ttl * 1000) : undefined,
      idleTimeoutMs: idle ? idle * 1000 : undefined,
      lastActive: Date.now(),
      inflight: 0,
      source: src.workspace.kind,
      dir: src.dir,
      instanceId: req.instance_id,
      envKey: req.env_key,
      network: sb.network,
      limits: sb.limits,
      labels: sb.labels,
      meta: src.meta,
      isDefault: o.isDefault ?? false,
      deleteOnClose: (req.delete_on_close ?? false) && !o.isDefault,
    };
    return entry;
  }

  /** A sandbox ended (deleted, reaped, or by itself): forget it (its workspace lets go of itself). */
  private closed(entry: Entry): void {
    if (this.entries.get(entry.id) !== entry) return;
    this.entries.delete(entry.id);
    entry.closeReason ??= "exited";
    this.o.metrics.closes.inc({ reason: entry.closeReason });
    this.o.log.info({ sandbox: entry.id, reason: entry.closeReason }, "sandbox closed");
  }

  /** Close and forget one sandbox. */
  async delete(id: string, reason: CloseReason = "delete"): Promise<void> {
    const e = this.entries.get(id);
    if (!e) throw notFound(id);
    this.entries.delete(id);
    e.closeReason = reason;
    this.o.metrics.closes.inc({ reason });
    this.o.log.info({ sandbox: id, reason }, "sandbox closed");
    await e.sandbox.close();
  }

  private reap(): void {
    const now = Date.now();
    for (const e of this.entries.values()) {
      let reason: CloseReason | undefined;
      if (e.expiresAt && e.expiresAt.getTime() <= now) reason = "ttl";
      else if (e.idleTimeoutMs && e.inflight === 0 && now - e.lastActive >= e.idleTimeoutMs) reason = "idle";
      if (reason)
        void this.delete(e.id, reason).catch((err) => this.o.log.error({ err, sandbox: e.id }, "reaping failed"));
    }
  }

  /** Stop taking new sandboxes and close every live one. */
  async closeAll(): Promise<void> {
    this.closing = true;
    clearInterval(this.timer);
    await Promise.all([...this.inProgress]);
    await Promise.all([...this.entries.keys()].map((id) => this.delete(id, "shutdown").catch(() => undefined)));
    await Promise.all([...this.releasing]);
    await Sandbox.dropPrepared();
  }
}

/** The lower of the server's and the principal's maxima, field by field. */
function maximaFor(who: Principal, server: Limits = {}): Limits {
  const own = who.limits ?? {};
  const keys = new Set([...Object.keys(server), ...Object.keys(own)] as (keyof Limits)[]);
  const out: Limits = {};
  for (const k of keys) {
    const values = [server[k], own[k]].filter((v): v is number => v !== undefined);
    if (values.length) out[k] = Math.min(...values);
  }
  return out;
}
