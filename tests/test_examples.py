"""The examples run, and show what they claim."""

import importlib.util
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stochastic_accumulation_beats_stagnation(capsys):
    results = _load("stochastic_accumulation").main(["--steps", "4000", "--increment", "0.001"])
    exact = 4.0
    assert abs(results["nearest_even"] - exact) / exact > 0.2  # stagnates well short of 4
    assert results["toward_zero"] <= results["nearest_even"]
    assert abs(results["stochastic"] - exact) / exact < 0.05
    assert "stochastic" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_every_example_has_a_docstring_and_main(path):
    source = path.read_text()
    assert source.startswith('"""') and "def main(" in source
