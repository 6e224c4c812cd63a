"""Explicit random bits in the scaled recipes (issue 15): ``random=`` instead of ``key=`` in
`BlockArray.from_array` and `quantize_dequantize`.

The scaled path rounds its elements with `fpemu.quantize` in ``x``'s own shape, so ``key=key`` draws
``fpemu.stochastic_bits(key, x.shape, random_bits)`` whatever the recipe, axis or block layout
(docs/scaling.md); ``random=`` with those bits must give the same bits. Arbitrary bits are checked
against the independent NumPy oracle `fpemu.testing.scaled_reference`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.scaled import BlockArray, quantize_dequantize
from fpemu.testing import scaled_reference as reference

KEY = jax.random.key(29)


def _x(shape=(4, 64), seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape[:-1] + (1,))
    return x.astype(np.float32)


def _leaves(sa: BlockArray) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in (sa.values, sa.scale, sa.global_scale) if leaf is not None]


def _assert_same_array(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"uint{8 * a.dtype.itemsize}"), b.view(f"uint{8 * b.dtype.itemsize}"))


@pytest.mark.long
@pytest.mark.parametrize(
    ("recipe", "axis", "k"),
    [("mxfp4", -1, 32), ("nvfp4", -1, 3), ("fp8_e4m3", 0, 8), ("mxint8", 0, 5)],
    ids=["mxfp4", "nvfp4", "fp8-per-column", "mxint8-axis0"],
)
def test_the_keys_bits_give_the_keyed_result(recipe, axis, k):
    x = jnp.asarray(_x((64, 32) if axis == 0 else (4, 64)))
    kw = dict(axis=axis, rounding="stochastic", random_bits=k)
    bits = fpemu.stochastic_bits(KEY, x.shape, random_bits=k)
    keyed, explicit = (
        BlockArray.from_array(x, recipe, key=KEY, **kw),
        BlockArray.from_array(x, recipe, random=bits, **kw),
    )
    for a, b in zip(_leaves(explicit), _leaves(keyed), strict=True):
        _assert_same_array(a, b)
    _assert_same_array(quantize_dequantize(x, recipe, random=bits, **kw), quantize_dequantize(x, recipe, key=KEY, **kw))


@pytest.mark.long
@pytest.mark.parametrize(
    ("recipe", "variant"), [("mxfp6_e2m3", "floor"), ("nvfp4", "nearest_even"), ("fp8_e5m2", "nearest_odd")]
)
def test_arbitrary_bits_against_the_reference(recipe, variant):
    x = _x()
    bits = np.random.default_rng(3).integers(0, 16, (1, 64), dtype=np.int64)  # broadcast over the rows
    kw = dict(rounding="stochastic", random_bits=4, stochastic_variant=variant)
    expected = reference.quantize(x, recipe, random=np.broadcast_to(bits, x.shape), **kw)
    reference.assert_equal(BlockArray.from_array(x, recipe, random=bits, **kw), expected, recipe)
    reference.assert_equal(quantize_dequantize(x, recipe, random=bits, **kw), expected.dequantized, "fused")


def test_with_a_given_scale_and_a_short_last_block():
    x = _x((3, 40))
    bits = np.random.default_rng(4).integers(0, 2**32, x.shape, dtype=np.uint64)
    scale = np.array([[2.0**-3, 2.0**-1]], np.float32)
    kw = dict(rounding="stochastic", pad=True, scale=scale)
    expected = reference.quantize(x, "mxfp8_e5m2", random=bits, **kw)
    reference.assert_equal(BlockArray.from_array(x, "mxfp8_e5m2", random=bits, **kw), expected)


def test_all_zero_and_all_one_bits_round_down_and_up():
    """1.1875 in a block of amax 1.5 scales to 4.75, 3/8 of a step above 4 on the E2M1 grid."""
    x = jnp.full((1, 32), 1.1875, jnp.float32).at[0, 0].set(1.5)
    for word, expected in ((0, 1.0), (2**32 - 1, 1.5)):
        y = quantize_dequantize(x, "mxfp4", rounding="stochastic", random=np.uint32(word))
        assert np.asarray(y)[0, 1:].tolist() == [expected] * 31


@pytest.mark.long
def test_traced_bits_and_the_gradient():
    x = jnp.asarray(_x())
    bits = fpemu.stochastic_bits(KEY, x.shape, random_bits=6)
    kw = dict(rounding="stochastic", random_bits=6)
    jitted = jax.jit(lambda x, r: quantize_dequantize(x, "mxfp8_e4m3", random=r, **kw))(x, bits)
    _assert_same_array(jitted, quantize_dequantize(x, "mxfp8_e4m3", key=KEY, **kw))
    g = jax.grad(lambda v: quantize_dequantize(v, "mxfp8_e4m3", random=bits, **kw).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), np.ones(x.shape, np.float32))


def test_delayed_scaling_takes_the_bits():
    ds = scaled.DelayedScaling(block_format="mxfp6_e3m2", axis=-1, history_length=2)
    x = jnp.asarray(_x())
    state = ds.init(x)
    _, state = ds.quantize_dequantize(x, state)  # a scale from the history
    kw = dict(rounding="stochastic", random_bits=7)
    bits = fpemu.stochastic_bits(KEY, x.shape, random_bits=7)
    (y_key, s_key), (y_bits, s_bits) = (
        ds.quantize_dequantize(x, state, key=KEY, **kw),
        ds.quantize_dequantize(x, state, random=bits, **kw),
    )
    _assert_same_array(y_bits, y_key)
    _assert_same_array(s_bits.scale, s_key.scale)
    sa_key, _ = ds.quantize(x, state, key=KEY, **kw)
    sa_bits, _ = ds.quantize(x, state, random=bits, **kw)
    for a, b in zip(_leaves(sa_bits), _leaves(sa_key), strict=True):
        _assert_same_array(a, b)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(key=KEY, random=0), ValueError, "not both"),
        (dict(), ValueError, "needs key"),
        (dict(random=np.zeros((5,), np.uint32)), ValueError, r"random of shape \(5,\) does not broadcast .* \(2, 32\)"),
        (dict(random=np.full((2, 32), 1 << 8), random_bits=8), ValueError, r"\[0, 2\*\*8\)"),
        (dict(random=np.zeros((2, 32), np.float32)), TypeError, "random must be an integer array"),
    ],
)
def test_bad_random(kwargs, error, match):
    x = jnp.ones((2, 32), jnp.float32)
    for fn in (BlockArray.from_array, quantize_dequantize):
        with pytest.raises(error, match=match):
            fn(x, "mxfp4", rounding="stochastic", **kwargs)
    with pytest.raises(ValueError, match="random is only used with rounding='stochastic'"):
        quantize_dequantize(x, "mxfp4", random=0)
