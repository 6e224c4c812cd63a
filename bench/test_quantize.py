"""Speed of `fpemu.quantize` beside its peers: one pytest-benchmark group (table) per format.

Every jitted row is compiled and run once before timing (compilation excluded) and every timed
call ends in ``block_until_ready``. Rows whose name ends in ``-donated`` pass a fresh, already
written copy of the input with ``donate_argnums=0`` (made outside the timed region), so the output
reuses the input's pages: they measure the computation without the page faults of a fresh 64 MiB
output. Cases run format by format, so that the rows compared in one table are timed back to back.
After timing, each rounding row checks a prefix of its output (it computes what its name says).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu

FORMATS = ("e4m3fn", "e5m2", "bf16", "fp16", "e2m1fn")

# The rows of every format's table: id -> what is timed. Each row's ratios are computed in conftest.py.
ROWS = {
    "fpemu-nearest_even": "fpemu.quantize, nearest_even",
    "fpemu-toward_zero": "fpemu.quantize, toward_zero",
    "fpemu-stochastic": "fpemu.quantize, stochastic (key as jit argument)",
    "reduce_precision": "jax.lax.reduce_precision(x, e, m)",
    "astype_roundtrip": "jit x.astype(dtype).astype(float32)",
    "ml_dtypes_roundtrip": "NumPy x.astype(dtype).astype(float32) (ml_dtypes)",
    "numpy_copy": "NumPy x.copy() (memory-bandwidth reference)",
    "xla_times2": "jit x * 2 (one elementwise XLA op)",
    "xla_times2-donated": "jit x * 2, donate_argnums=0",
    "fpemu-nearest_even-donated": "fpemu.quantize, nearest_even, donate_argnums=0",
    "reduce_precision-donated": "jax.lax.reduce_precision, donate_argnums=0",
    "astype_roundtrip-donated": "jit astype round trip, donate_argnums=0",
}
CHECK = 1 << 16  # elements checked after timing
CASES = [(fmt, row) for fmt in FORMATS for row in ROWS]


def _jax_fn(fmt: str, row: str):
    """(function of the input and extra arguments, extra arguments) for a jitted row."""
    f = fpemu.get_format(fmt)
    base = row.removesuffix("-donated")
    if base.startswith("fpemu-"):
        rounding = base.removeprefix("fpemu-")
        if rounding == "stochastic":
            return (lambda x, key: fpemu.quantize(x, fmt, rounding="stochastic", key=key)), (jax.random.key(0),)
        return (lambda x: fpemu.quantize(x, fmt, rounding=rounding)), ()
    if base == "reduce_precision":
        return (lambda x: lax.reduce_precision(x, f.exponent_bits, f.mantissa_bits)), ()
    if base == "astype_roundtrip":
        return (lambda x: x.astype(f.dtype).astype(jnp.float32)), ()
    if base == "xla_times2":
        return (lambda x: x * 2), ()
    raise ValueError(f"no JAX function for row {row!r}; rows are {', '.join(ROWS)}")


def _run_numpy(benchmark, fmt: str, row: str, x_np: np.ndarray) -> np.ndarray:
    dtype = fpemu.get_format(fmt).dtype
    if row == "numpy_copy":
        fn = x_np.copy
    elif row == "ml_dtypes_roundtrip":

        def fn():
            return x_np.astype(dtype).astype(np.float32)
    else:
        raise ValueError(f"no NumPy function for row {row!r}")
    fn()  # warm-up
    return benchmark(fn)


def _run_jax(benchmark, rounds_for, fmt: str, row: str, x: jax.Array) -> np.ndarray:
    fn, extra = _jax_fn(fmt, row)
    if not row.endswith("-donated"):
        jitted = jax.jit(fn)

        def call():
            return jitted(x, *extra).block_until_ready()

        try:
            call()  # compile and warm up
        except Exception as e:
            if row.startswith("astype_roundtrip"):
                pytest.skip(f"x.astype({fmt}) does not compile on {jax.default_backend()}: {type(e).__name__}: {e}")
            raise
        return np.asarray(benchmark(call))

    jitted = jax.jit(fn, donate_argnums=0)

    def setup():  # a fresh input buffer per round, written (page-faulted) before the timer starts
        return (jnp.copy(x).block_until_ready(), *extra), {}

    def call(*args):
        return jitted(*args).block_until_ready()

    args, _ = setup()
    try:
        call(*args)  # compile and warm up
    except Exception as e:
        if row.startswith("astype_roundtrip"):
            pytest.skip(f"x.astype({fmt}) does not compile on {jax.default_backend()}: {type(e).__name__}: {e}")
        raise
    args, _ = setup()
    start = time.perf_counter()
    call(*args)
    seconds = time.perf_counter() - start
    rounds = rounds_for(seconds)
    return np.asarray(benchmark.pedantic(call, setup=setup, rounds=rounds, warmup_rounds=1))


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, except that any NaN equals any NaN."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def _check(fmt: str, row: str, x_np: np.ndarray, y: np.ndarray) -> None:
    dtype = fpemu.get_format(fmt).dtype
    x, y = x_np[:CHECK], y[:CHECK]
    with np.errstate(over="ignore", invalid="ignore"):
        reference = x.astype(dtype).astype(np.float32)
        representable = y.astype(dtype).astype(np.float32)
    base = row.removesuffix("-donated")
    if base in ("fpemu-nearest_even", "astype_roundtrip", "ml_dtypes_roundtrip"):
        assert _same_values(y, reference), f"{row} differs from ml_dtypes for {fmt}"
    elif base in ("fpemu-toward_zero", "fpemu-stochastic"):
        assert _same_values(y, representable), f"{row} gave values that are not {fmt} values"
        if base == "fpemu-toward_zero":
            assert np.all(np.abs(y) <= np.abs(x)), f"{row} rounded away from zero for {fmt}"
    elif base == "numpy_copy":
        assert np.array_equal(y, x)


@pytest.mark.parametrize(("fmt", "row"), CASES, ids=[f"{fmt}-{row}" for fmt, row in CASES])
def test_speed(benchmark, record, rounds_for, x, x_np, fmt, row):
    benchmark.group = fmt
    benchmark.extra_info["row"] = ROWS[row]
    with np.errstate(over="ignore", invalid="ignore"):  # NumPy warns on casts that overflow
        if row in ("numpy_copy", "ml_dtypes_roundtrip"):
            y = _run_numpy(benchmark, fmt, row, x_np)
        else:
            y = _run_jax(benchmark, rounds_for, fmt, row, x)
    record(fmt, row)
    _check(fmt, row, x_np, y)
