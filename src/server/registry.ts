/**
 * The live sandboxes of one server: creation (with the --max-sandboxes budget), lookup, deletion, TTL and idle
 * reaping, and closing everything at shutdown. Each entry remembers where its workspace came from and releases
 * the provider's hold exactly once, whatever ends the sandbox.
 */
import { existsSync, realpathSync, statSync } from "node:fs";
import { resolve, sep } from "node:path";
import { Sandbox, type SandboxOptions } from "../sandbox/sandbox.js";
import type { Limits } from "../sandbox/limits.js";
import { InvalidInputError, LimitError, NotFoundError, SandboxError } from "../util/errors.js";
import { NotImplementedError } from "./errors.js";
import type { ServerMetrics } from "./metrics.js";
import type { CreateSandboxRequest } from "./models.js";
import type { ProvidedWorkspace, WorkspaceProvider } from "./provider.js";

/** The sandbox named in a URL is not (or no longer) live: HTTP 404 on every route. */
export class SandboxNotFoundError extends NotFoundError {}

export type CloseReason = "delete" | "ttl" | "idle" | "shutdown" | "exited";

export interface Entry {
  id: string;
  sandbox: Sandbox;
  createdAt: Date;
  expiresAt?: Date;
  idleTimeoutMs?: number;
  lastActive: number;
  /** Requests in progress on this sandbox (a sandbox busy with a long command is never idle). */
  inflight: number;
  source: "dir" | "instance" | "env_key" | "empty";
  dir?: string;
  instanceId?: string;
  envKey?: string;
  network: boolean;
  limits: Limits;
  labels: Record<string, string>;
  meta: Record<string, unknown>;
  isDefault: boolean;
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
  /** 0 or undefined: unlimited. */
  maxSandboxes?: number;
  /** Host directories `{dir}` may name (and anything below them); undefined: any directory. */
  allowDirs?: string[];
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

export class SandboxRegistry {
  private readonly entries = new Map<string, Entry>();
  private creating = 0;
  private closing = false;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly o: RegistryOptions) {
    this.timer = setInterval(() => this.reap(), o.reapIntervalMs ?? 250);
    this.timer.unref();
  }

  get size(): number {
    return this.entries.size;
  }

  get pendingCreations(): number {
    return this.creating;
  }

  get provider(): WorkspaceProvider | undefined {
    return this.o.provider;
  }

  get maxSandboxes(): number {
    return this.o.maxSandboxes ?? 0;
  }

  list(): Entry[] {
    return [...this.entries.values()];
  }

  sessionCount(): number {
    let n = 0;
    for (const e of this.entries.values()) n += e.sandbox.sessions.names().length;
    return n;
  }

  get(id: string): Entry {
    const e = this.entries.get(id);
    if (!e || e.sandbox.isClosed)
      throw new SandboxNotFoundError(`sandbox ${id} not found (it was deleted, reaped, or never existed)`);
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

  /** Creations in progress: shutdown waits for them (they close what they made). */
  private readonly inProgress = new Set<Promise<unknown>>();

  create(req: CreateSandboxRequest, opts: { isDefault?: boolean } = {}): Promise<Entry> {
    const p = this.doCreate(req, opts);
    const settled = p.catch(() => undefined);
    this.inProgress.add(settled);
    void settled.then(() => this.inProgress.delete(settled));
    return p;
  }

  private async doCreate(req: CreateSandboxRequest, opts: { isDefault?: boolean }): Promise<Entry> {
    if (this.closing) throw new SandboxError("the server is shutting down; no new sandboxes");
    const max = this.o.maxSandboxes ?? 0;
    if (max > 0 && this.entries.size + this.creating >= max) {
      this.o.metrics.creations.inc({ result: "rejected" });
      throw new LimitError(
        `sandbox limit reached: ${this.entries.size} live and ${this.creating} starting of at most ${max} (--max-sandboxes); delete a sandbox or retry later`,
      );
    }
    this.creating++;
    const started = performance.now();
    let provided: ProvidedWorkspace | undefined;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      try {
        provided?.release();
      } catch (e) {
        this.o.log.warn({ err: e }, "provider release failed");
      }
    };
    try {
      let source: Entry["source"] = "empty";
      let base: SandboxOptions = {};
      let dir: string | undefined;
      if (req.dir !== undefined) {
        source = "dir";
        dir = this.checkDir(req.dir);
        base = { dir };
      } else if (req.instance_id !== undefined) {
        source = "instance";
        if (!this.o.provider) {
          throw new NotImplementedError(
            "this server has no workspace provider: start it with a dataset (serve --dataset FILE) to create sandboxes from instance ids",
          );
        }
        provided = await this.o.provider.forInstance(req.instance_id);
        base = provided.options;
      } else if (req.env_key !== undefined) {
        source = "env_key";
        if (!this.o.provider?.forEnvKey)
          throw new NotImplementedError(
            "this server's workspace provider cannot create sandboxes from environment keys",
          );
        provided = await this.o.provider.forEnvKey(req.env_key);
        base = provided.options;
      }
      const limits = this.limitsFor(req.limits);
      const labels: Record<string, string> = { ...(base.labels ?? {}), ...(req.labels ?? {}) };
      if (req.instance_id) labels.instance_id = req.instance_id;
      if (req.env_key) labels.env_key = req.env_key;
      const network = req.network ?? base.network ?? false;
      const sandbox = await Sandbox.create({
        ...base,
        home: this.o.home,
        network,
        limits: { ...(base.limits ?? {}), ...limits },
        env: { ...(base.env ?? {}), ...(req.env ?? {}) },
        cwd: req.cwd ?? base.cwd,
        labels,
      });
      if (provided?.setup) {
        try {
          await provided.setup(sandbox);
        } catch (e) {
          await sandbox.close();
          throw e;
        }
      }
      const ttl = req.ttl_seconds ?? this.o.ttlSeconds;
      const idle = req.idle_timeout_seconds ?? (opts.isDefault ? undefined : this.o.idleTimeoutSeconds);
      const entry: Entry = {
        id: sandbox.id,
        sandbox,
        createdAt: sandbox.createdAt,
        expiresAt: ttl ? new Date(Date.now() + ttl * 1000) : undefined,
        idleTimeoutMs: idle ? idle * 1000 : undefined,
        lastActive: Date.now(),
        inflight: 0,
        source,
        dir,
        instanceId: req.instance_id,
        envKey: req.env_key,
        network,
        limits: sandbox.limits,
        labels,
        meta: provided?.meta ?? {},
        isDefault: opts.isDefault ?? false,
      };
      sandbox.onClose(() => {
        release();
        if (this.entries.get(entry.id) === entry) {
          // Ended by itself (holder exited, its own timeout): forget it.
          this.entries.delete(entry.id);
          entry.closeReason ??= "exited";
          this.o.metrics.closes.inc({ reason: entry.closeReason });
          this.o.log.info({ sandbox: entry.id, reason: entry.closeReason }, "sandbox closed");
        }
      });
      if (this.closing) {
        entry.closeReason = "shutdown";
        await sandbox.close();
        throw new SandboxError("the server is shutting down; no new sandboxes");
      }
      this.entries.set(entry.id, entry);
      this.o.metrics.creations.inc({ result: "ok" });
      this.o.metrics.creationLatency.observe({ source }, (performance.now() - started) / 1000);
      this.o.log.info(
        {
          sandbox: entry.id,
          source,
          dir,
          instance_id: req.instance_id,
          env_key: req.env_key,
          network,
          ms: Math.round(performance.now() - started),
        },
        "sandbox created",
      );
      for (const n of sandbox.notices) this.o.log.warn({ sandbox: entry.id }, n);
      return entry;
    } catch (e) {
      release();
      this.o.metrics.creations.inc({ result: "error" });
      throw e;
    } finally {
      this.creating--;
    }
  }

  private checkDir(dir: string): string {
    const abs = resolve(dir);
    if (!existsSync(abs) || !statSync(abs).isDirectory())
      throw new InvalidInputError(`dir ${abs}: not a directory on the server`);
    if (this.o.allowDirs) {
      const real = realpathSync(abs);
      const ok = this.o.allowDirs.some((root) => {
        const r = realpathSync(resolve(root));
        return real === r || real.startsWith(r.endsWith(sep) ? r : r + sep);
      });
      if (!ok)
        throw new InvalidInputError(
          `dir ${abs} is outside the directories this server may mount (${this.o.allowDirs.join(", ")})`,
        );
    }
    return abs;
  }

  private limitsFor(req: CreateSandboxRequest["limits"]): Limits {
    const d = this.o.defaultLimits ?? {};
    const pick = (asked: number | undefined, cap: number | undefined, name: string): number | undefined => {
      if (asked === undefined) return cap;
      if (cap !== undefined && asked > cap)
        throw new InvalidInputError(`limits.${name} ${asked} is above this server's maximum ${cap}`);
      return asked;
    };
    return {
      memoryBytes: pick(req?.memory_bytes, d.memoryBytes, "memory_bytes"),
      pids: pick(req?.pids, d.pids, "pids"),
      cpuSeconds: pick(req?.cpu_seconds, d.cpuSeconds, "cpu_seconds"),
      diskBytes: pick(req?.disk_bytes, d.diskBytes, "disk_bytes"),
    };
  }

  /** Close and forget one sandbox. */
  async delete(id: string, reason: CloseReason = "delete"): Promise<void> {
    const e = this.entries.get(id);
    if (!e) throw new SandboxNotFoundError(`sandbox ${id} not found (it was deleted, reaped, or never existed)`);
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
  }
}
