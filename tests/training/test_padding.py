"""A contraction that the block does not divide: the training recipes pad it, `fpemu.scaled` refuses it
unless asked (docs/training.md). Both compute the same bits once `pad=True` is given."""

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled
from fpemu._training import quantize_operand, training_recipe
from fpemu.testing import assert_bit_exact


def test_a_contraction_of_40_is_padded_by_the_recipe_and_refused_by_quantize_dequantize():
    rng = np.random.default_rng(3)
    x = jnp.asarray((rng.normal(size=(4, 40)) * np.exp2(rng.integers(-4, 5, size=(4, 40)))).astype(np.float32))
    lhs = training_recipe("mxfp8").forward.lhs  # blocks of 32 along the lhs's contraction (its last axis)
    with pytest.raises(ValueError, match=r"x.shape\[1\]=40 is not a multiple of block_size=32.*pass pad=True"):
        scaled.quantize_dequantize(x, "mxfp8")
    got = quantize_operand(x, (1,), lhs)
    assert_bit_exact(got, scaled.quantize_dequantize(x, "mxfp8", axis=1, pad=True))
    # the last block of 8 has its own scale, from its own amax
    assert_bit_exact(got[:, 32:], scaled.quantize_dequantize(x[:, 32:], "mxfp8", axis=1, pad=True))
