"""Speed of scaled (block) quantization beside plain `fpemu.quantize` to the element format.

One table (group) per block format, on the suite's shared input (2**24 float32 values, conftest.py), with
blocks along its only axis. Every row is jitted, compiled and run once before timing, and each
timed call ends in ``block_until_ready``. ``-donated`` rows pass a fresh, already written copy of
the input with ``donate_argnums=0`` (made outside the timed region), so the output reuses its pages
(see bench/README.md, "Page faults"). After timing, each row checks a prefix of its output: MX rows
against the NumPy reference (`fpemu.testing.scaled_reference`), NVFP4 and per-tensor FP8 against
`quantize(...).dequantize()` (their tensor scale needs the whole input), plain rows against ml_dtypes.

The module prints its own summary (ratios of each scaled row to plain quantize of the same group,
the verdict on the issue's target: MX quantize + dequantize within 2x of plain quantize, and the
cost of rounding through the core engine instead of the scaled layer's fused nearest-even pass).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.testing import scaled_reference as reference
from fpemu.testing import text_table
from fpemu.tools.bench import machine_line

CHECK = 1 << 16  # elements checked after timing (whole blocks)
GROUPS = {"mxfp8_e4m3": "e4m3fn", "mxfp4": "e2m1fn", "nvfp4": "e2m1fn", "fp8_e4m3": "e4m3fn"}
WHOLE_INPUT = ("nvfp4", "fp8_e4m3")  # a tensor scale: the scales depend on the whole input
ROWS = {
    "scaled qdq": "jit scaled.quantize_dequantize(x, block_format): the fused simulation path",
    "plain quantize": "jit fpemu.quantize(x, element): the same tensor to the element format, unscaled",
    "scaled quantize": "jit scaled.BlockArray.from_array(x, block_format): float32 values + uint8 scales",
    "scaled via engine": "jit BlockArray.from_array(x, block_format).dequantize(): the qdq bits through the core "
    "rounding engine (scale down, round, scale up) instead of the fused nearest-even pass",
    "scaled qdq-donated": "the fused path, donate_argnums=0",
    "plain quantize-donated": "plain quantize, donate_argnums=0",
    "scaled via engine-donated": "scaled via engine, donate_argnums=0",
}
# "scaled via engine" only where qdq has its own fused pass: power-of-two (MX) block formats, nearest even
CASES = [(g, r) for g in GROUPS for r in ROWS if not (g in WHOLE_INPUT and r.startswith("scaled via engine"))]
_TIMES: dict[tuple[str, str], dict[str, float]] = {}


def _fn(group: str, row: str):
    base = row.removesuffix("-donated")
    if base == "scaled qdq":
        return lambda x: scaled.quantize_dequantize(x, group)
    if base == "plain quantize":
        return lambda x: fpemu.quantize(x, GROUPS[group])
    if base == "scaled quantize":
        return lambda x: scaled.BlockArray.from_array(x, group)
    if base == "scaled via engine":
        return lambda x: scaled.BlockArray.from_array(x, group).dequantize()
    raise ValueError(f"unknown row {row!r}; rows: {', '.join(ROWS)}")


def _run(benchmark, rounds_for, fn, x, donated: bool):
    if not donated:
        jitted = jax.jit(fn)

        def call():
            return jax.block_until_ready(jitted(x))

        call()  # compile and warm up
        return benchmark(call)
    jitted = jax.jit(fn, donate_argnums=0)

    def setup():  # a fresh input buffer per round, written before the timer starts
        return (jnp.copy(x).block_until_ready(),), {}

    def call(arg):
        return jax.block_until_ready(jitted(arg))

    call(*setup()[0])  # compile and warm up
    args, _ = setup()
    start = time.perf_counter()
    call(*args)
    rounds = rounds_for(time.perf_counter() - start)
    return benchmark.pedantic(call, setup=setup, rounds=rounds, warmup_rounds=1)


def _check(group: str, row: str, x_np: np.ndarray, x: jax.Array, out) -> None:
    base = row.removesuffix("-donated")
    prefix = x_np[:CHECK]
    if base == "plain quantize":
        y = np.asarray(out)[:CHECK]
        with np.errstate(over="ignore", invalid="ignore"):
            expected = prefix.astype(fpemu.get_format(GROUPS[group]).dtype).astype(np.float32)
        reference.assert_equal(y, expected, f"{group} {row}")
        return
    if base == "scaled quantize":
        y = np.asarray(out.dequantize())[:CHECK]
    else:
        y = np.asarray(out)[:CHECK]
    if group in WHOLE_INPUT:
        reference.assert_equal(
            y, np.asarray(scaled.BlockArray.from_array(x, group).dequantize())[:CHECK], f"{group} {row}"
        )
    else:
        reference.assert_equal(y, reference.quantize(prefix, group).dequantized, f"{group} {row}")


@pytest.mark.parametrize(("group", "row"), CASES, ids=[f"{g}-{r}" for g, r in CASES])
def test_scaled_speed(benchmark, rounds_for, x, x_np, group, row):
    benchmark.group = f"scaled {group}"
    benchmark.extra_info["row"] = ROWS[row]
    out = _run(benchmark, rounds_for, _fn(group, row), x, row.endswith("-donated"))
    if benchmark.stats is not None:
        _TIMES[group, row] = {stat: benchmark.stats[stat] for stat in ("median", "min")}
        benchmark.extra_info["ns_per_element_median"] = benchmark.stats["median"] / x.size * 1e9
    _check(group, row, x_np, x, out)


def summary_lines(times: dict[tuple[str, str], dict[str, float]], n: int = 1 << 24) -> list[str]:
    table = []
    for (group, row), t in times.items():
        peer = "plain quantize-donated" if row.endswith("-donated") else "plain quantize"
        base = times.get((group, peer))
        ratios = [f"{t[s] / base[s]:.2f}" if base else "n/a" for s in ("median", "min")]
        table.append([group, row, f"{t['median'] / n * 1e9:.2f}", f"{t['min'] / n * 1e9:.2f}", *ratios])
    header = ["block format", "row", "median ns/element", "min ns/element", "median / plain", "min / plain"]
    markdown = text_table(table, header, align="llrrrr", markdown=True)
    lines = [f"{n} float32 elements; {machine_line()}", "", *markdown.splitlines(), ""]
    for suffix in ("", "-donated"):
        for group in ("mxfp8_e4m3", "mxfp4"):
            a, b = times.get((group, "scaled qdq" + suffix)), times.get((group, "plain quantize" + suffix))
            if a and b:
                verdicts = [
                    f"by {s}: {'met' if a[s] <= 2 * b[s] else 'MISSED'} ({a[s] / b[s]:.2f})" for s in ("median", "min")
                ]
                label = f"target {group} qdq{suffix} <= 2x plain quantize to {GROUPS[group]}: "
                lines.append(label + "; ".join(verdicts))
    for suffix in ("", "-donated"):
        for group in GROUPS:
            a, b = times.get((group, "scaled via engine" + suffix)), times.get((group, "scaled qdq" + suffix))
            if a and b:
                ratios = ", ".join(f"{s} {a[s] / b[s]:.2f}" for s in ("median", "min"))
                lines.append(f"{group}{suffix}: through the core engine / fused qdq = {ratios}")
    return lines


@pytest.fixture(autouse=True)
def _summary(print_summary):
    print_summary("fpemu scaled speed summary", lambda: summary_lines(_TIMES) if _TIMES else [])
