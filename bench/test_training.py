"""Speed of training recipes under `fpemu.emulate`: a transformer block's training step, and compile times.

The step is bench/transformer_block.py's (``jax.value_and_grad`` of a pre-LayerNorm block's loss and
an SGD update; batch 8, sequence 128, d 256) on float32 parameters. Rows (one pytest-benchmark group):

| row | what is timed |
|---|---|
| ``fp32`` | ``jax.jit(step)``, not emulated |
| ``emulated-bf16`` | ``jax.jit(emulate(step, "bf16"))``: every result rounded to bfloat16 |
| ``mxfp8`` | ``jax.jit(emulate(step, Policy(dot="mxfp8")))``: forward, dgrad and wgrad GEMMs as MXFP8 |
| ``nvfp4`` | the same with ``Policy(dot="nvfp4")`` (stochastic rounding and the Hadamard transform: a key) |

Issue 13's targets: ``mxfp8`` and ``nvfp4`` at most 1.5x ``emulated-bf16`` per step, and the compile
time of an emulated function at most 1.5x that of the same function unemulated. ``test_interleaved``
times the rows round-robin (the ratio least disturbed by load drift); ``test_compile_time`` splits
each row's compile time into tracing (Python: JAX's trace and emulate's interpreter, ``.lower``) and
XLA's compilation (``.compile``), so that the extra time has an address. Results: bench/RESULTS_training.md.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import pytest
from transformer_block import make_inputs, step

import fpemu
from fpemu.tools.bench import machine_line

TARGET = 1.5
KEY = jax.random.key(0)


def emulated(policy):
    if isinstance(policy, fpemu.Policy) and policy.stochastic:
        return fpemu.emulate(step, policy, key=KEY)
    return fpemu.emulate(step, policy)


FUNCTIONS = {
    "fp32": step,
    "emulated-bf16": emulated("bf16"),
    "mxfp8": emulated(fpemu.Policy(dot="mxfp8")),
    "nvfp4": emulated(fpemu.Policy(dot="nvfp4")),
}
ARGS = make_inputs()
_JITTED = {name: jax.jit(fn) for name, fn in FUNCTIONS.items()}


def _call(name):
    return jax.block_until_ready(_JITTED[name](*ARGS))


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_step(benchmark, name):
    benchmark.group = "training recipes: transformer block training step"
    value, _ = _call(name)  # compile
    assert np.isfinite(float(value))
    benchmark(_call, name)


def test_interleaved():
    for name in FUNCTIONS:
        _call(name)
    times = {name: [] for name in FUNCTIONS}
    for _ in range(5):
        for name in FUNCTIONS:
            start = time.perf_counter()
            _call(name)
            times[name].append(time.perf_counter() - start)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    print(f"\n{machine_line()}")
    for name, median in medians.items():
        ratio = median / medians["emulated-bf16"]
        print(f"{name:14s} median {1e3 * median:9.2f} ms   {ratio:5.2f}x emulated-bf16")
    for name in ("mxfp8", "nvfp4"):
        ratio = medians[name] / medians["emulated-bf16"]
        print(f"{name} / emulated-bf16 = {ratio:.2f} (target <= {TARGET}): {'met' if ratio <= TARGET else 'NOT met'}")


def test_compile_time():
    print(f"\n{machine_line()}")
    print(f"{'row':14s} {'trace (s)':>10s} {'XLA (s)':>10s} {'total (s)':>10s} {'vs fp32':>8s}")
    totals = {}
    for name, fn in FUNCTIONS.items():
        start = time.perf_counter()
        fresh = lambda *args, fn=fn: fn(*args)  # a new function: no trace or executable cached
        lowered = jax.jit(fresh).trace(*ARGS).lower()
        traced = time.perf_counter() - start
        lowered.compile()
        total = time.perf_counter() - start
        totals[name] = total
        print(f"{name:14s} {traced:10.2f} {total - traced:10.2f} {total:10.2f} {total / totals['fp32']:7.2f}x")
