import { InvalidInputError } from "../errors.js";

/** Parse "512M", "2G", "1.5g", "4096" (bytes) into bytes. */
export function parseSize(text: string | number): number {
  if (typeof text === "number") return text;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$/i.exec(text);
  if (!m) throw new InvalidInputError(`invalid size ${JSON.stringify(text)} (expected e.g. 512M, 2G, 1048576)`);
  const unit = m[2]!.toLowerCase();
  const mult = unit === "k" ? 1024 : unit === "m" ? 1024 ** 2 : unit === "g" ? 1024 ** 3 : unit === "t" ? 1024 ** 4 : 1;
  return Math.floor(parseFloat(m[1]!) * mult);
}

export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}
