#!/usr/bin/env bash
# ensure-package.sh PACKAGE COMMAND...: makes sure every COMMAND is on PATH, installing Debian's
# PACKAGE with apt-get (as root, or through sudo) when one is missing. Nothing here starts a
# service; tests start their own servers on free ports.
set -euo pipefail
pkg=$1
shift
missing=""
for c in "$@"; do command -v "$c" >/dev/null || missing="$missing $c"; done
[ -z "$missing" ] && exit 0
echo "$pkg:$missing missing; installing Debian's $pkg with apt-get" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "$pkg: not root and no sudo: install $pkg (e.g. apt-get install $pkg) and retry" >&2
    exit 1
  fi
  sudo=sudo
fi
if ! command -v apt-get >/dev/null; then
  echo "$pkg: no apt-get here: install$missing with your package manager and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "$pkg" >&2
for c in "$@"; do command -v "$c" >/dev/null || { echo "$pkg: installed, but $c is still missing" >&2; exit 1; }; done
