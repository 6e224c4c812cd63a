"""examples/scalify_mlp.py at a reduced budget: fp16 and FP8 under scalify learn as fp32 does."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install 'fpemu[examples]')")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "scalify_mlp.py"


def _load():
    spec = importlib.util.spec_from_file_location("scalify_mlp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.long
def test_scalified_fp16_and_fp8_training_match_fp32():
    example = _load()
    data = example.load_data()
    results = {r: example.train(r, epochs=2, data=data) for r in example.RECIPES}
    fp32 = results["fp32"]["test_accuracy"]
    assert fp32 > 0.9
    for recipe in ("fp16", "fp8"):
        assert results[recipe]["finite"]
        assert abs(results[recipe]["test_accuracy"] - fp32) <= 0.02, results  # the full run: within 0.5 points


def test_rejects_unknown_recipe():
    with pytest.raises(ValueError, match="recipe must be one of"):
        _load().train("fp4", epochs=1)
