"""fpemu._scaled.layout: `group_max` is each group's maximum; `Work`: which per-group values the
quantizers materialize (`fpemu._ops.fusion`).

Each materialization costs XLA compile time (bench/RESULTS_training.md, "fewer materializations"), so
only the long chains are materialized: a power-of-two block format's exponent where it needs the whole
amax (not under the OCP rule: a few operations from the largest exponent field), NVFP4's block scale
``d`` (and, not split, its table), never a per-tensor value, and nothing below `MATERIALIZE_MIN_SIZE`.
The bits do not depend on it: tests/scaled's other tests compare these paths with the references.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu._ops.fusion as fusion
from fpemu import Quantizer, scaled
from fpemu._scaled import core as _core
from fpemu._scaled import layout as _layout

LARGE = (256, 256)  # MATERIALIZE_MIN_SIZE elements
assert LARGE[0] * LARGE[1] == fusion.MATERIALIZE_MIN_SIZE
CEIL_BLOCKS = Quantizer(
    format="e4m3fn", scaling="block", block_size=128, scale_rule="ceil"
).block_format  # fp8_blockwise's


@pytest.fixture
def materialized(monkeypatch):
    """The number of arrays each `materialize` call of `fpemu.scaled` gets, in call order. JAX's caches are
    cleared before and after, so that every call is traced here (and no trace made here is kept)."""
    calls: list[int] = []

    def counting(arrays, probe=None):
        calls.append(len(arrays))
        return fusion.materialize(arrays, probe=probe)

    monkeypatch.setattr(_layout, "materialize", counting)
    monkeypatch.setattr(_core, "materialize", counting)
    jax.clear_caches()
    yield calls
    jax.clear_caches()


def _trace(f, shape=LARGE):
    jax.make_jaxpr(f)(jnp.ones(shape, jnp.float32))


@pytest.mark.parametrize("axis", [0, -1])
def test_a_power_of_two_block_format_materializes_its_exponent_only(materialized, axis):
    _trace(lambda x: scaled.quantize_dequantize(x, CEIL_BLOCKS, axis=axis))
    assert materialized == [1]  # k; the grid's limits and the NaN mask are recomputed per element


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "mxint8"])
@pytest.mark.parametrize("axis", [0, -1])
def test_an_ocp_block_format_materializes_nothing(materialized, name, axis):
    _trace(lambda x: scaled.quantize_dequantize(x, name, axis=axis))
    assert materialized == []  # k is a few operations from the blocks' largest exponent field


@pytest.mark.parametrize("axis", [0, -1])
def test_nvfp4_materializes_its_block_scale_and_not_split_its_table(materialized, axis):
    _trace(lambda x: scaled.quantize_dequantize_split(x, "nvfp4", axis=axis))
    _trace(
        lambda x: scaled.quantize_dequantize_split(x, "nvfp4", axis=axis, rounding="stochastic", key=jax.random.key(0))
    )
    assert materialized == [1, 1]  # d, each time; its encode scale and NaN mask are recomputed per element
    materialized.clear()
    _trace(lambda x: scaled.quantize_dequantize(x, "nvfp4", axis=axis))
    assert materialized == [1, 2, 1]  # d, then (NaN mask, encode scale) and the table of products


def test_per_tensor_values_and_small_arrays_are_not_materialized(materialized):
    per_tensor = Quantizer(format="e4m3fn", scaling="tensor").block_format
    _trace(lambda x: scaled.quantize_dequantize(x, per_tensor, axis=None))
    _trace(lambda x: scaled.quantize_dequantize_split(x, per_tensor, axis=None))
    assert materialized == []
    _trace(lambda x: scaled.quantize_dequantize(x, CEIL_BLOCKS, axis=-1), shape=(LARGE[0] - 1, LARGE[1]))
    _trace(lambda x: scaled.quantize_dequantize(x, CEIL_BLOCKS, axis=-1), shape=LARGE)
    assert materialized == [1]  # only at MATERIALIZE_MIN_SIZE elements and above


def _blocked_max(u: np.ndarray, axis: int, block: int) -> np.ndarray:
    """NumPy: the maximum of each block of ``block`` elements along ``axis`` (a shorter last block)."""
    starts = range(0, u.shape[axis], block)
    return np.stack(
        [np.take(u, range(i, min(i + block, u.shape[axis])), axis=axis).max(axis=axis) for i in starts], axis
    )


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((300, 5), _layout.Layout(0, 128)),  # blocks longer than a run, along a leading axis, a partial last one
        ((3, 260, 4), _layout.Layout(1, 128)),
        ((6, 70), _layout.Layout(1, 32)),
        ((70, 6), _layout.Layout(0, 16)),
        ((300, 260), _layout.Layout(0, 128, tile_axis=1)),  # 128 x 128 tiles
        ((70, 300), _layout.Layout(1, None)),  # whole rows
        ((70, 300), _layout.Layout(0, None)),  # whole columns
        ((70, 300), _layout.Layout(None, None)),  # the whole tensor
    ],
    ids=str,
)
def test_group_max_is_the_maximum_of_each_group(shape, layout):
    rng = np.random.default_rng(sum(shape))
    u = rng.integers(0, 0x7FC00001, size=shape, dtype=np.uint32)  # magnitudes, NaN's included
    expected = u
    for one in layout.along():
        if one.axis is None:
            expected = expected.max(keepdims=True)
        elif one.block is None:
            expected = expected.max(axis=one.axis, keepdims=True)
        else:
            expected = _blocked_max(expected, one.axis, one.block)
    got = np.asarray(_layout.group_max(jnp.asarray(u), layout))
    assert got.shape == _layout.group_shape(shape, layout) == expected.shape
    np.testing.assert_array_equal(got, expected)
