#!/bin/bash
# Install mesos-gpu on a fresh Debian 12 machine, as root, with no hand steps:
# system packages, a virtual environment in .venv, the project (editable) with
# its test extras, and the one-machine cluster the demo and the tests run on.
# Idempotent: a second run only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$(pwd)"
t0=$(date +%s)
step() { echo "[install +$(( $(date +%s) - t0 ))s] $*"; }

# http-parser 0.9.0 (a pymesos dependency) has a C extension that does not build
# on Python >= 3.11: install it with only its pure-Python parser. Also what a
# plain `pip install .` into another environment needs first:
#   ./install.sh http-parser /path/to/venv/bin/python
install_http_parser() {
  local python="$1" tmp
  tmp=$(mktemp -d)
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$tmp" http-parser==0.9.0
  tar xzf "$tmp"/http-parser-0.9.0.tar.gz -C "$tmp"
  sed -i 's/run_setup(not IS_PYPY)/run_setup(False)/' "$tmp/http-parser-0.9.0/setup.py"
  rm -f "$tmp"/http-parser-0.9.0/http_parser/*.so
  "$python" -m pip install -q "$tmp/http-parser-0.9.0"
  rm -rf "$tmp"
}
if [ "${1:-}" = "http-parser" ]; then
  install_http_parser "${2:?usage: install.sh http-parser PYTHON}"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "install.sh: must run as root (it installs Debian packages and uses cgroups)" >&2; exit 1
fi

PKGS="docker.io busybox-static libsvn1 libapr1 libcurl4 libsasl2-2 zlib1g libssl3 libssl-dev \
      g++ gcc curl python3-venv bc iproute2 debootstrap docker-registry apache2-utils openssl podman systemd \
      chromium chromium-driver zookeeper prometheus"
missing=$(for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done)
if [ -n "$missing" ]; then
  step "apt packages: $(echo $missing)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # The tests run their own registry on 127.0.0.1; the package's service would
  # listen on every interface (:5000) on a host booted with systemd.
  if echo "$missing" | grep -qw docker-registry && [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  fi
  # Prometheus is here for examples/monitoring's test (promtool, a server of the test's
  # own on 127.0.0.1); the package's service would scrape and listen on :9090.
  if echo "$missing" | grep -qw prometheus && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service prometheus-node-exporter.service >/dev/null 2>&1 || true
  fi
  # Debian's `zookeeper` is jars and scripts only (its service is `zookeeperd`):
  # the tests start their own server on 127.0.0.1 (localcluster/zookeeper.py).
fi

if [ ! -x .venv/bin/python ]; then
  step "virtual environment .venv"
  python3 -m venv .venv
fi
PIP=".venv/bin/pip"
if ! .venv/bin/python -c 'import http_parser' 2>/dev/null; then
  step "http-parser 0.9.0 (pure-Python parser)"
  install_http_parser .venv/bin/python
fi
step "mesos-gpu and its dependencies"
$PIP install -q -e ".[test]"

step "one-machine cluster parts (Mesos 1.11, fake NVML, NVIDIA driver files)"
.venv/bin/python -m localcluster build
step "done: $ROOT/.venv/bin/mesos-gpu"
