#!/bin/bash
# Install mesos-gpu on a fresh Debian 12 machine, as root, with no hand steps:
# system packages, a virtual environment in .venv, the project (editable) with
# its one-machine cluster and test extras, and the one-machine cluster the demo
# and the tests run on. (A user's `pip install mesos-gpu` needs none of this.)
# Idempotent: a second run only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$(pwd)"
t0=$(date +%s)
step() { echo "[install +$(( $(date +%s) - t0 ))s] $*"; }

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
# Left by an install before the project spoke the Mesos API itself (pymesos and the
# http-parser it pinned): nothing imports them now, and nothing may.
if .venv/bin/python -c 'import pymesos' 2>/dev/null; then
  step "removing pymesos and http-parser (no longer used)"
  $PIP uninstall -q -y pymesos http-parser
fi
step "mesos-gpu and its dependencies (with the one-machine cluster's and the tests')"
$PIP install -q -e ".[localcluster,test]"

step "one-machine cluster parts (Mesos 1.11, fake NVML, NVIDIA driver files)"
.venv/bin/python -m localcluster build
step "done: $ROOT/.venv/bin/mesos-gpu"
