"""Speed of the new layouts and options beside today's: IEEE P3109 binary8 and OCP INT8 next to e4m3fn.

One pytest-benchmark group per row kind, the formats side by side: nearest-even (the P3109 layouts
must round at e4m3fn's speed), the default stochastic rounding, the ``nearest_even`` stochastic
variant and stochastic rounding from explicit random bits (a uint8 array argument). Like
bench/test_quantize.py, each jitted row is compiled and run once before timing, every timed call ends
in ``block_until_ready``, and a prefix of each output is checked against the exact reference.
Run with ``.venv/bin/pytest bench/test_formats_p3109.py --benchmark-only``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.testing import reference

FORMATS = ("e4m3fn", "p3109_k8p4se", "p3109_k8p3se", "p3109_k8p1se", "p3109_k8p4ue", "int8_ocp")
ROWS = {
    "fpemu-nearest_even": "fpemu.quantize, nearest_even",
    "fpemu-stochastic": "fpemu.quantize, stochastic (key as jit argument)",
    "fpemu-stochastic-nearest_even": "fpemu.quantize, stochastic, stochastic_variant='nearest_even', 8 random bits",
    "fpemu-stochastic-random": "fpemu.quantize, stochastic, random= (uint8 array argument), 8 random bits",
}
CHECK = 1 << 14  # elements checked after timing
CASES = [(row, fmt) for row in ROWS for fmt in FORMATS]


def _fn(fmt: str, row: str):
    if row == "fpemu-nearest_even":
        return (lambda x: fpemu.quantize(x, fmt)), ()
    if row == "fpemu-stochastic":
        return (lambda x, key: fpemu.quantize(x, fmt, rounding="stochastic", key=key)), (jax.random.key(0),)
    if row == "fpemu-stochastic-nearest_even":
        return (
            lambda x, key: fpemu.quantize(
                x, fmt, rounding="stochastic", key=key, random_bits=8, stochastic_variant="nearest_even"
            ),
            (jax.random.key(0),),
        )
    if row == "fpemu-stochastic-random":
        return (lambda x, r: fpemu.quantize(x, fmt, rounding="stochastic", random=r, random_bits=8)), ()
    raise ValueError(f"no function for row {row!r}; rows are {', '.join(ROWS)}")


@pytest.fixture(scope="module")
def random_u8(x) -> jax.Array:
    return jax.random.bits(jax.random.key(1), x.shape, jnp.uint8).block_until_ready()


@pytest.mark.parametrize(("row", "fmt"), CASES, ids=[f"{row}-{fmt}" for row, fmt in CASES])
def test_speed(benchmark, record, x, x_np, random_u8, row, fmt):
    benchmark.group = f"{row}: P3109 and OCP INT8 beside e4m3fn"
    benchmark.extra_info["row"] = ROWS[row]
    fn, extra = _fn(fmt, row)
    if row == "fpemu-stochastic-random":
        extra = (random_u8,)
    jitted = jax.jit(fn)

    def call():
        return jitted(x, *extra).block_until_ready()

    call()  # compile and warm up
    y = np.asarray(benchmark(call))
    record(fmt, row)
    # A prefix of the output, against the exact reference (the random rows: values of the format).
    x_head, y_head = x_np[:CHECK], y[:CHECK]
    if row == "fpemu-nearest_even":
        expected = reference.round_array(x_head, fmt)
    else:
        expected = reference.round_array(y_head, fmt)  # a value of the format rounds to itself
    nan = np.isnan(expected)
    assert np.array_equal(nan, np.isnan(y_head))
    assert np.array_equal(y_head[~nan], expected[~nan].astype(np.float32))
