"""Speed of `fpemu.scalify`: a transformer block's training step, scalified vs plain float16.

The step is ``jax.value_and_grad`` of a scalar loss of a pre-LayerNorm block (4-head attention,
GELU MLP of width 4d; batch 8, sequence 128, d 256) followed by an SGD update of every parameter.
Rows (one pytest-benchmark group):

| row | what is timed |
|---|---|
| ``fp16`` | ``jax.jit(step)`` on float16 parameters and input |
| ``scalify-fp16`` | ``jax.jit(scalify(step))`` on `ScaledArray`s with float16 data and float32 scales |

Every row is compiled and run once before timing; each timed call ends in ``block_until_ready``.
The issue's target: ``scalify-fp16`` at most 1.2x ``fp16``. ``test_interleaved`` times the rows
round-robin (the ratio least disturbed by load drift) and prints the summary: the medians of the
wall-clock time (the target's measure) and of the process CPU time (all threads; on a shared
machine the steadier measure of the work done), and the CPU time of tracing and compiling each
row. bench/RESULTS_scalify.md has the recorded numbers.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from transformer_block import make_inputs, step

import fpemu.scalify as jsa
from fpemu.tools.bench import machine_line

TARGET = 1.2


def rows():
    params, x = make_inputs()
    plain = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float16), (params, x))
    scaled = jsa.tree.astype(jsa.as_scaled_array((params, x), scale=np.float32(1)), jnp.float16)
    return {"fp16": (jax.jit(step), plain), "scalify-fp16": (jax.jit(jsa.scalify(step)), scaled)}


_ROWS = rows()
_TIMES: dict[str, float] = {}


def _call(name):
    fn, args = _ROWS[name]
    return jax.block_until_ready(fn(*args))


@pytest.mark.parametrize("name", list(_ROWS))
def test_step(benchmark, name):
    benchmark.group = "scalify: transformer block training step"
    out = _call(name)  # compile
    value = float(jsa.asarray(out[0], jnp.float32))
    assert np.isfinite(value)
    benchmark(_call, name)


ROUNDS = 15


def compile_seconds(name: str) -> float:
    """Process CPU seconds to trace and compile row ``name`` afresh (a new function: no cache)."""
    fn, args = _ROWS[name]
    fresh = jax.jit(lambda *a: fn(*a))
    start = time.process_time()
    fresh.lower(*args).compile()
    return time.process_time() - start


def test_interleaved():
    compile_cpu = {name: compile_seconds(name) for name in _ROWS}
    for name in _ROWS:
        _call(name)
    wall = {name: [] for name in _ROWS}
    cpu = {name: [] for name in _ROWS}
    for _ in range(ROUNDS):
        for name in _ROWS:
            start, start_cpu = time.perf_counter(), time.process_time()
            _call(name)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    medians = {name: float(np.median(t)) for name, t in wall.items()}
    cpu_medians = {name: float(np.median(t)) for name, t in cpu.items()}
    ratio = medians["scalify-fp16"] / medians["fp16"]
    cpu_ratio = cpu_medians["scalify-fp16"] / cpu_medians["fp16"]
    print(f"\n{machine_line()}")
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {ROUNDS} rounds")
    for name in _ROWS:
        print(
            f"{name:14s} median {1e3 * medians[name]:8.2f} ms wall, {1e3 * cpu_medians[name]:8.2f} ms CPU; "
            f"trace + compile {compile_cpu[name]:.2f} s CPU"
        )
    print(f"scalify-fp16 / fp16 = {ratio:.2f} (target <= {TARGET}): {'met' if ratio <= TARGET else 'NOT met'}")
    print(
        f"scalify-fp16 / fp16 CPU time = {cpu_ratio:.2f}; compile = {compile_cpu['scalify-fp16'] / compile_cpu['fp16']:.2f}"
    )
