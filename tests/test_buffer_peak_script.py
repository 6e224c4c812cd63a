"""bench/buffer_peak.py, the script that reads XLA:CPU's dumps to say what is alive at the peak of a
`fpemu sweep` row's buffer: its examples, a run on the digits MLP checked against the compiled
programs' own buffer sizes, and a bad row refused. Each runs in a subprocess, because importing the
script sets ``XLA_FLAGS`` (the dumps) for the process."""

from __future__ import annotations

import re

import pytest

from tests.bench_scripts import ROOT, assert_examples_pass, compiled_mlp_row, run

SCRIPT = ROOT / "bench" / "buffer_peak.py"


def test_the_examples_of_its_parsers_pass():
    assert_examples_pass(SCRIPT, ("peak_values", "op_names", "short_op_name"))


def _temp_mib(row: str) -> str:
    """The row's temp buffer, compiled here, as the script prints it."""
    return f"{compiled_mlp_row(row).memory_analysis().temp_size_in_bytes / 2**20:.2f}"


@pytest.mark.long
def test_a_run_reports_each_rows_buffer_and_its_peak():
    result = run(str(SCRIPT), "--model", "mlp", "--top", "2", "emulated bf16", "mxfp8")
    assert result.returncode == 0, result.stderr
    reports = result.stdout.split("## ")[1:]
    assert [r.splitlines()[0] for r in reports] == ["emulated bf16", "mxfp8"]
    for row, text in zip(["emulated bf16", "mxfp8"], reports, strict=True):
        head = re.match(
            r".*\ntemp buffer (\S+) MiB \((\S+) MiB under glibc's 32 MiB mmap threshold\); peak at schedule index "
            r"(\d+): (\S+) MiB live in all allocations \(parameters included\), (\d+) values\n",
            text,
        )
        assert head is not None, text
        temp, margin, _, live, count = head.groups()
        assert temp == _temp_mib(row)
        assert abs(float(temp) + float(margin) - 32) < 0.011
        table = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")][1:]  # after the header
        rows = [(cells[0][2:], cells[1], cells[-1][:-2]) for cells in table]  # MiB, values, made by
        assert len(rows) == 3 and rows[-1][2].endswith("more groups"), text  # the top 2, then the rest
        assert sum(int(n) for _, n, _ in rows) == int(count)
        assert abs(sum(float(mib) for mib, _, _ in rows) - float(live)) < 0.02
        assert all(made_by.startswith("`") for _, _, made_by in rows[:2])  # grouped by the op that made them


def test_a_row_that_is_not_one_is_refused_with_the_choices():
    result = run(str(SCRIPT), "--model", "mlp", "mxfp9")
    assert result.returncode == 2
    assert "argument ROW: 'mxfp9' is not a row" in result.stderr and "mxfp8" in result.stderr, result.stderr
