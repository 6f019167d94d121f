#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA GPU and this project's packages importable
# (python3 -c "import xai_ray, ray, duckdb, torch" works): tests/test_gpu.py, then throughput.py
# with the defaults and with a bigger token budget, then capture_ops.py. Each step has its own time
# limit, so one hang costs only its step; each writes its output into OUT (default ./gpu-check).
#
#   bash bench/gpu_check.sh [MODEL] [DATA] [N]     # defaults: minilm, ../shared/data/imdb/train.parquet, 5000
set -u
MODEL=${1:-minilm}
DATA=${2:-../shared/data/imdb/train.parquet}
N=${3:-5000}
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}  # the interpreter that holds torch with CUDA
mkdir -p "$OUT"
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: one step, its output kept in OUT/NAME.txt
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt" | tail -12
}
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA GPU here')" || exit 1
nvidia-smi -L
"$PY" -c "import torch, transformers, ray; print('torch', torch.__version__, 'transformers', transformers.__version__, 'ray', ray.__version__, torch.cuda.get_device_name())"
# On the H100 (2026-11-26) 16 s passed before a run read its corpus (6 s on a 2-core CPU machine):
# the driver's model description (transformers and torch imported in a thread) is the suspect.
"$PY" -X importtime -c "
import time; t = time.perf_counter()
from xai_ray.model.loading import describe_model
describe_model('$MODEL'); print(f'describe_model: {time.perf_counter() - t:.2f} s')" 2>"$OUT/describe_importtime.txt" | tee "$OUT/describe.txt"
sort -t'|' -k2 -n "$OUT/describe_importtime.txt" | tail -8
step tests 240 "$PY" -m pytest tests/test_gpu.py -m gpu -p no:cacheprovider -q
step throughput 300 "$PY" bench/throughput.py "$MODEL" "$DATA" "$N" --e2e-n "$N" --skip c
step throughput_budget 200 "$PY" bench/throughput.py "$MODEL" "$DATA" "$N" --e2e-n "$N" --skip cdf --set max_tokens_per_batch=32768
step capture_ops 60 "$PY" bench/capture_ops.py "$MODEL" "$DATA" --device cuda
