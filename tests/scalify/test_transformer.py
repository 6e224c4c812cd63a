"""examples/char_transformer.py under `scalify` in float16: gradients as fp32's, and a short training run.

One layer instead of two (the scalified step's XLA compilation dominates the run time), batch 32.
The example's causal softmax is normalised by the largest *visible* score, as fp16 needs
(docs/scalify.md, "Training a transformer"): with the largest score of the whole row, a row whose
visible scores are ~7 below it has a denominator near e**-7, whose ``integer_pow(y, -2)`` in the
derivative of the division overflows float16 (65504) whatever the scale.
"""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "char_transformer.py"
STEPS, BATCH = 40, 32


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("char_transformer_scalify_test", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.LAYERS = 1
    return module


@pytest.mark.long
def test_scalified_fp16_gradients_and_training_match_fp32(example):
    # The example adds (9, 64) positions to (batch, 9, 64) embeddings and, in float16, multiplies
    # float16 log-probabilities by a float32 mask: NumPy-style promotion, not the suite's strict one.
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        _check(example)


def _check(example):
    train_tokens, _ = example.make_data()
    params = example.init_params()
    grad16 = jax.jit(example._scalify_fp16)
    grad32 = jax.jit(jax.value_and_grad(example.loss))
    batch = jnp.asarray(train_tokens[:BATCH])
    (v16, g16), (v32, g32) = grad16(params, batch), grad32(params, batch)
    assert abs(float(v16) - float(v32)) <= 1e-3 * float(v32)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g16), jax.tree.leaves(g32), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == np.float32 and np.isfinite(a).all(), jax.tree_util.keystr(path)
        assert np.linalg.norm(a - b) <= 1e-2 * np.linalg.norm(b), jax.tree_util.keystr(path)  # measured ~2e-3

    init, update = example.adam(3e-3)
    update = jax.jit(update)
    curves = {}
    for name, grad in (("fp32", grad32), ("fp16", grad16)):
        p, opt, losses = params, init(params), []
        rng = np.random.default_rng(0)
        for _ in range(STEPS):
            value, grads = grad(p, jnp.asarray(train_tokens[rng.integers(0, len(train_tokens), BATCH)]))
            p, opt = update(p, grads, opt)
            losses.append(float(value))
        curves[name] = losses
    fp32, fp16 = curves["fp32"], curves["fp16"]
    assert np.isfinite(fp16).all()
    assert np.mean(fp32[-5:]) < 0.7 * fp32[0], fp32  # it learns...
    assert abs(np.mean(fp16[-5:]) - np.mean(fp32[-5:])) <= 0.03 * np.mean(fp32[-5:]), (fp16, fp32)  # ...as fp32 does
