#!/usr/bin/env bash
# Optional baselines for `npm run bench`: podman (runtime runc) and a minimal Debian base image.
# The bench never installs system packages itself; it prints this script's name when podman is missing.
# Idempotent: safe to re-run. Needs root (or sudo) and the Debian mirror apt already uses.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

pkgs=(podman runc debootstrap pigz)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# crun refuses cgroup v1 hybrid hosts and default ulimits need CAP_SYS_RESOURCE: use runc, no default ulimits.
conf=/etc/containers/containers.conf
want=$'[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'
if [ ! -f "$conf" ] || ! grep -q 'runtime = "runc"' "$conf"; then
  $SUDO mkdir -p /etc/containers
  printf '%s' "$want" | $SUDO tee "$conf" >/dev/null
fi

# Base image: debootstrap minbase (+ git, which evaluation needs) from the mirror apt is configured with.
image=minisandbox-bench-base
has_git() { $SUDO podman run --rm --network none "$image" sh -c 'command -v git' >/dev/null 2>&1; }
if ! $SUDO podman image exists "$image" 2>/dev/null || ! has_git; then
  sources="/etc/apt/sources.list /etc/apt/sources.list.d/*.sources"
  # shellcheck disable=SC2086 # the glob in $sources is meant to expand
  mirror=$(grep -rhoE '(URIs:|deb) +https?://[^ ]+' $sources 2>/dev/null \
    | grep -v security | grep -m1 -oE 'https?://[^ ]+' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  dir=$(mktemp -d /var/tmp/msb-debootstrap.XXXXXX)
  trap '$SUDO rm -rf "$dir"' EXIT
  $SUDO debootstrap --variant=minbase --include=git bookworm "$dir" "$mirror" >/dev/null
  $SUDO rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
  $SUDO tar -C "$dir" -c . | $SUDO podman import - "$image" >/dev/null
fi
$SUDO podman image exists "$image"
echo "bench baselines ready: $(podman --version), runtime runc, image $image"
