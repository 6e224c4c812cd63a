"""examples/training_recipes.py and examples/char_transformer.py learn under the training recipes
(reduced budgets; every recipe in the slow run)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import pytest

import fpemu

pytestmark = pytest.mark.long  # run first (tests/conftest.py)

pytest.importorskip("sklearn", reason="the digits MLP needs scikit-learn (pip install 'fpemu[examples]')")

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def _load(name: str):
    sys.path.insert(0, str(EXAMPLES))  # training_recipes imports the two model examples beside it
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


def _check(results: dict, precisions: tuple[str, ...]) -> None:
    baseline = results["mlp"]["fp32"]["test_accuracy"]
    for name in precisions:
        if name != "scalify_fp16":  # the transformer only
            accuracy = results["mlp"][name]["test_accuracy"]
            assert accuracy > 0.8 and abs(accuracy - baseline) < 0.06, (name, accuracy, baseline)  # chance: 0.1
        losses = results["transformer"][name]["losses"]
        assert losses[-1] < 0.8 * losses[0], (name, losses[0], losses[-1])  # it learns


def test_recipes_train_like_fp32(capsys):
    precisions = ("fp32", "fp8_current", "mxfp8")
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):  # user code: default JAX rules
        results = _load("training_recipes").main(
            ["--epochs", "2", "--steps", "40", "--precisions", ",".join(precisions)]
        )
    _check(results, precisions)
    out = capsys.readouterr().out
    assert "| mxfp8 |" in out and "| precision |" in out


@pytest.mark.slow
def test_every_recipe_trains_like_fp32():
    precisions = ("fp32", "bf16", *fpemu.TRAINING_RECIPES, "scalify_fp16")
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        results = _load("training_recipes").main(
            ["--epochs", "2", "--steps", "40", "--precisions", ",".join(precisions)]
        )
    _check(results, precisions)


def test_unknown_precision_is_refused():
    with pytest.raises(SystemExit):
        _load("training_recipes").main(["--precisions", "fp4"])
    with pytest.raises(ValueError, match="precision must be one of"):
        _load("char_transformer").grad_fn("fp4")
