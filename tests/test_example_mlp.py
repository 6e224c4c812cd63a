"""examples/fp8_mlp_digits.py learns in float32, bf16 and emulated FP8 (run on a reduced budget)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install 'fpemu[examples]')")

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "fp8_mlp_digits.py"


def _load():
    spec = importlib.util.spec_from_file_location("fp8_mlp_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.long
def test_fp8_training_learns_like_fp32(capsys):
    metrics = _load().main(["--epochs", "3"])
    recipes = ("fp32", "bf16", "fp8", "fp8-unscaled")
    fp32 = metrics["fp32"]["final_accuracy"]
    assert fp32 > 0.85  # 10 classes: chance is 0.1
    for recipe in recipes[1:]:
        accuracy = metrics[recipe]["final_accuracy"]
        assert accuracy > 0.85 and abs(accuracy - fp32) < 0.05, (recipe, accuracy, fp32)
    for recipe in recipes:
        losses = metrics[recipe]["loss"]
        assert len(losses) == 3 and losses[-1] < losses[0]
    operands = metrics["unscaled_fp8_operands"]
    assert set(operands) == {f"layer{i}/dot_general.{side}" for i in range(3) for side in ("lhs", "rhs")}
    out = capsys.readouterr().out
    assert "| fp8 |" in out and "underflow" in out


def test_rejects_unknown_recipe():
    with pytest.raises(SystemExit):
        _load().main(["--recipes", "fp4"])
