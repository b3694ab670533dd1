#!/usr/bin/env bash
# `make test` step 1: the system tools the integration tests start or call, checked before anything is built.
# Missing tools are installed with apt when this runs as root (CI, a fresh machine); otherwise it stops at once
# and names the one command that installs them, so nobody meets a wall of failed tests instead.
# Then the Python library the third-party WebSocket peer uses (tests/peers/ws_peer.py): `websockets`, pinned,
# installed with pip into the `python3` on PATH (the one the tests start).
set -euo pipefail

# The version of PyPI `websockets` the peer is written and tested against.
WEBSOCKETS_VERSION=17.4

# command -> Debian package that provides it
declare -A pkg_of=(
  [redis-server]=redis-server
  [redis-cli]=redis-tools
  [redis-sentinel]=redis-sentinel
  [promtool]=prometheus
  [chromium]=chromium
  [chromedriver]=chromium-driver
  [dnsmasq]=dnsmasq-base
  [openssl]=openssl
  [curl]=curl
  [kubectl]=kubernetes-client
  [systemd-analyze]=systemd
  [python3]=python3
)

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

missing=()
for cmd in "${!pkg_of[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  # de-duplicate, stable order
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if ! can_install; then
    echo "make test: missing system tools; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "make test: installing the system tools the tests need: ${missing[*]}"
  apt_install "${missing[@]}"
fi

has_websockets() {
  python3 -c "import sys, websockets; sys.exit(websockets.__version__ != '$WEBSOCKETS_VERSION')" 2>/dev/null
}
has_websockets && exit 0
echo "make test: installing Python websockets==$WEBSOCKETS_VERSION for the WebSocket peer"
if ! python3 -m pip --version >/dev/null 2>&1; then
  if ! can_install; then
    echo "make test: python3 has no pip; install python3-pip, then run: python3 -m pip install 'websockets==$WEBSOCKETS_VERSION'" >&2
    exit 1
  fi
  apt_install python3-pip
fi
# Debian's own python3 is "externally managed" (PEP 668): pip then needs --break-system-packages.
python3 -m pip install -q --disable-pip-version-check "websockets==$WEBSOCKETS_VERSION" 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --break-system-packages "websockets==$WEBSOCKETS_VERSION"
has_websockets || { echo "make test: websockets==$WEBSOCKETS_VERSION still not importable by python3" >&2; exit 1; }
