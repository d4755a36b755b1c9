/** Platforms (`linux/amd64`, `linux/arm64/v8`): parsing, and picking one manifest of an index or manifest list. */
import { ImageInvalidError, InvalidInputError } from "../../errors.js";
import type { ImagePlatform } from "../store/index.js";
import type { Descriptor } from "./media.js";

export const DEFAULT_PLATFORM: ImagePlatform = { os: "linux", architecture: "amd64" };

const ARCH_ALIASES: Record<string, string> = { x86_64: "amd64", x86: "386", aarch64: "arm64", armhf: "arm" };

export function parsePlatform(text: string): ImagePlatform {
  const [os, arch, variant, extra] = text.trim().toLowerCase().split("/");
  if (!os || !arch || extra !== undefined || ![os, arch, variant ?? "v"].every((p) => /^[a-z0-9_.-]+$/.test(p))) {
    throw new InvalidInputError(
      `--platform expects OS/ARCH[/VARIANT] (e.g. linux/amd64), got ${JSON.stringify(text)}`,
      {
        field: "--platform",
      },
    );
  }
  return { os, architecture: ARCH_ALIASES[arch] ?? arch, ...(variant ? { variant } : {}) };
}

export function formatPlatform(p: ImagePlatform): string {
  return [p.os, p.architecture, p.variant].filter(Boolean).join("/");
}

/** arm64's only variant is v8; a platform without a variant matches any variant. */
function variantOf(p: ImagePlatform): string | undefined {
  return p.variant ?? (p.architecture === "arm64" ? "v8" : undefined);
}

export function platformMatches(have: ImagePlatform, want: ImagePlatform): boolean {
  const arch = ARCH_ALIASES[have.architecture] ?? have.architecture;
  if (have.os !== want.os || arch !== want.architecture) return false;
  return want.variant === undefined || variantOf(have) === variantOf(want);
}

/** The manifest of an index for `want`; attestations and other non-images (`unknown/unknown`) are never picked. */
export function selectManifest(manifests: Descriptor[], want: ImagePlatform, what: string): Descriptor {
  const images = manifests.filter((m) => m.platform && m.platform.os !== "unknown");
  const match = images.find((m) => platformMatches(m.platform!, want));
  if (match) return match;
  const have = [...new Set(images.map((m) => formatPlatform(m.platform!)))].join(", ") || "none";
  throw new ImageInvalidError(`${what} has no ${formatPlatform(want)} image (it has: ${have}); see --platform`);
}
