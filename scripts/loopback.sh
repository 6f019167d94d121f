#!/usr/bin/env bash
# Runs a command in a network namespace that has only loopback, when we can make one (root + unshare).
# A local Ray head binds to the machine's routable address even when asked for 127.0.0.1; inside
# this namespace there is none, so nothing leaves the machine. XAI_RAY_NETNS=0 opts out.
set -euo pipefail
if [ "${XAI_RAY_NETNS:-1}" != "0" ] && [ "$(id -u)" = "0" ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && exec "$@"' bash "$@"
fi
exec "$@"
