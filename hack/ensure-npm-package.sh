#!/usr/bin/env bash
# ensure-npm-package.sh NAME VERSION: makes sure node and the npm package NAME@VERSION are
# installed, and prints the directory holding its node_modules. node and npm come from Debian
# (ensure-package.sh); the package goes into the cache outside the clone, one directory per
# pinned version. The tests that run real clients' code (ratelimit-header-parser, OpenAI's Node
# SDK) on the sidecar's answers call it, and skip, saying why, when it fails (no network to the
# npm registry).
set -euo pipefail
name=$1
version=$2
here=$(cd "$(dirname "$0")" && pwd)
"$here/ensure-package.sh" nodejs node >&2
"$here/ensure-package.sh" npm npm >&2
cache_root=${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
dir="$cache_root/npm/$name-$version"
if [ ! -f "$dir/node_modules/$name/package.json" ]; then
  mkdir -p "$dir"
  echo "$name: installing $version into $dir" >&2
  timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save "$name@$version" >&2
fi
echo "$dir"
