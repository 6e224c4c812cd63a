"""`gemm_keys`: the keys of a dot's GEMMs derived together are the root folded with the tag, the dot's
ordinal and the GEMM's index in one `fold_key` (docs/training.md, "Keys"), as `gemm_key` gives them;
`split_gemm_keys`: every GEMM's key split in three, all in one batch, as each GEMM's own split; and
the observation of quantized operands (statistics, delayed histories) traces NVFP4's Hadamard
transform only for the operands it observes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._emulate.gemm import GEMM_KEY_TAG, gemm_key, gemm_keys, split_gemm_keys
from fpemu._emulate.rounding import fold_key, fold_keys
from fpemu._engine.rng import seeds_from_key
from fpemu._training.gemm_dot import split_key
from fpemu._training.recipes import GEMMS

ROOT = seeds_from_key(jax.random.key(3))


def test_keys_derived_together_equal_each_gemms_key():
    for ordinal in (0, 1, 17):
        keys = gemm_keys(ROOT, ordinal, GEMMS)
        assert list(keys) == list(GEMMS)
        for index, which in enumerate(GEMMS):
            folded = np.asarray(fold_key(ROOT, GEMM_KEY_TAG, ordinal, index))
            np.testing.assert_array_equal(np.asarray(keys[which]), folded)
            np.testing.assert_array_equal(np.asarray(gemm_key(ROOT, ordinal, which)), folded)
    every = {tuple(np.asarray(k).tolist()) for o in range(4) for k in gemm_keys(ROOT, o, GEMMS).values()}
    assert len(every) == 4 * len(GEMMS)


def test_a_subset_and_no_root():
    assert list(gemm_keys(ROOT, 2, ["wgrad"])) == ["wgrad"]
    assert gemm_keys(ROOT, 2, []) == {}
    assert gemm_keys(None, 2, ["forward", "dgrad"]) == {"forward": None, "dgrad": None}


def test_fold_keys_folds_each_integer_as_fold_key():
    data = [0, 1, 5, 2**20 + 3, 2**32 - 1]
    rows = np.asarray(fold_keys(ROOT, data))
    assert rows.shape == (len(data), 2) and rows.dtype == np.uint32
    for row, d in zip(rows, data, strict=True):
        np.testing.assert_array_equal(row, np.asarray(fold_key(ROOT, d)))
    again = np.asarray(fold_keys(jnp.asarray(rows), [7, 8, 9, 10, 11]))  # one key per integer, row by row
    for row, key, d in zip(again, rows, [7, 8, 9, 10, 11], strict=True):
        np.testing.assert_array_equal(row, np.asarray(fold_key(jnp.asarray(key), d)))


@pytest.mark.parametrize("partitionable", [True, False])
def test_split_gemm_keys_equal_each_gemms_own_split(partitionable):
    pairs = [(0, "dgrad"), (0, "wgrad"), (1, "forward"), (3, "wgrad"), (2**20, "dgrad")]  # 2**20: an unpaired dot
    with jax.threefry_partitionable(partitionable):
        batch = split_gemm_keys(ROOT, pairs)
        assert list(batch) == pairs
        for (ordinal, which), keys in batch.items():
            own = split_key(gemm_key(ROOT, ordinal, which))
            for got, want in zip(keys, own, strict=True):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert split_gemm_keys(ROOT, []) == {}


def _splits(fn, *args) -> int:
    """How many ``random_split`` equations the jaxpr of ``fn`` holds, its inner jaxprs included."""

    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name == "random_split"
            for value in eqn.params.values():
                for inner in value if isinstance(value, (tuple, list)) else [value]:
                    inner = getattr(inner, "jaxpr", inner)
                    n += count(inner) if hasattr(inner, "eqns") else 0
        return n

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def test_a_traced_body_splits_the_keys_of_all_its_gemms_at_once():
    # NVFP4's dgrad and wgrad draw random bits (stochastic rounding, the Hadamard signs): three dots, four such
    # GEMMs in the backward pass, one split for all of them, whichever of emulate and grad is outside
    loss = lambda w1, w2, x: jnp.sum(jnp.tanh(x @ w1) @ w2)
    w1, w2, x = jnp.ones((32, 32)), jnp.ones((32, 16)), jnp.ones((16, 32))
    policy, key = fpemu.Policy(dot="nvfp4"), jax.random.key(1)
    inside = fpemu.emulate(jax.grad(loss, argnums=(0, 1)), policy, key=key)
    outside = jax.grad(lambda *a: fpemu.emulate(loss, policy, key=key)(*a), argnums=(0, 1))
    assert _splits(inside, w1, w2, x) == 1
    assert _splits(outside, w1, w2, x) == 1
    np.testing.assert_array_equal(
        np.asarray(jax.jit(inside)(w1, w2, x)[0]).view(np.uint32),
        np.asarray(jax.jit(outside)(w1, w2, x)[0]).view(np.uint32),
    )


def test_only_observed_operands_have_their_hadamard_transform_traced_for_observation(monkeypatch):
    # NVFP4's wgrad operands are observed (for statistics or a delayed history) through the same
    # Hadamard transform their quantizers use; with nothing to observe, no transform is traced for it
    import fpemu._emulate.gemm as gemm

    calls = []
    transform = gemm.hadamard_along
    monkeypatch.setattr(gemm, "hadamard_along", lambda *a, **k: calls.append(a[1]) or transform(*a, **k))
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))
    w, x = jnp.ones((32, 16)), jnp.ones((16, 32))
    policy, key = fpemu.Policy(dot="nvfp4"), jax.random.key(1)
    plain = jax.make_jaxpr(fpemu.emulate(jax.grad(loss), policy, key=key))(w, x)
    assert calls == []
    counted = jax.make_jaxpr(fpemu.emulate(jax.grad(loss), policy, key=key, with_stats=True))(w, x)
    assert len(calls) == 2  # wgrad's two operands
    assert len(plain.eqns) < len(counted.eqns)
