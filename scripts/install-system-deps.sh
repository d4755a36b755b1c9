#!/usr/bin/env bash
# System packages minisandbox needs (Debian/Ubuntu). Safe to re-run.
set -euo pipefail
# chromium: the tests open the dashboard and the HTML reports in a real headless browser.
pkgs=(bubblewrap gcc libc6-dev libseccomp-dev util-linux bsdutils procps zstd tar git python3 python3-venv chromium)
# For the image tests: a registry (htpasswd and token auth), tools that push, build and unpack images, a Debian root.
pkgs+=(docker-registry skopeo umoci podman runc debootstrap apache2-utils openssl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The browser tests run /usr/bin/chromium (MSB_CHROMIUM names another); without one they are skipped, loudly.
[ -x /usr/bin/chromium ] || echo "install-system-deps: no /usr/bin/chromium; browser tests need MSB_CHROMIUM" >&2

# Root-mode sandboxes map root inside to a subordinate id range, never to host uid 0, and each sandbox gets a range
# of its own (65536 ids) from a pool: reserve that pool, so that no other tool hands it out (the same default as
# src/sandbox/host.ts: 4094 ranges from 1879048192, below 2^31; MINISANDBOX_IDMAP overrides both). An entry of the
# old single shared range is widened to the pool; any other entry is the operator's and stays.
POOL="minisandbox:1879048192:268304384"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
for f in /etc/subuid /etc/subgid; do
  if ! grep -q '^minisandbox:' "$f" 2>/dev/null; then
    echo "$POOL" | $SUDO tee -a "$f" >/dev/null
  elif grep -qx 'minisandbox:1879048192:65536' "$f"; then
    $SUDO sed -i "s/^minisandbox:1879048192:65536\$/$POOL/" "$f"
  fi
done
# Files of images in the store belong to this range on the host (uid N inside -> BASE + N), never to a host user
# (the same default as src/env/store/ids.ts; MINISANDBOX_STORE_IDS overrides both).
for f in /etc/subuid /etc/subgid; do
  grep -q '^minisandbox-store:' "$f" 2>/dev/null ||
    echo "minisandbox-store:1878982656:65536" | $SUDO tee -a "$f" >/dev/null
done

# The Python package's lint, type-check and test tools, in a project-local venv (.tools/venv) from the pip index.
"$(dirname "$0")/install-python-tools.sh" >/dev/null
