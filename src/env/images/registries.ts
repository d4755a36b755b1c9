/**
 * Which hosts answer for a registry: its mirrors first (`mirrors`, e.g. a pull-through cache for docker.io), then
 * the registry itself; and which may be spoken to over plain http (loopback always, others only when `insecure`).
 * From `<home>/registries.json` (`{"mirrors": {"docker.io": ["http://127.0.0.1:5000"]}, "insecure": ["lan:5000"]}`)
 * and command-line flags. A registry listed in `blocked` is only ever reached through its mirrors.
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { InvalidInputError } from "../../errors.js";
import { parseReference, registryApiHost } from "./reference.js";
import type { Endpoint } from "./registry-client.js";

export interface RegistryConfig {
  /** Registry name -> mirror URLs or hosts, tried in order before the registry itself. */
  mirrors?: Record<string, string[]>;
  /** Hosts (`host[:port]`) that may be reached over plain http. */
  insecure?: string[];
  /** Registries never contacted themselves: only through their mirrors (an air-gapped cluster, a test). */
  blocked?: string[];
}

export function registriesFile(home: string): string {
  return join(home, "registries.json");
}

/** `<home>/registries.json`, or an empty config when there is none. */
export function loadRegistryConfig(home: string): RegistryConfig {
  const file = registriesFile(home);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return {};
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new InvalidInputError(`${file} is not valid JSON: ${(e as Error).message}`);
  }
  return checkConfig(value, file);
}

function checkConfig(value: unknown, where: string): RegistryConfig {
  const v = value as RegistryConfig;
  const ok =
    typeof v === "object" &&
    v !== null &&
    [v.insecure, v.blocked].every(
      (l) => l === undefined || (Array.isArray(l) && l.every((h) => typeof h === "string")),
    ) &&
    (v.mirrors === undefined ||
      (typeof v.mirrors === "object" &&
        Object.values(v.mirrors).every((l) => Array.isArray(l) && l.every((m) => typeof m === "string"))));
  if (!ok) {
    throw new InvalidInputError(
      `${where}: expected {"mirrors": {REGISTRY: [URL...]}, "insecure": [HOST...], "blocked": [REGISTRY...]}`,
    );
  }
  return v;
}

/** `--mirror REGISTRY=URL` flags over a file's config. */
export function withMirrorFlags(config: RegistryConfig, flags: string[], insecure: string[] = []): RegistryConfig {
  const mirrors: Record<string, string[]> = { ...config.mirrors };
  const added: Record<string, string[]> = {};
  for (const f of flags) {
    const eq = f.indexOf("=");
    if (eq <= 0 || eq === f.length - 1)
      throw new InvalidInputError(`--mirror expects REGISTRY=URL, got ${JSON.stringify(f)}`, { field: "--mirror" });
    const registry = parseReference(`${f.slice(0, eq)}/x`).registry;
    added[registry] = [...(added[registry] ?? []), f.slice(eq + 1)];
  }
  for (const [registry, list] of Object.entries(added)) mirrors[registry] = [...list, ...(mirrors[registry] ?? [])];
  return { ...config, mirrors, insecure: [...(config.insecure ?? []), ...insecure] };
}

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "");
  if (h === "localhost" || h === "::1") return true;
  return isIP(h) === 4 && h.startsWith("127.");
}

/** May `hostname` be spoken to over http? Loopback, or a host marked insecure (with or without its port). */
export function httpAllowed(config: RegistryConfig): (hostname: string) => boolean {
  const insecure = new Set((config.insecure ?? []).map((h) => h.replace(/:\d+$/, "").replace(/^\[|\]$/g, "")));
  return (hostname) => isLoopback(hostname) || insecure.has(hostname.replace(/^\[|\]$/g, ""));
}

function endpointOf(spec: string, config: RegistryConfig): Endpoint {
  const hasScheme = /^https?:\/\//.test(spec);
  let url: URL;
  try {
    url = new URL(hasScheme ? spec : `https://${spec}`);
  } catch {
    throw new InvalidInputError(`invalid registry or mirror ${JSON.stringify(spec)}`);
  }
  if (!hasScheme && httpAllowed(config)(url.hostname)) url = new URL(`http://${spec}`);
  return { name: url.host, base: new URL(url.origin) };
}

/** Where to ask for `registry`'s images, in order: its mirrors, then (unless blocked) the registry's own API host. */
export function endpointsFor(registry: string, config: RegistryConfig): Endpoint[] {
  const mirrors = (config.mirrors?.[registry] ?? []).map((m) => endpointOf(m, config));
  if (config.blocked?.includes(registry)) {
    if (mirrors.length === 0) throw new InvalidInputError(`registry ${registry} is blocked and has no mirror`);
    return mirrors;
  }
  const own = endpointOf(registryApiHost(registry), config);
  return [...mirrors, { ...own, name: registry }];
}
