#!/usr/bin/env bash
# `bash scripts/test.sh [PYTEST ARGS]`: install if needed, then the whole test suite (Ray in a
# loopback-only namespace; headless Chromium from Debian's packages for the browser tests, cron for the schedule tests).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
# Debian's chromium (browser tests) and cron (the schedule round trip), when we may install them.
missing=""
command -v chromium >/dev/null || missing="$missing chromium"
command -v crontab >/dev/null || missing="$missing cron"
if [ -n "$missing" ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "xai-ray: installing Debian's$missing for the tests" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
cd "$here/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
exec bash "$here/loopback.sh" python -m pytest "$@"
