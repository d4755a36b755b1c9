#!/usr/bin/env bash
# Puts `minisandbox` on PATH, running this checkout's build (dist/): `npm link` into npm's global prefix (what
# `npm install -g .` does for a folder), else — the prefix is not writable — a symlink in ~/.local/bin. Safe to
# re-run; a later `npm run build` needs no re-run. Prints where the command is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cli="$root/dist/src/cli/index.js"
if [ ! -f "$cli" ]; then
  echo "install-cli: $cli does not exist; run 'npm run build' first" >&2
  exit 1
fi
chmod +x "$cli"
if bin="$(npm prefix -g 2>/dev/null)/bin" && (cd "$root" && npm link --no-audit --no-fund >/dev/null 2>&1); then
  where="$bin/minisandbox"
else
  bin="$HOME/.local/bin"
  mkdir -p "$bin"
  ln -sfn "$cli" "$bin/minisandbox"
  where="$bin/minisandbox"
fi
case ":$PATH:" in
  *":$bin:"*) echo "minisandbox is on PATH: $where -> $root" ;;
  *) echo "minisandbox installed as $where -> $root; $bin is not on PATH: add it (export PATH=\"$bin:\$PATH\")" ;;
esac
