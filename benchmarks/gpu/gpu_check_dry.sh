#!/usr/bin/env bash
# make gpu-check-dry: benchmarks/gpu/gpu_check.sh rehearsed here on the CPU at a tiny size, as the GPU
# gets it: call 1 (two rows), call 2 resuming from call 1's stages.json and state.tar.gz, then
# gpu_import.py --allow-dry-run into a scratch results folder.
#
# Every run works in a fresh folder of its own (mktemp -d under $TMPDIR, default /tmp), so two runs
# at once never share files. On success the folder is removed (GPU_CHECK_DRY_KEEP=1 keeps it); on a
# failure it is kept, and the LAST line says which step failed, its exit code, the last line that
# step printed (a stage's status, an exception) and where its log is.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/dpdc-gpu-dry-XXXXXX") || {
  echo "gpu-check-dry: FAILED: cannot create a folder under ${TMPDIR:-/tmp} (set TMPDIR)"
  exit 2
}
echo "gpu-check-dry: working in $DIR"
trap 'echo "gpu-check-dry: FAILED: interrupted; files kept in $DIR"; exit 130' INT TERM

# step NAME COMMAND...: run COMMAND, its output shown and kept in $DIR/NAME.log; on failure end here
# with the reason as the last line.
step() {
  local name=$1 code reason
  shift
  "$@" 2>&1 | tee "$DIR/$name.log"
  code=${PIPESTATUS[0]}
  if ((code != 0)); then
    reason=$(grep -v '^[[:space:]]*$' "$DIR/$name.log" | tail -n 1)
    echo "gpu-check-dry: FAILED at $name (exit $code): ${reason:-it printed nothing}; log $DIR/$name.log"
    exit "$code"
  fi
}

mkdir -p "$DIR/resume"
step call1 env OUT="$DIR/out1" GPU_CHECK_WORK="$DIR/work1" GPU_CHECK_MAX_ROWS=2 PYTHON="$PY" \
  bash benchmarks/gpu/gpu_check.sh --dry-run
step resume cp "$DIR/out1/stages.json" "$DIR/out1/state.tar.gz" "$DIR/resume/"
step call2 env OUT="$DIR/out2" GPU_CHECK_WORK="$DIR/work2" GPU_CHECK_RESUME="$DIR/resume" \
  PYTHON="$PY" bash benchmarks/gpu/gpu_check.sh --dry-run
step import "$PY" benchmarks/gpu/gpu_import.py "$DIR/out2" --results "$DIR/results" --allow-dry-run
if [[ "${GPU_CHECK_DRY_KEEP:-0}" == 1 ]]; then
  echo "gpu-check-dry: passed; files in $DIR"
else
  rm -rf "$DIR"
  echo "gpu-check-dry: passed (its folder removed; GPU_CHECK_DRY_KEEP=1 keeps it)"
fi
