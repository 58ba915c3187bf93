#!/usr/bin/env bash
# Makes sure prometheus and promtool are on PATH, installing Debian's prometheus package when
# they are missing (it ships both). Tests start their own Prometheus on a free loopback port and
# run promtool on config/prometheus; nothing here starts one.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
echo "prometheus: prometheus or promtool is missing; installing Debian's prometheus with apt-get" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "prometheus: not root and no sudo: install prometheus (e.g. apt-get install prometheus) and retry" >&2
    exit 1
  fi
  sudo=sudo
fi
if ! command -v apt-get >/dev/null; then
  echo "prometheus: no apt-get here: install prometheus (with promtool) with your package manager and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends prometheus >&2
# Debian's package starts a service on 9090 (and the tests never use it): stop it where systemd
# runs, so it neither scrapes nor holds the port.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  $sudo systemctl stop prometheus >&2 || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null
