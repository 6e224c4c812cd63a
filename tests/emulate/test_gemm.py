"""`gemm_keys`: the keys of a dot's GEMMs derived together are the root folded with the tag, the dot's
ordinal and the GEMM's index in one `fold_key` (docs/training.md, "Keys"), as `gemm_key` gives them."""

from __future__ import annotations

import jax
import numpy as np

from fpemu._emulate.gemm import GEMM_KEY_TAG, gemm_key, gemm_keys
from fpemu._emulate.rounding import fold_key
from fpemu._engine.rng import seeds_from_key
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
