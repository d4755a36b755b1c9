#!/usr/bin/env bash
# The Python package's lint, type-check and test tools (integrations/python/requirements-dev.txt) in a project-local
# venv, .tools/venv (gitignored), from the pip index the user's pip configuration names. Idempotent: nothing happens
# when the venv already holds exactly these requirements. Prints the venv's python on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
req="$root/integrations/python/requirements-dev.txt"
venv="$root/.tools/venv"
stamp="$venv/.requirements.sha256"
want="$( (python3 --version; cat "$req") | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing the Python tools into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  # --retries 0: an unreachable default index fails at once and pip goes on with the configured ones.
  PIP_RETRIES=0 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
