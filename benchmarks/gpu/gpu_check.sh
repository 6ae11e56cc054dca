#!/usr/bin/env bash
# The ONE command of a lent GPU (benchmarks/README.md, "On a lent GPU"): installs the bundled wheels
# and FashionMNIST, then runs benchmarks/gpu/gpu_check.py's stages in priority order within the budget,
# every result in $OUT.
#
#   bash benchmarks/gpu/gpu_check.sh              # on the GPU machine (the device tool sets OUT)
#   bash benchmarks/gpu/gpu_check.sh --dry-run    # here, on the CPU at a tiny size (make gpu-check-dry)
#
# GPU_CHECK_BUDGET_S (default 570) is the wall time from this script's start to the end of the
# packing; run it with the device tool's timeout_s of 600. A second call with the first call's
# stages.json and state.tar.gz in .gpu/resume/ resumes where the first stopped; GPU_CHECK_STAGES
# (default gpu_tests,speed,rows) picks stages, e.g. rows alone in a later session.
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
if ((DRY)); then
  PY=${PYTHON:-.venv/bin/python}
  OUT=${OUT:-$(mktemp -d /tmp/dpdc-gpu-dry-XXXXXX)}
  WORK=${GPU_CHECK_WORK:-$(mktemp -d /tmp/dpdc-gpu-dry-work-XXXXXX)}
  # Wall time, so a loaded machine stretches it: with 900 s the CPU-mode gpu tests alone took
  # 638 s on a shared 2-core machine and the rows stage was stopped (a failure of the dry run).
  BUDGET=${GPU_CHECK_BUDGET_S:-3600}
  RESUME=${GPU_CHECK_RESUME:-/nonexistent}
  export DPDC_GPU_TESTS_ON_CPU=1 CUDA_VISIBLE_DEVICES=""
  mkdir -p "$OUT"
else
  PY=python3
  : "${OUT:?OUT is not set: the device tool sets it; for a run here use --dry-run}"
  WORK=${GPU_CHECK_WORK:-/tmp/dpdc_gpu_work}
  BUDGET=${GPU_CHECK_BUDGET_S:-570}
  RESUME=${GPU_CHECK_RESUME:-.gpu/resume}
  # The wheels the image lacks (make gpu-bundle), beside the image's own packages: its torch stays.
  SITE=/tmp/dpdc_site
  if ! ls .gpu/wheels/*.whl >/dev/null 2>&1; then
    echo "error: .gpu/wheels holds no wheels: run make gpu-bundle and carry .gpu" | tee "$OUT/gpu_check.log"
    exit 2
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    .gpu/wheels/*.whl 2>&1 | tee "$OUT/gpu_check.log" || { echo "error: installing .gpu/wheels failed"; exit 2; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  # FashionMNIST where the loader looks first (Debian's dataset-fashion-mnist folder); else a cache.
  if ls .gpu/data/fashion-mnist/*.gz >/dev/null 2>&1; then
    if ! { mkdir -p /usr/share/datasets/fashion-mnist &&
      cp .gpu/data/fashion-mnist/*.gz /usr/share/datasets/fashion-mnist/; } 2>/dev/null; then
      export XDG_CACHE_HOME=/tmp/dpdc_cache
      mkdir -p "$XDG_CACHE_HOME/dpdc_lightning/FashionMNIST/raw"
      cp .gpu/data/fashion-mnist/*.gz "$XDG_CACHE_HOME/dpdc_lightning/FashionMNIST/raw/"
    fi
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/gpu_check.log"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
ARGS=(--out "$OUT" --started "$START" --budget "$BUDGET" --work "$WORK" --resume "$RESUME")
ARGS+=(--stages "${GPU_CHECK_STAGES:-gpu_tests,speed,rows}")
((DRY)) && ARGS+=(--dry-run ${GPU_CHECK_MAX_ROWS:+--max-rows "$GPU_CHECK_MAX_ROWS"})
$PY benchmarks/gpu/gpu_check.py "${ARGS[@]}" 2>&1 | tee -a "$OUT/gpu_check.log"
status=${PIPESTATUS[0]}
if ((status != 0)); then
  # The reason last (make gpu-check-dry shows it): gpu_check.py's last line names the stages that
  # did not complete and why, or the exception that stopped it.
  reason=$(grep -v '^[[:space:]]*$' "$OUT/gpu_check.log" | tail -n 1)
  echo "gpu_check.sh: exit $status: ${reason:-no output}; results in $OUT"
else
  echo "gpu_check.sh: exit 0; results in $OUT"
fi
exit "$status"
