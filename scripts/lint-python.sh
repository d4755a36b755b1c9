#!/usr/bin/env bash
# `npm run lint`, Python side: ruff (lint + format check, rules in ruff.toml) over every Python file of the
# repository, and mypy --strict over the package and its tests (integrations/python/pyproject.toml). The tools come
# from the project-local venv scripts/install-python-tools.sh keeps (installed on first use).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="$("$root/scripts/install-python-tools.sh")"
bin="$(dirname "$python")"
cd "$root"
files=()
while IFS= read -r -d '' f; do [ -e "$f" ] && files+=("$f"); done < <(git ls-files -z --cached --others --exclude-standard -- '*.py')
"$bin/ruff" check --quiet -- "${files[@]}"
"$bin/ruff" format --check --quiet -- "${files[@]}"
# The package and its tests, strictly; the test and bench drivers (scripts run by TypeScript tests) as scripts.
cache="$root/.tools/mypy-cache"
(cd integrations/python && "$bin/mypy" --no-error-summary --cache-dir "$cache")
MYPYPATH=integrations/python "$bin/mypy" --no-error-summary --cache-dir "$cache" --python-version 3.10 \
  --check-untyped-defs --allow-untyped-globals --ignore-missing-imports \
  test/fixtures/rl_driver.py test/fleet/checks.py bench/src/fleet-driver.py
