#!/usr/bin/env bash
# System packages minisandbox needs (Debian/Ubuntu). Safe to re-run.
set -euo pipefail
pkgs=(bubblewrap gcc libc6-dev util-linux bsdutils procps zstd tar git python3 python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
