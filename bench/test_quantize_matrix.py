"""`fpemu.quantize` for every registered format x every rounding mode x a few sizes.

bench/test_quantize.py compares five formats with their peers at 2**24 elements; this module covers
the whole matrix, so that a slow format or mode cannot hide: every format of the registry that
float32 holds (a new format is benchmarked automatically), every mode, at 2**16 and 2**20 elements
(the input recipe of the other rows: `fpemu.tools.bench.make_input`). Each size's NumPy copy is the
bandwidth reference. The summary prints median ns/element per (format, mode) and size, with the
ratio to the copy of that size and to the format's nearest_even row.

After timing, each row's output is checked to hold values of the format (the rounding itself is
proved by the exhaustive tests in tests/).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._core.format import fits
from fpemu.testing import text_table
from fpemu.tools.bench import make_input

ROUNDING_MODES = fpemu.ROUNDING_MODES

SIZES = (1 << 16, 1 << 20)
FORMATS = [f.name for f in fpemu.formats() if fits(f, fpemu.get_format("fp32"))]
CASES = [(n, fmt, mode) for n in SIZES for fmt in FORMATS for mode in ROUNDING_MODES]
_TIMES: dict[tuple[int, str, str], float] = {}  # (n, format, mode) -> median seconds; mode "copy" for the copy


@pytest.fixture(scope="module")
def inputs():
    out = {}
    for n in SIZES:
        x_np = make_input(n)
        out[n] = (x_np, jnp.asarray(x_np).block_until_ready())
    return out


def _median(benchmark) -> float | None:
    return None if benchmark.stats is None else benchmark.stats["median"]


@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"2^{n.bit_length() - 1}")
def test_copy(benchmark, inputs, n):
    benchmark.group = f"matrix 2^{n.bit_length() - 1} copy"
    x_np, _ = inputs[n]
    benchmark(x_np.copy)
    if (t := _median(benchmark)) is not None:
        _TIMES[n, "-", "copy"] = t


@pytest.mark.parametrize(("n", "fmt", "mode"), CASES, ids=[f"2^{n.bit_length() - 1}-{f}-{m}" for n, f, m in CASES])
def test_quantize(benchmark, inputs, n, fmt, mode):
    benchmark.group = f"matrix 2^{n.bit_length() - 1} {fmt}"
    x_np, x = inputs[n]
    if mode == "stochastic":
        fn, args = jax.jit(lambda v, k: fpemu.quantize(v, fmt, rounding="stochastic", key=k)), (x, jax.random.key(0))
    else:
        fn, args = jax.jit(lambda v: fpemu.quantize(v, fmt, rounding=mode)), (x,)

    def call():
        return fn(*args).block_until_ready()

    call()  # compile and warm up
    y = np.asarray(benchmark(call))
    if (t := _median(benchmark)) is not None:
        _TIMES[n, fmt, mode] = t
    again = np.asarray(fpemu.quantize(jnp.asarray(y), fmt))  # values of the format are fixed points
    nan = np.isnan(y)
    assert np.array_equal(nan, np.isnan(again)) and np.array_equal(y[~nan].view(np.uint32), again[~nan].view(np.uint32))


def summary_lines() -> list[str]:
    if not _TIMES:
        return []
    header = ["format", "mode", *(f"2^{n.bit_length() - 1}: ns/el (x copy, x NE)" for n in SIZES)]
    rows = []
    for fmt in FORMATS:
        for mode in ROUNDING_MODES:
            cells = []
            for n in SIZES:
                t, copy, ne = (
                    _TIMES.get((n, fmt, mode)),
                    _TIMES.get((n, "-", "copy")),
                    _TIMES.get((n, fmt, "nearest_even")),
                )
                if t is None:
                    cells.append("n/a")
                    continue
                copy_ratio, ne_ratio = (f"{t / base:.2f}" if base else "n/a" for base in (copy, ne))
                cells.append(f"{t / n * 1e9:.2f} ({copy_ratio}, {ne_ratio})")
            rows.append([fmt, mode, *cells])
    return text_table(rows, header, align="ll" + "r" * len(SIZES), markdown=True).splitlines()


@pytest.fixture(autouse=True)
def _summary(print_summary):
    print_summary(
        "fpemu quantize matrix summary (median ns/element; ratio to the NumPy copy, to nearest_even)", summary_lines
    )
