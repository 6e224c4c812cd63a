"""Runs docs/tutorial_pallas.md: every ```python block in order, in one namespace; where a block is
followed by a ```text block, what the python block printed must match it (doctest rules, with
ELLIPSIS: ``...`` matches anything)."""

from __future__ import annotations

import contextlib
import doctest
import io
import pathlib
import re

import pytest

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tutorial_pallas.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def _blocks() -> list[tuple[str, str, int]]:
    text = TUTORIAL.read_text()
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def test_the_tutorial_has_code_and_outputs():
    kinds = [kind for kind, _, _ in _blocks()]
    assert kinds.count("python") >= 5 and kinds.count("text") >= 4


@pytest.mark.long
def test_the_tutorial_runs_and_prints_what_it_shows():
    namespace: dict = {"__name__": "tutorial_pallas"}
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    blocks = _blocks()
    for i, (kind, source, line) in enumerate(blocks):
        if kind != "python":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"{TUTORIAL.name}:{line}", "exec"), namespace)
        follows = blocks[i + 1] if i + 1 < len(blocks) else None
        if follows is not None and follows[0] == "text":
            want, got = follows[1], out.getvalue()
            assert checker.check_output(want, got, flags), (
                f"{TUTORIAL.name}:{follows[2]}: the block at line {line} printed\n{got}\nbut the page shows\n{want}"
            )
        else:
            assert out.getvalue() == "", f"{TUTORIAL.name}:{line} printed output the page does not show"
