#!/usr/bin/env bash
# `bash scripts/xai-ray.sh ARGS...` = install if needed, then `xai-ray ARGS...` (local Ray, loopback only).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-0}"
exec bash "$here/loopback.sh" xai-ray "$@"
