"""``tile_axis``: square 2-D groups in place, against the NumPy reference on the tiles cut out.

A tile of ``block_size x block_size`` elements of the matrix formed by ``tile_axis`` and ``axis``
shares one scale. The expectation cuts ``x`` into its tiles, one row of ``block_size**2`` elements
each (zero-padded where a last tile is shorter), has `fpemu.testing.scaled_reference` quantize those rows
as blocks of ``block_size**2``, and puts the elements back: every recipe with blocks, both
orientations, nearest even and stochastic rounding (the random bits follow the elements), normal,
wide and special data.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu.scaled import block_formats, get_block_format, quantize_dequantize, quantize_dequantize_split
from fpemu.testing import assert_bit_exact
from fpemu.testing import scaled_reference as reference

F32 = np.float32
SHAPE = (40, 72)  # partial tiles in both dimensions for blocks of 16 and 32
BLOCK_RECIPES = [name for name in block_formats() if get_block_format(name).block_size is not None]


def _data(kind: str) -> np.ndarray:
    rng = np.random.default_rng(["normal", "wide", "specials"].index(kind))
    x = rng.standard_normal(SHAPE) * 2.0 ** rng.integers(-6, 6, (SHAPE[0], 1))
    if kind == "wide":  # each 8 x 8 patch a different magnitude, subnormal-range ones included
        x = x * np.kron(2.0 ** rng.integers(-140, 100, (SHAPE[0] // 8, SHAPE[1] // 8)), np.ones((8, 8)))
    if kind == "specials":
        x[1, 3], x[20, 40], x[33:40, :16] = np.nan, -np.inf, 0.0
    return x.astype(F32)


def _tiles(m: np.ndarray, b: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(the (tile row, tile column, b*b) array, zero-padded; the index of every element of ``m`` in it)."""
    rows, cols = np.indices(m.shape)
    where = (rows // b, cols // b, (rows % b) * b + cols % b)
    out = np.zeros((-(-m.shape[0] // b), -(-m.shape[1] // b), b * b), m.dtype)
    out[where] = m
    return out, where


def _expected(x: np.ndarray, name: str, axis: int, **kw) -> reference.Result:
    """The reference on ``x``'s tiles (rows of ``tile_axis``, columns of ``axis``), back in ``x``'s layout."""
    recipe = get_block_format(name)
    b = recipe.block_size
    m = x if axis == 1 else x.T
    t, where = _tiles(m, b)
    if "random" in kw:
        kw = {**kw, "random": _tiles(kw["random"] if axis == 1 else kw["random"].T, b)[0]}
    r = reference.quantize(t, dataclasses.replace(recipe, block_size=b * b), axis=2, pad=True, **kw)
    back = r.dequantized[where]
    return back if axis == 1 else back.T, r


@pytest.mark.parametrize("kind", ["normal", "wide", "specials"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("name", BLOCK_RECIPES)
def test_tiles_match_the_reference(name, axis, kind):
    x = _data(kind)
    want, _ = _expected(x, name, axis)
    got = quantize_dequantize(x, name, axis=axis, tile_axis=1 - axis, pad=True)
    assert_bit_exact(got, want)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp8", "mxfp4"])
def test_stochastic_tiles_match_the_reference(name):
    x = _data("normal")
    bits = np.random.default_rng(3).integers(0, 1 << 8, SHAPE, dtype=np.uint32)
    options = dict(rounding="stochastic", random_bits=8)
    want, _ = _expected(x, name, 1, random=bits, **options)
    assert_bit_exact(quantize_dequantize(x, name, axis=1, tile_axis=0, pad=True, random=bits, **options), want)


def test_split_with_tiles():
    """NVFP4's split: blocks are the elements times their tile's E4M3 scale, the tensor scale apart."""
    x = _data("wide")
    blocks, t = quantize_dequantize_split(x, "nvfp4", axis=1, tile_axis=0, pad=True)
    _, r = _expected(x, "nvfp4", 1)
    assert t is not None and float(t.reshape(())) == float(np.asarray(r.global_scale, F32).reshape(()))
    product = (np.asarray(blocks) * np.asarray(t)).astype(F32)
    with np.errstate(invalid="ignore"):
        assert_bit_exact(product, np.asarray(quantize_dequantize(x, "nvfp4", axis=1, tile_axis=0, pad=True)))


def test_one_scale_per_tile():
    """By hand, MXFP8 in 32 x 32 tiles of a 32 x 64 matrix of ones. The left tile holds 8, so its E8M0
    scale is 2**(3 - 8) = 2**-5, and 0.00035 in its last row becomes 0.0112, an E4M3 subnormal (steps
    of 2**-9): 6 * 2**-9 * 2**5. Per 1 x 32 row block, that row's scale would be 2**-8 (its amax is 1)
    and 0.00035 a normal 0.0896 (steps of 2**-7): 11 * 2**-7 * 2**-8. The right tile holds 300: its
    scale is 1, and 300 rounds to E4M3's 288."""
    x = np.ones((32, 64), F32)
    x[0, 0], x[31, 20], x[5, 40] = 8.0, 0.00035, 300.0
    y = np.asarray(quantize_dequantize(x, "mxfp8", axis=1, tile_axis=0))
    assert y[0, 0] == 8.0 and y[31, 20] == 6 * 2.0**-14 and y[5, 40] == 288.0
    assert (y[x == 1.0] == 1.0).all()
    assert np.asarray(quantize_dequantize(x, "mxfp8", axis=1))[31, 20] == 11 * 2.0**-15


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(axis=1, tile_axis=1), "other than axis"),
        (dict(axis=1, tile_axis=2), r"tile_axis=2 is out of range for x of shape \(32, 32\) \(valid: -2..1\)"),
        (dict(axis=1, tile_axis=-1), "tile_axis=-1 must be an axis of x other than axis=1"),
        (dict(axis=1, tile_axis=0.5), "tile_axis"),
    ],
)
def test_bad_tile_axis(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        quantize_dequantize(jnp.ones((32, 32)), "mxfp8", **kwargs)


def test_tile_axis_needs_block_recipes_and_whole_tiles():
    with pytest.raises(ValueError, match="blocks along an axis"):
        quantize_dequantize(jnp.ones((32, 32)), "fp8_e4m3", axis=None, tile_axis=0)
    with pytest.raises(ValueError, match="pad=True"):
        quantize_dequantize(jnp.ones((40, 32)), "mxfp8", axis=1, tile_axis=0)
