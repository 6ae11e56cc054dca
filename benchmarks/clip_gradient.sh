#!/usr/bin/env bash
# method.clip_gradient=exact vs detached for NDPDC on FashionMNIST at epsilon = 1 (delta 1e-5), IPC 10,
# L 50, 200 iterations, two condensation seeds; each bundle evaluated with the faithful evaluator
# (ConvNet, 300 epochs x 3 runs, DSA single). Results: benchmarks/results/clip_gradient_fashion_mnist_cpu.md.
# Usage: bash benchmarks/clip_gradient.sh OUT_DIR [ENGINE]   (ENGINE: eval.engine, default auto)
# A finished condensation or evaluation in OUT_DIR is kept, so the script can be re-run to complete it.
set -euo pipefail
OUT=${1:-/tmp/clip_gradient}
ENGINE=${2:-auto}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PYTHON:-python}
mkdir -p "$OUT"
for seed in 0 1; do
  for mode in exact detached; do
    run="$OUT/${mode}_s$seed"
    if [[ ! -f "$run/privacy.json" ]]; then
      start=$SECONDS
      $PY train.py method=ndpdc dataset=fashion_mnist method.ipc=10 method.group_size=50 method.iterations=200 \
        privacy.target_epsilon=1 method.clip_gradient=$mode seed=$seed run_dir="$run"
      echo "$mode s$seed: condensation $((SECONDS - start)) s wall" | tee -a "$OUT/times.txt"
    fi
    [[ -f "$run/eval.json" ]] || $PY evaluate.py "$run" eval.epochs=300 eval.runs=3 eval.engine=$ENGINE
  done
done
