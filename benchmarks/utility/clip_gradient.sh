#!/usr/bin/env bash
# method.clip_gradient=exact vs detached for NDPDC on FashionMNIST at epsilon = 1 (delta 1e-5), IPC 10,
# L 50, 200 iterations, one condensation per seed and mode; each bundle evaluated with the faithful evaluator
# (ConvNet, 300 epochs x 3 runs, DSA single). Results: benchmarks/results/utility/clip_gradient_fashion_mnist_cpu.md.
# Usage: bash benchmarks/utility/clip_gradient.sh OUT_DIR [ENGINE] [SEEDS]
#   ENGINE: eval.engine (default auto); SEEDS: condensation seeds, space separated (default "0 1 2 3")
# A finished condensation or evaluation in OUT_DIR is kept and a killed condensation resumes from its checkpoint,
# so the script can be re-run to complete it.
set -euo pipefail
OUT=${1:-/tmp/clip_gradient}
ENGINE=${2:-auto}
SEEDS=${3:-0 1 2 3}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PYTHON:-python}
mkdir -p "$OUT"
for seed in $SEEDS; do
  for mode in exact detached; do
    run="$OUT/${mode}_s$seed"
    if [[ ! -f "$run/privacy.json" ]]; then
      start=$SECONDS
      if [[ -f "$run/checkpoints/last.ckpt" ]]; then
        $PY train.py resume="$run"
      else
        [[ -d "$run" ]] && $PY train.py forget="$run" && rm -r "$run"  # killed before its first checkpoint
        $PY train.py method=ndpdc dataset=fashion_mnist method.ipc=10 method.group_size=50 method.iterations=200 \
          privacy.target_epsilon=1 method.clip_gradient=$mode seed=$seed run_dir="$run"
      fi
      echo "$mode s$seed: condensation $((SECONDS - start)) s wall" | tee -a "$OUT/times.txt"
    fi
    [[ -f "$run/eval.json" ]] || $PY evaluate.py "$run" eval.epochs=300 eval.runs=3 eval.engine=$ENGINE
  done
done
