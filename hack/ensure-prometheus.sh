#!/usr/bin/env bash
# Makes sure prometheus and promtool are on PATH, installing Debian's prometheus package when
# they are missing (it ships both). Tests start their own Prometheus on a free loopback port and
# run promtool on config/prometheus; nothing here starts one.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
"$(dirname "$0")/ensure-package.sh" prometheus prometheus promtool
# Debian's package starts a service on 9090 (and the tests never use it): stop it where systemd
# runs, so it neither scrapes nor holds the port.
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  $sudo systemctl stop prometheus >&2 || true
fi
