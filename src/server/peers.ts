/**
 * Which servers this one may fetch layers from (the guard against request forgery through `sources`): hosts and
 * networks allowed at start (`serve --peer-allow`), plus peers an admin registered (`PUT /peers`, what a fleet does
 * as nodes come and go). Anything else is refused before a single request leaves this server.
 */
import { BlockList, isIP } from "node:net";
import { InvalidInputError, PeerNotAllowedError } from "../errors.js";
import { sourceBase, type HttpSource } from "../env/store/index.js";
import type { native } from "../wire/index.js";

/** A wire source as the store takes it (`manifest_sha256` → `manifestSha256`). */
export function toHttpSource(s: native.PeerSource): HttpSource {
  return {
    url: s.url,
    ...(s.token !== undefined ? { token: s.token } : {}),
    ...(s.manifest_sha256 !== undefined ? { manifestSha256: s.manifest_sha256 } : {}),
  };
}

interface HostRule {
  host: string;
  port?: string;
}

/** `[v6]` or a bare host, lower-cased, for comparisons. */
const bare = (host: string): string => host.replace(/^\[|\]$/g, "").toLowerCase();

export class PeerPolicy {
  private readonly networks = new BlockList();
  private readonly hosts: HostRule[] = [];
  private registered = new Set<string>();

  /** `allow`: hosts (`node1`, `10.0.0.5`, `node1:8000`) or networks (`10.0.0.0/8`, `fd00::/8`). */
  constructor(readonly allow: readonly string[] = []) {
    for (const rule of allow) this.addRule(rule);
  }

  private addRule(rule: string): void {
    const cidr = /^(.+)\/(\d{1,3})$/.exec(rule);
    if (cidr) {
      const family = isIP(cidr[1]!);
      const bits = Number(cidr[2]);
      if (!family || bits > (family === 4 ? 32 : 128))
        throw new InvalidInputError(`--peer-allow ${rule}: not a network (expected e.g. 10.0.0.0/8)`);
      this.networks.addSubnet(cidr[1]!, bits, family === 4 ? "ipv4" : "ipv6");
      return;
    }
    const hostPort = /^(\[[^\]]+\]|[^:/\s]+)(?::(\d{1,5}))?$/.exec(rule);
    if (!hostPort) throw new InvalidInputError(`--peer-allow ${rule}: expected HOST, HOST:PORT or a network CIDR`);
    const host = bare(hostPort[1]!);
    const family = isIP(host);
    if (family && !hostPort[2]) this.networks.addAddress(host, family === 4 ? "ipv4" : "ipv6");
    else this.hosts.push({ host, ...(hostPort[2] ? { port: hostPort[2] } : {}) });
  }

  /** Replace the registered peers (their origins); returns them. */
  register(urls: readonly string[]): string[] {
    this.registered = new Set(urls.map((u) => sourceBase(u).origin));
    return this.peers();
  }

  peers(): string[] {
    return [...this.registered].sort();
  }

  allowed(url: string): boolean {
    const u = sourceBase(url);
    if (this.registered.has(u.origin)) return true;
    const host = bare(u.hostname);
    const port = u.port || (u.protocol === "https:" ? "443" : "80");
    const family = isIP(host);
    if (family && this.networks.check(host, family === 4 ? "ipv4" : "ipv6")) return true;
    return this.hosts.some((r) => r.host === host && (r.port === undefined || r.port === port));
  }

  /** Refuse the request unless every source is an allowed peer. */
  check(sources: readonly { url: string }[]): void {
    for (const s of sources) {
      if (!this.allowed(s.url))
        throw new PeerNotAllowedError(
          `source ${sourceBase(s.url).origin} is not an allowed peer of this server ` +
            "(serve --peer-allow HOST|CIDR, or register it: PUT /peers)",
        );
    }
  }
}
