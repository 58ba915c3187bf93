#!/usr/bin/env bash
# Makes sure redis-server and redis-cli are on PATH, installing Debian's redis-server when
# they are missing. Tests start their own servers on free ports; nothing here starts one.
set -euo pipefail
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  exit 0
fi
echo "redis: redis-server is missing; installing it with apt-get" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "redis: not root and no sudo: install redis-server (e.g. apt-get install redis-server) and retry" >&2
    exit 1
  fi
  sudo=sudo
fi
if ! command -v apt-get >/dev/null; then
  echo "redis: no apt-get here: install redis-server with your package manager and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends redis-server >&2
# Debian's package starts a service on 6379; the tests never use it.
command -v redis-server >/dev/null
