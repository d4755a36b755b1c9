#!/usr/bin/env bash
# System packages minisandbox needs (Debian/Ubuntu). Safe to re-run.
set -euo pipefail
pkgs=(bubblewrap gcc libc6-dev libseccomp-dev util-linux bsdutils procps zstd tar git python3 python3-venv)
# For the image tests: a registry (htpasswd and token auth), tools that push, build and unpack images, a Debian root.
pkgs+=(docker-registry skopeo umoci podman runc debootstrap apache2-utils openssl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Root-mode sandboxes map root inside to a subordinate id range, never to host uid 0: reserve that range, so that
# no other tool hands it out (the same default as src/sandbox/host.ts; MINISANDBOX_IDMAP overrides both).
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
for f in /etc/subuid /etc/subgid; do
  grep -q '^minisandbox:' "$f" 2>/dev/null || echo "minisandbox:1879048192:65536" | $SUDO tee -a "$f" >/dev/null
done
# Files of images in the store belong to this range on the host (uid N inside -> BASE + N), never to a host user
# (the same default as src/env/store/ids.ts; MINISANDBOX_STORE_IDS overrides both).
for f in /etc/subuid /etc/subgid; do
  grep -q '^minisandbox-store:' "$f" 2>/dev/null ||
    echo "minisandbox-store:1878982656:65536" | $SUDO tee -a "$f" >/dev/null
done
