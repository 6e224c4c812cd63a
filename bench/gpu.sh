#!/usr/bin/env bash
# The GPU checks and benchmarks, on a lent GPU machine that has JAX (with CUDA), pytest, xdist,
# hypothesis and ml_dtypes but no network: nothing is installed, the project runs from this checkout
# on PYTHONPATH. A lease is 15 minutes, starts included, so every step runs under `timeout`, one
# step at a time (a run with eleven JAX processes at once lost its machine), and prints one summary
# line; the default steps stay under 8.5 minutes on an H100/H200.
#
#   bench/gpu.sh [OUTDIR]        # default OUTDIR: bench/gpu-out (git-ignored); on the device: $OUT
#
# Steps (limits in seconds):
#   1. device   (30)  nvidia-smi, JAX's device and version
#   2. tests   (160)  the compiled kernel tests (the ...Gpu classes) but for the per-format sweeps of
#                     every 16-bit input, 4 processes (-p no:benchmark: pytest-benchmark refuses xdist)
#      exhaustive (420, not a default step) those sweeps: the quantize kernel and backend="pallas"
#                     against the XLA path, each format and mode on all 65,536 16-bit inputs (119 tests;
#                     on an H200 under JAX 0.11.2, 45 of them took 104 s with 4 processes)
#   3. fp8     (120)  bench/hopper_fp8_probe.py: the FP8 GEMM's results on the designed and random
#                     dot products, then tests/ops/test_hopper_fp8.py against that new recording
#   4. kernels  (90)  bench/kernels.py: copy, quantize per format family, MX/NVFP4, the matmul rows
#   5. training (150) bench/gpu_training_step.py: training-step ratios against native bf16, and
#                     first-call times against fp32, for the recipes with float32 and with bf16 elsewhere
#   6. scalify  (70)  the same script's fp16 and scalify-fp16 rows (issue 31: step <= 1.2x, compile <= 2x)
#                     Steps 5 and 6 leave each row's optimized HLO in OUTDIR/hlo.tar.gz, and break
#                     some rows' device time down by kernel (--profile).
# FPEMU_GPU_SH_STEPS (default "tests kernels training scalify") picks the steps after `device`. The
# FP8 probe (step 3) is recorded (tests/data/hopper_fp8.npz) and the sweeps are long: both are left
# out by default, so that the default steps fit one device call with room for a machine's start; run
# `FPEMU_GPU_SH_STEPS=exhaustive` (or fp8) as its own call. pytest prints each test's name as it ends,
# so a step stopped at its limit still shows which tests passed.
# Copy the tables into bench/RESULTS_gpu.md with the date, device, JAX version and commit.
# FPEMU_GPU_SH_ALLOW_CPU=1 runs the same steps without a GPU to check the script itself: one test,
# small sizes, Pallas in interpret mode, the FP8 probe without the model check (a CPU has no FP8 sum).
set -uo pipefail
cd "$(dirname "$0")/.."
steps=" ${FPEMU_GPU_SH_STEPS:-tests kernels training scalify} "
for step in $steps; do
  case $step in tests|exhaustive|fp8|kernels|training|scalify) ;;
    *) echo "bench/gpu.sh: FPEMU_GPU_SH_STEPS names '$step'; the steps are: tests exhaustive fp8 kernels training scalify" >&2
       exit 2 ;;
  esac
done
out=${1:-${OUT:-bench/gpu-out}}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python=${PYTHON:-python3}
cpu=${FPEMU_GPU_SH_ALLOW_CPU:-0}
wants() { [[ $steps == *" $1 "* ]]; }
hlo="$out/hlo"
status=0
start=$(date +%s)
summary() {  # step name, exit status, log: one line per step
  local rc=$2 what="ok"
  [ "$rc" = 124 ] && what="TIMED OUT"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && what="FAILED (exit $rc)"
  [ "$rc" != 0 ] && status=1
  echo "== $1: $what after $(( $(date +%s) - start )) s total; last line: $(tail -n 1 "$3" 2>/dev/null)"
}

timeout 30 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null;
  $python -c 'import jax; d = jax.devices()[0]; print(\"jax\", jax.__version__, d.platform, d.device_kind)'" \
  > "$out/device.txt" 2>&1
summary device $? "$out/device.txt"
if ! grep -q " gpu " "$out/device.txt" && [ "$cpu" != 1 ]; then
  echo "bench/gpu.sh: JAX sees no GPU here (see $out/device.txt); FPEMU_GPU_SH_ALLOW_CPU=1 checks the script on CPU" >&2
  exit 2
fi

if [ "$cpu" = 1 ]; then  # the script's own check: a handful of tests, small sizes
  tests=(tests/kernels/test_quantize_kernel.py::TestQuantizeKernelInterpret::test_narrow_input_dtypes)
  sweeps=("tests/kernels/test_quantize_kernel.py::TestQuantizeKernelInterpret::test_exhaustive_16_bit_inputs[e4m3fn-nearest_even-False-True]")
  probe=(--quick)
  sizes=(--quantize-size 65536 --matmul-size 128 --repeats 2)
  training=(--batch 2 --seq 16 --d 64 --rounds 2 --rows "native bf16,fp32,emulated bf16,fp8_current,bf16+mxfp8"
            --profile "emulated bf16")
  scalify=(--batch 2 --seq 16 --d 64 --rounds 2 --profile scalify-fp16)
else
  tests=(tests/kernels tests/ops/test_quantize_backend.py -k "(Gpu or gpu) and not 16_bit")
  sweeps=(tests/kernels tests/ops/test_quantize_backend.py -k "(Gpu or gpu) and 16_bit")
  probe=() sizes=() scalify=(--profile "fp16,scalify-fp16")
  training=(--rows "native bf16,fp32,emulated bf16,fp8_current,mxfp8,nvfp4,bf16+mxfp8,bf16+nvfp4"
            --profile "native bf16,emulated bf16,mxfp8,nvfp4")
fi
pytest=(-p no:benchmark -p no:cacheprovider -n 4 -v -rfE --tb=short)
if wants tests; then
  timeout 160 "$python" -m pytest "${tests[@]}" "${pytest[@]}" > "$out/tests.log" 2>&1
  summary tests $? "$out/tests.log"
fi

if wants exhaustive; then
  timeout 420 "$python" -m pytest "${sweeps[@]}" "${pytest[@]}" > "$out/exhaustive.log" 2>&1
  summary exhaustive $? "$out/exhaustive.log"
fi

# The model's check needs the GPU's FP8 sums: on CPU the probe and the export run, the check does not.
check=(true)
[ "$cpu" = 1 ] || check=(env FPEMU_HOPPER_FP8_RESULTS="$out/hopper_fp8.npz" timeout 30 "$python" -m pytest
  tests/ops/test_hopper_fp8.py -p no:benchmark -p no:cacheprovider -q -rfEs --tb=line
  -k "match_the_h200 and not every_recorded")
if wants fp8; then
  timeout 90 "$python" bench/hopper_fp8_probe.py "$out/hopper_fp8_raw.npz" "${probe[@]}" > "$out/fp8.log" 2>&1 \
    && "$python" bench/hopper_fp8_probe.py --export "$out/hopper_fp8.npz" "$out/hopper_fp8_raw.npz" >> "$out/fp8.log" 2>&1 \
    && "${check[@]}" >> "$out/fp8.log" 2>&1
  summary fp8 $? "$out/fp8.log"
fi

if wants kernels; then
  timeout 90 "$python" bench/kernels.py "${sizes[@]}" --json "$out/kernels.json" > "$out/kernels.md" 2>&1
  summary kernels $? "$out/kernels.md"
fi

if wants training; then
  timeout 150 "$python" bench/gpu_training_step.py "${training[@]}" --hlo "$hlo" > "$out/training.log" 2>&1
  summary training $? "$out/training.log"
fi

if wants scalify; then
  timeout 70 "$python" bench/gpu_training_step.py "${scalify[@]}" --rows "fp16,scalify-fp16" --hlo "$hlo" \
    > "$out/scalify.log" 2>&1
  summary scalify $? "$out/scalify.log"
fi
# each row's optimized HLO in one file (the device tool brings back at most 8 files)
[ -d "$hlo" ] && tar -czf "$out/hlo.tar.gz" -C "$hlo" . && rm -r "$hlo"

exit $status
