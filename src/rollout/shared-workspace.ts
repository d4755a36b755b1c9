/**
 * One task's workspace, resolved once (one node-cache lease) and shared by every sandbox started on it: a group's
 * rollouts, their forks and the warm pool's sandboxes. The lease goes back when the last holder lets go.
 */
import type { Workspace } from "../env/workspace.js";
import { Sandbox } from "../sandbox/sandbox.js";

export class SharedWorkspace {
  private refs = 0;
  private released = false;

  constructor(
    readonly workspace: Workspace,
    private readonly onEmpty: () => void,
  ) {}

  get instanceId(): string {
    return this.workspace.instance!.instance_id;
  }

  get envKey(): string {
    return this.workspace.key;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** One more holder; the returned function lets go (once, however often it is called). */
  hold(): () => void {
    if (this.released) throw new Error("shared workspace used after release");
    this.refs++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--this.refs === 0) this.release();
    };
  }

  private release(): void {
    this.released = true;
    this.onEmpty();
    void this.workspace.release();
  }

  /** A sandbox on the workspace, set up for the task; it holds the workspace until it closes. */
  async start(): Promise<Sandbox> {
    const letGo = this.hold();
    let sb: Sandbox;
    try {
      sb = await Sandbox.create(this.workspace.options);
    } catch (e) {
      letGo();
      throw e;
    }
    sb.onClose(letGo);
    try {
      await this.workspace.setup(sb);
    } catch (e) {
      await sb.close();
      throw e;
    }
    return sb;
  }

  /**
   * `sandbox` (started on this workspace) forked into `k`: `into` (sandboxes of `start`, which hold the workspace
   * already) first, then new ones, each holding the workspace until it closes.
   */
  async fork(sandbox: Sandbox, k: number, into: Sandbox[] = []): Promise<Sandbox[]> {
    const children = await sandbox.fork(k, { into });
    for (const child of children.slice(into.length)) child.onClose(this.hold());
    return children;
  }
}
