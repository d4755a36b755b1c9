#!/usr/bin/env bash
# One command for a fresh machine: system packages, npm dependencies, build, `minisandbox` on PATH, a health check,
# then the main job (build a small real dataset's environments, evaluate gold and empty predictions) on a bundled
# example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
npm ci --no-audit --no-fund
npm run build
scripts/install-cli.sh
node dist/src/cli/index.js doctor
node dist/src/cli/index.js demo "$@"
