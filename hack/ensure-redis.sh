#!/usr/bin/env bash
# Makes sure redis-server and redis-cli are on PATH, installing Debian's redis-server when
# they are missing. Tests start their own servers on free ports; nothing here starts one
# (Debian's package starts a service on 6379; the tests never use it).
set -euo pipefail
exec "$(dirname "$0")/ensure-package.sh" redis-server redis-server redis-cli
