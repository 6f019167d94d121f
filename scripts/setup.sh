#!/usr/bin/env bash
# Creates .venv (once) and installs xai-ray with its test tools; re-runs only when pyproject.toml changes.
# Sourced by run.sh and test.sh. Set PYTHON to choose the interpreter (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.xai-ray-installed"
want="$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "xai-ray: installing into $venv (first run takes a few minutes)" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip
  # The CPU build of torch; a plain `torch` would pull a multi-GB CUDA build.
  "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/python" -m pip install -q "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -e "$root[test]"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
