#!/usr/bin/env bash
# `make test` step 1: the system tools the integration tests start or call, checked before anything is built.
# Missing tools are installed with apt when this runs as root (CI, a fresh machine); otherwise it stops at once
# and names the one command that installs them, so nobody meets a wall of failed tests instead.
set -euo pipefail

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
)

missing=()
for cmd in "${!pkg_of[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# de-duplicate, stable order
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make test: installing the system tools the tests need: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  exit 0
fi
echo "make test: missing system tools; install them with:" >&2
echo "  sudo apt-get install -y ${missing[*]}" >&2
exit 1
