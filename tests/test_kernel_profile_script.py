"""bench/kernel_profile.py, the script that says where XLA:CPU's compile time and a `fpemu sweep` row's step
time go, kernel by kernel: its examples, a run on the digits MLP checked against the compiled programs'
own kernels, and a bad row refused. Each runs in a subprocess, as the script would (it starts JAX's
profiler). Times are printed, never compared."""

from __future__ import annotations

import re

import pytest

from fpemu.tools import sweep
from tests.bench_scripts import ROOT, assert_examples_pass, compiled_mlp_row, run

SCRIPT = ROOT / "bench" / "kernel_profile.py"
_TOP = 3


def test_the_examples_of_its_parsers_pass():
    assert_examples_pass(SCRIPT, ("kernel_of_module", "family", "program_kernels"))


def _program_kernels(row: str) -> int:
    """The kernels of the row's program, compiled here, as `fpemu sweep` counts them (`sweep.program_size`)."""
    return sweep.program_size(compiled_mlp_row(row).as_text())[0]


def _table(lines: list[str]) -> list[list[str]]:
    """The cells of a Markdown table's body (after its header and rule)."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.long
def test_a_run_reports_each_rows_kernels():
    rows = ["fp32", "mxfp8"]
    result = run(str(SCRIPT), "--model", "mlp", "--top", str(_TOP), "--calls", "2", *rows)
    assert result.returncode == 0, result.stderr
    reports = result.stdout.split("## ")[1:]
    assert [r.splitlines()[0] for r in reports] == rows
    for row, text in zip(rows, reports, strict=True):
        blocks = [block.splitlines() for block in text.strip().split("\n\n")]
        assert len(blocks) == 6, text  # compile line, kernels, families; step line, kernels, families
        head = re.fullmatch(
            rf"{row}\ncompile: XLA (\S+) s \(profiler on\); (\d+) kernels generated in (\S+) s \(summed over the "
            r"compiler's threads\), (\d+) of them by the older emitter \((\S+) s\)",
            "\n".join(blocks[0]),
        )
        assert head is not None, text
        generated, older = int(head.group(2)), int(head.group(4))
        assert 1 <= generated and older <= generated
        compiles = _table(blocks[1])
        assert len(compiles) == min(_TOP, generated)
        times = [float(cells[0]) for cells in compiles]
        assert times == sorted(times, reverse=True)  # the longest first
        assert {cells[2] for cells in compiles} <= {"older", "newer"}
        assert sum(cells[2] == "older" for cells in compiles) <= older
        _check_families(_table(blocks[2]), generated)
        step = re.fullmatch(
            r"step: 2 calls of \S+ ms \(median, profiler on\); (\d+) kernel events a call, \S+ ms of kernel time a "
            r"call \(summed over threads\); (\d+) of the program's (\d+) kernels seen",
            "\n".join(blocks[3]),
        )
        assert step is not None, blocks[3]
        events, seen, program = (int(g) for g in step.groups())
        assert program == _program_kernels(row)  # the script's kernels are the sweep's
        assert 1 <= seen <= program and events >= seen  # a seen kernel ran at least once a call
        kernels = _table(blocks[4])
        assert len(kernels) == min(_TOP, seen)
        assert all(re.fullmatch(r"`[\w.\-]+`", cells[2]) and cells[3].startswith("`") for cells in kernels)
        _check_families(_table(blocks[5]), seen)


def _check_families(families: list[list[str]], kernels: int) -> None:
    """A family table: at most the top ones, the longest first, no more kernels than there are."""
    assert 1 <= len(families) <= _TOP and sum(int(cells[1]) for cells in families) <= kernels
    assert [float(c[0]) for c in families] == sorted((float(c[0]) for c in families), reverse=True)


def test_a_row_that_is_not_one_is_refused_with_the_choices():
    result = run(str(SCRIPT), "--model", "mlp", "mxfp9")
    assert result.returncode == 2
    assert "argument ROW: 'mxfp9' is not a row" in result.stderr and "mxfp8" in result.stderr, result.stderr
