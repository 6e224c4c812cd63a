"""`fold_key`: a Python integer's hash taken on the host gives the key a traced integer gives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._emulate.rounding import fold_key
from fpemu._engine.rng import seeds_from_key

ROOT = seeds_from_key(jax.random.key(7))


@pytest.mark.parametrize("data", [(0,), (5,), (-3,), (np.int64(12),), (True,), (0x47454D4D, 3, 2)])
def test_static_integers_fold_to_the_keys_of_traced_ones(data):
    static = fold_key(ROOT, *data)
    traced = jax.jit(lambda *d: fold_key(ROOT, *d))(*(jnp.asarray(int(d), jnp.int32) for d in data))
    assert static.dtype == jnp.uint32 and static.shape == (2,)
    np.testing.assert_array_equal(np.asarray(static), np.asarray(traced))


def test_each_integer_gives_its_own_key():
    keys = {tuple(np.asarray(fold_key(ROOT, d)).tolist()) for d in range(64)}
    assert len(keys) == 64


def test_without_a_key_there_is_no_key():
    assert fold_key(None, 1, 2) is None
