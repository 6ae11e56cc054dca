#!/usr/bin/env bash
# Dosser against NDPDC on the embedded digits data at epsilon = 1 (delta 1e-5), IPC 10, CPU.
# Results: benchmarks/results/utility/dosser_digits_cpu.md. Usage: bash benchmarks/utility/dosser_digits.sh OUT_DIR
# A finished condensation or evaluation in OUT_DIR is kept (the script can be re-run to complete a table).
set -euo pipefail
OUT=${1:-/tmp/dosser_digits}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PYTHON:-python}
COMMON="privacy.target_epsilon=1 privacy.reproducible_noise=true trainer.enable_progress_bar=false"
DOSSER="method=dosser method.sampling_steps=100 method.optimisation_steps=300"
EVAL="eval.epochs=300 eval.runs=2"
run() {  # name, train args..., [-- evaluation args...]
  local name=$1; shift
  local train_args=() eval_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do train_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift && eval_args=("$@")
  if [[ ! -f "$OUT/$name/privacy.json" ]]; then
    local start=$SECONDS
    $PY train.py $COMMON "${train_args[@]}" run_dir="$OUT/$name"
    echo "$name: condensation $((SECONDS - start)) s wall" | tee -a "$OUT/times.txt"
  fi
  [[ -f "$OUT/$name/eval.json" ]] || $PY evaluate.py "$OUT/$name" $EVAL "${eval_args[@]}"
}
mkdir -p "$OUT"
run ndpdc method=ndpdc
run dos $DOSSER method.aux.source=none
run dos_ser_public $DOSSER method.aux.source=public_split
run dos_ser_dp $DOSSER method.aux.source=dp
run dos_ser_public_pea $DOSSER method.aux.source=public_split method.pea=true -- eval.pea=true
run dos_ser_dp_initaux $DOSSER method.aux.source=dp method.init=aux
