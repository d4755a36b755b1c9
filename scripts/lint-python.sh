#!/usr/bin/env bash
# `npm run lint` (with --fix: `npm run format`), Python side: ruff (lint + format check, rules in ruff.toml) over
# every Python file of the repository, and mypy --strict over the package and its tests (pyproject.toml of
# integrations/python). The tools come from the project-local venv scripts/install-python-tools.sh keeps.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="$("$root/scripts/install-python-tools.sh")"
bin="$(dirname "$python")"
cd "$root"
# Every Python file git tracks or would track (new ones included), that still exists.
files=()
while IFS= read -r -d '' f; do
  [ -e "$f" ] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- '*.py')
if [ "${1:-}" = "--fix" ]; then  # npm run format: fix what ruff can, then check the rest
  "$bin/ruff" check --quiet --fix -- "${files[@]}" || true
  "$bin/ruff" format --quiet -- "${files[@]}"
fi
"$bin/ruff" check --quiet -- "${files[@]}"
if ! "$bin/ruff" format --check --quiet -- "${files[@]}"; then
  echo "python: files above are not formatted; npm run format formats them" >&2
  exit 1
fi
# The package and its tests, strictly; the test and bench drivers (scripts run by TypeScript tests) as scripts.
cache="$root/.tools/mypy-cache"
(cd integrations/python && "$bin/mypy" --no-error-summary --cache-dir "$cache")
MYPYPATH=integrations/python "$bin/mypy" --no-error-summary --cache-dir "$cache" --python-version 3.10 \
  --check-untyped-defs --allow-untyped-globals --ignore-missing-imports \
  test/fixtures/rl_driver.py test/fleet/checks.py bench/src/fleet-driver.py
