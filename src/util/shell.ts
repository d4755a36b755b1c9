/**
 * Quote a word for bash, only when it needs it: scripts compared with the SWE-bench harness's (eval.sh) keep its
 * plain words, and anything else becomes one single-quoted word.
 */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_./:=@%+,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
