"""Every row of ``fpemu bench`` (full mode), timed by pytest-benchmark; the command line's time limits.

The rows, their inputs and their peers are `fpemu.tools.bench.plan`'s (docs/benchmarks.md): the same
code as the command, so the two cannot drift apart. gfloat's rows appear when gfloat is installed;
a row that cannot run on this machine (a cast XLA cannot compile, gfloat failing under jit) is
skipped with its reason. The summary prints ns/element with the ratios to the NumPy copy and to the
row's fpemu baseline.

The wall-clock limits of ``fpemu bench --quick`` (60 s) and ``fpemu demo`` (30 s) are checked here,
not in the unit suite (tests/), whose results must not depend on how loaded the machine is.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time

import jax
import pytest

from fpemu.testing import text_table
from fpemu.tools import bench as _bench
from fpemu.tools.cli import main

QUICK_SECONDS = 60  # the limit for the whole `fpemu bench --quick` run, compilation included
DEMO_SECONDS = 30  # the limit for `fpemu demo`

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
    rows = []
    for case in CASES:
        if case.name not in per_element:
            continue
        ns, base = per_element[case.name], per_element.get(case.baseline)
        to_copy = f"{ns / copy:.2f}" if copy else "n/a"
        to_base = f"{ns / base:.2f} ({case.baseline})" if base else f"n/a ({case.baseline})"
        rows.append([case.name, f"{ns:.3g}", to_copy, to_base])
    header = ["row", "ns/element", "x copy", "x fpemu (baseline)"]
    return text_table(rows, header, align="lrrl", markdown=True).splitlines()


@pytest.fixture(autouse=True)
def _summary(print_summary):
    print_summary("fpemu bench rows (median; ns per element, per multiply-add for matmul rows)", summary_lines)


# The time limits: one run each (under pytest-benchmark, so that `--benchmark-only` keeps them).


def _timed_main(argv: list[str]) -> tuple[int, str, float]:
    """``fpemu ARGV`` in-process: (exit status, stdout, wall-clock seconds)."""
    stdout = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    return status, stdout.getvalue(), time.perf_counter() - start


def test_quick_run_in_time(benchmark, tmp_path):
    """``fpemu bench --quick`` in under a minute, compilation included (timed around the call and by the run)."""
    argv = ["bench", "--quick", "--no-progress", "--json", str(tmp_path / "bench.json")]
    status, _, seconds = benchmark.pedantic(_timed_main, args=(argv,), rounds=1, iterations=1)
    assert status == 0
    assert seconds < QUICK_SECONDS
    meta = json.loads((tmp_path / "bench.json").read_text())["meta"]
    assert 0 < meta["seconds"] < QUICK_SECONDS


def test_demo_in_time(benchmark):
    status, out, _ = benchmark.pedantic(_timed_main, args=(["demo"],), rounds=1, iterations=1)
    assert status == 0
    assert float(re.search(r"Demo done in ([\d.]+) s", out).group(1)) < DEMO_SECONDS
