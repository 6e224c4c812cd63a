"""Stochastic-rounding variants of the scaled formats: `BlockArray.from_array` and
`quantize_dequantize` with ``stochastic_variant`` against the independent reference
(`fpemu.testing.scaled_reference`, whose element rounding is `fpemu.testing.reference`), bit for bit,
with the random bits the key gives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._engine import rng as _random
from fpemu.scaled import BlockArray, quantize_dequantize
from fpemu.testing import scaled_reference as reference

VARIANTS = ["floor", "nearest_even", "nearest_odd", "nearest_away"]
KEY = jax.random.key(23)


def _x(shape=(4, 64)) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape[:-1] + (1,))
    x = x.astype(np.float32)
    x[0, :3] = [np.float32(0.0), np.float32(-0.0), np.float32(2.0**-149)]
    return x


def _random_bits(shape, random_bits: int) -> np.ndarray:
    """The bits the fast path draws from KEY: the top ``random_bits`` of each element's word."""
    words = np.asarray(_random.random_uint32(_random.seeds_from_key(KEY), shape))
    return words >> np.uint32(32 - random_bits)


@pytest.mark.long
@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp8_e4m3", "nvfp4"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_matches_reference(recipe, variant):
    x, k = _x(), 3
    kw = dict(rounding="stochastic", random_bits=k, stochastic_variant=variant)
    expected = reference.quantize(x, recipe, random=_random_bits(x.shape, k), **kw)
    sa = BlockArray.from_array(jnp.asarray(x), recipe, key=KEY, **kw)
    reference.assert_equal(sa, expected, f"{recipe} {variant}")
    reference.assert_equal(quantize_dequantize(jnp.asarray(x), recipe, key=KEY, **kw), expected.dequantized, "fused")


@pytest.mark.long
def test_variants_change_the_bits():
    """A block with amax 1.5 has the scale 2**-2; 4.625 / 4 scales to 4.625, 5/16 of a step (2) above 4
    on the E2M1 grid. With 3 random bits r it rounds up iff T + r >= 8, T = 8 * 5/16 = 2.5 rounded:
    2 by floor and nearest_even, 3 by nearest_odd and nearest_away (the same r for every variant)."""
    x = jnp.full((1, 4096), 4.625 / 4, jnp.float32).at[0, 0].set(1.5)  # amax 1.5: scale 2**-2
    ups = {}
    for variant in VARIANTS:
        y = quantize_dequantize(x, "mxfp4", rounding="stochastic", key=KEY, random_bits=3, stochastic_variant=variant)
        ups[variant] = int(np.sum(np.asarray(y)[0, 1:] == 1.5))
    assert ups["floor"] == ups["nearest_even"] < ups["nearest_odd"] == ups["nearest_away"], ups


def test_default_variant_is_floor():
    x = jnp.asarray(_x())
    kw = dict(rounding="stochastic", key=KEY, random_bits=5)
    a = quantize_dequantize(x, "mxfp6_e2m3", **kw)
    b = quantize_dequantize(x, "mxfp6_e2m3", stochastic_variant="floor", **kw)
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_bad_variants_name_the_argument_and_the_choices():
    x = jnp.ones((32,), jnp.float32)
    with pytest.raises(ValueError, match=r"stochastic_variant must be one of 'floor', 'nearest_even', 'nearest_odd'"):
        quantize_dequantize(x, "mxfp4", rounding="stochastic", key=KEY, stochastic_variant="nearest")
    with pytest.raises(ValueError, match="stochastic_variant is only used with rounding='stochastic'"):
        BlockArray.from_array(x, "mxfp4", stochastic_variant="nearest_even")
