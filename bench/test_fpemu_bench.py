"""Every row of ``fpemu bench`` (full mode), timed by pytest-benchmark.

The rows, their inputs and their peers are `fpemu.tools.bench.plan`'s (docs/benchmarks.md): the same
code as the command, so the two cannot drift apart. gfloat's rows appear when gfloat is installed;
a row that cannot run on this machine (a cast XLA cannot compile, gfloat failing under jit) is
skipped with its reason. The summary prints ns/element with the ratios to the NumPy copy and to the
row's fpemu baseline.
"""

from __future__ import annotations

import jax
import pytest

from fpemu.tools import bench as _bench

CASES = _bench.plan(_bench.FULL)
_TIMES: dict[str, float] = {}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_row(benchmark, case):
    benchmark.group = f"fpemu bench: {case.group}"
    benchmark.extra_info["what"] = case.what
    try:
        call = case.make()
    except _bench.Skip as reason:
        pytest.skip(str(reason))
    jax.block_until_ready(call())  # compile and warm up
    benchmark(lambda: jax.block_until_ready(call()))
    if benchmark.stats is not None:
        _TIMES[case.name] = benchmark.stats["median"]


def summary_lines() -> list[str]:
    if not _TIMES:
        return []
    per_element = {c.name: _TIMES[c.name] / c.elements * 1e9 for c in CASES if c.name in _TIMES}
    copy = per_element.get("reference/numpy_copy")
    lines = ["| row | ns/element | x copy | x fpemu (baseline) |", "|---|---:|---:|---|"]
    for case in CASES:
        if case.name not in per_element:
            continue
        ns, base = per_element[case.name], per_element.get(case.baseline)
        to_copy = f"{ns / copy:.2f}" if copy else "n/a"
        to_base = f"{ns / base:.2f} ({case.baseline})" if base else f"n/a ({case.baseline})"
        lines.append(f"| {case.name} | {ns:.3g} | {to_copy} | {to_base} |")
    return lines


@pytest.fixture(autouse=True)
def _summary(print_summary):
    print_summary("fpemu bench rows (median; ns per element, per multiply-add for matmul rows)", summary_lines)
