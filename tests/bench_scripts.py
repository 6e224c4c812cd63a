"""Running a bench/ script as a user would, for the tests of bench/buffer_peak.py and bench/kernel_profile.py:
in a subprocess (each sets process-wide state: XLA's dump flags, JAX's profiler), on the CPU; and the program
of a row the scripts report on, compiled in the test's own process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import jax

from fpemu.tools import sweep

ROOT = Path(__file__).resolve().parent.parent
_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}


def run(*args: str) -> subprocess.CompletedProcess:
    """``python3 ARGS...`` from the repository's root, its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_ENV, capture_output=True, text=True, timeout=300, check=False
    )


def assert_examples_pass(script: Path, functions: tuple[str, ...]) -> None:
    """The script's docstring examples pass, and those of each of ``functions`` ran."""
    result = run("-m", "doctest", "-v", str(script))
    assert result.returncode == 0, result.stdout + result.stderr
    for name in functions:
        assert re.search(rf"^ +\d+ tests in {script.stem}\.{name}$", result.stdout, re.MULTILINE), name
    assert re.search(r"^\d+ passed and 0 failed\.$", result.stdout, re.MULTILINE), result.stdout[-500:]


def compiled_mlp_row(row: str) -> Any:
    """The digits MLP's step of a `fpemu sweep` row, compiled here, to check what a script says of it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MLP's Adam literals under bf16
        build, row_args = sweep.row("mlp", row)
        return jax.jit(build()).lower(*row_args).compile()
