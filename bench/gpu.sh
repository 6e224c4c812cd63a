#!/usr/bin/env bash
# The GPU checks and benchmarks, on a GPU machine that has JAX (with CUDA), pytest, hypothesis and
# ml_dtypes but no network: nothing is installed, the project runs from this checkout on PYTHONPATH.
#
#   bench/gpu.sh [OUTDIR]        # default OUTDIR: bench/gpu-out (git-ignored)
#
# 1. the kernel and backend tests, compiled on the GPU (the GPU test classes run; interpret-mode
#    twins run too), and the ml_dtypes cross-check of the kernels with hypothesis;
# 2. bench/kernels.py at the issue's sizes (quantize 2**28 elements, matmul 8192**3);
# 3. `fpemu bench` (the representative subset, with peers).
# Each step's output goes to OUTDIR (log, JSON); copy the tables into bench/RESULTS.md with the date,
# device, JAX version and commit printed at their top. FPEMU_GPU_SH_ALLOW_CPU=1 runs the same steps
# without a GPU (CPU sizes, Pallas in interpret mode), to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/gpu-out}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
status=0

"$python" -c 'import jax; d = jax.devices()[0]; print(jax.__version__, d.platform, d.device_kind)' | tee "$out/device.txt"
if ! grep -q " gpu " "$out/device.txt" && [ "${FPEMU_GPU_SH_ALLOW_CPU:-0}" != 1 ]; then
  echo "bench/gpu.sh: JAX sees no GPU here (see $out/device.txt)" >&2
  exit 2
fi

echo "== GPU tests" >&2
"$python" -m pytest tests/kernels tests/test_quantize_backend.py -p no:cacheprovider -q -rs \
  2>&1 | tee "$out/tests.log" || status=1

echo "== bench/kernels.py" >&2
"$python" bench/kernels.py --json "$out/kernels.json" 2>&1 | tee "$out/kernels.md" || status=1

echo "== fpemu bench" >&2
"$python" -m fpemu bench --json "$out/bench.json" --no-progress 2>&1 | tee "$out/bench.txt" || status=1

exit $status
