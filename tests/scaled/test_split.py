"""`quantize_dequantize_split`: the per-tensor float32 scale kept apart, against the NumPy reference.

For every recipe: ``tensor_scale`` is there exactly when the recipe has a float per-tensor scale (a
two-level recipe's global scale, or a per-tensor float32 scale), ``blocks`` are the reference's
element values times their block scales (NVFP4) or the element values (per tensor), bit for bit,
and ``fl(blocks * tensor_scale)`` is `quantize_dequantize`, bit for bit; otherwise ``blocks`` is it.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu.scaled import block_formats, get_block_format, quantize_dequantize, quantize_dequantize_split
from fpemu.testing import assert_bit_exact
from fpemu.testing import scaled_reference as reference

F32 = np.float32
SHAPE = (6, 48)  # blocks of 16 and 32, the last block of 32 short


def _data(kind: str) -> np.ndarray:
    rng = np.random.default_rng(["normal", "wide", "specials", "tiny"].index(kind))
    x = rng.standard_normal(SHAPE) * 2.0 ** rng.integers(-6, 6, (SHAPE[0], 1))
    if kind == "wide":  # each run of 16 a different magnitude, subnormal-range ones included
        x = x * 2.0 ** rng.integers(-140, 100, (SHAPE[0], SHAPE[1] // 16)).repeat(16, axis=1)
    if kind == "specials":
        x[1, 3], x[2, 40], x[3, :16] = np.nan, -np.inf, 0.0
    if kind == "tiny":  # the whole tensor near float32's subnormals: products with the tensor scale are subnormal
        x = x * 2.0**-128
    return x.astype(F32)


def _axes(name: str) -> list:
    return [-1] if get_block_format(name).block_size else [None, -1]


CASES = [
    (name, axis, kind) for name in block_formats() for axis in _axes(name) for kind in ("normal", "wide", "specials")
]


def expected_split(x: np.ndarray, name: str, axis, random=None, random_bits=32):
    """(blocks, tensor scale or None) from `fpemu.testing.scaled_reference`."""
    kw = {"rounding": "stochastic", "random": random, "random_bits": random_bits} if random is not None else {}
    return reference.split(reference.quantize(x, name, axis=axis, pad=True, **kw), name, axis)


@pytest.mark.parametrize(("name", "axis", "kind"), CASES)
def test_blocks_and_tensor_scale_match_the_reference(name, axis, kind):
    x = _data(kind)
    blocks, t = quantize_dequantize_split(x, name, axis=axis, pad=True)
    want_blocks, want_t = expected_split(x, name, axis)
    assert (t is None) == (want_t is None)
    assert blocks.dtype == jnp.float32 and blocks.shape == x.shape
    assert_bit_exact(blocks, want_blocks)
    qdq = np.asarray(quantize_dequantize(x, name, axis=axis, pad=True))
    if t is None:
        assert_bit_exact(blocks, qdq)
        return
    assert t.shape == (1,) * x.ndim and t.dtype == jnp.float32
    assert_bit_exact(t, want_t)
    with np.errstate(invalid="ignore", over="ignore"):
        assert_bit_exact((np.asarray(blocks) * np.asarray(t)).astype(F32), qdq)  # IEEE float32 product


@pytest.mark.parametrize("kind", ["normal", "wide", "specials", "tiny"])
@pytest.mark.parametrize("name", ["nvfp4", "fp8_e4m3"])
def test_stochastic_rounding_with_explicit_bits_matches_the_reference(name, kind):
    x = _data(kind)
    bits = np.random.default_rng(9).integers(0, 1 << 8, SHAPE, dtype=np.uint32)
    axis = -1 if get_block_format(name).block_size else None
    options = dict(axis=axis, pad=True, rounding="stochastic", random=bits, random_bits=8)
    blocks, t = quantize_dequantize_split(x, name, **options)
    want_blocks, want_t = expected_split(x, name, axis, random=bits, random_bits=8)
    assert_bit_exact(blocks, want_blocks)
    assert_bit_exact(t, want_t)
    want = reference.quantize(x, name, axis=axis, pad=True, rounding="stochastic", random=bits, random_bits=8)
    assert_bit_exact(quantize_dequantize(x, name, **options), want.dequantized)


def test_nan_spreads_as_in_quantize_dequantize():
    x = _data("specials")
    blocks, t = quantize_dequantize_split(x, "nvfp4", pad=True)
    assert np.isnan(np.asarray(blocks)[1, :16]).all() and np.isfinite(float(t[0, 0]))  # a block holding NaN
    assert not np.isnan(np.asarray(blocks)[3]).any()  # its neighbours keep their values
    blocks, t = quantize_dequantize_split(x, "fp8_e4m3")  # per tensor: everything NaN, the scale too
    assert np.isnan(np.asarray(blocks)).all() and np.isnan(float(t[0, 0]))


def test_the_gradient_is_straight_through_the_product():
    x = jnp.asarray(_data("normal"))

    def total(v):
        blocks, t = quantize_dequantize_split(v, "nvfp4", pad=True)
        return jnp.sum(blocks * t)

    assert_bit_exact(jax.grad(total)(x), np.ones(SHAPE, F32))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="axis must be an int"):
        quantize_dequantize_split(_data("normal"), "nvfp4", axis=None)
    with pytest.raises(TypeError, match="x must be"):
        quantize_dequantize_split([1.0, 2.0], "nvfp4")


def test_takes_exactly_quantize_dequantizes_arguments():
    """One definition of the arguments: the split's signature is `quantize_dequantize`'s, every keyword
    reaches the computation (here ``tile_axis`` and ``block_size``), and an unknown one is named."""
    params = lambda f: list(inspect.signature(f).parameters.values())
    assert params(quantize_dequantize_split) == params(quantize_dequantize)
    x = _data("normal")
    options = dict(axis=1, tile_axis=0, block_size=16, pad=True)
    blocks, t = quantize_dequantize_split(x, "mxfp8", **options)
    assert t is None
    assert_bit_exact(blocks, quantize_dequantize(x, "mxfp8", **options))
    with pytest.raises(TypeError, match="tile_axs"):
        quantize_dequantize_split(x, "mxfp8", tile_axs=0)
