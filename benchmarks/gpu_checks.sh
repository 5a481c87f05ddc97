#!/usr/bin/env bash
# The GPU checks of one device lease, most important first, each under its own time limit.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_checks.sh      # from the repository root, on a machine with CUDA
#
# Runs the CUDA tests (tests/test_gpu.py), then `python -m benchmarks.gpu load` (busy share of large
# fits, a grid search, the weights drawn ahead), `python -m benchmarks.gpu krr --only exact` (exact
# kernel ridge on all of Fashion-MNIST), `python -m benchmarks.kernels ridge --only fit --device cuda`
# (ImplicitCKRidgeClassifier fitted on the GPU) and the Fashion-MNIST comparison up to width
# 16,384 (sk-deq compare). Fashion-MNIST is read from $SCIKIT_LEARN_DATA/fashion-mnist
# (default: .fm/ in the repository). Everything is written under $OUT; the log
# is $OUT/log.txt. A step that runs out of time leaves the steps after it.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/gpu_checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export SCIKIT_LEARN_DATA=${SCIKIT_LEARN_DATA:-$root/.fm}
py=${PYTHON:-python3}
log=$out/log.txt
step() {  # step SECONDS NAME COMMAND...: run with a time limit, log its exit status and wall time
    local limit=$1 name=$2 t0=$SECONDS
    shift 2
    echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S)" >>"$log"
    (cd "$root" && timeout "$limit" "$@") >>"$log" 2>&1
    echo "=== $name: exit $? in $((SECONDS - t0)) s" >>"$log"
}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$py" -c "import torch, numpy, scipy, sklearn; print('torch', torch.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'sklearn', sklearn.__version__)"
    nproc
    git -C "$root" rev-parse --short HEAD 2>/dev/null
} >>"$log" 2>&1
step "${T_TESTS:-100}" tests "$py" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
step "${T_LOAD:-170}" load "$py" -m benchmarks.gpu load --repeats 3 --json "$out/gpu_load.json"
step "${T_KRR:-120}" krr "$py" -m benchmarks.gpu krr --only exact --json "$out/krr_exact.json"
step "${T_KRR_FIT:-300}" krr-fit "$py" -m benchmarks.kernels ridge --only fit --n-train 60000 --activations relu \
    --device cuda --json "$out/krr_fit_cuda.json"  # ImplicitCKRidgeClassifier(device='cuda') on 60,000 images
step "${T_COMPARE:-150}" compare "$py" -m sk_deq.cli compare --data fashion-mnist --widths "${WIDTHS:-1024,4096,16384}" \
    --repeats 1 --device cuda --threads 0 --no-progress -v --out "$out/fashion"
echo "=== done $(date -u +%H:%M:%S)" >>"$log"
