"""fpemu._scaled.layout's `Work`: which per-group values the quantizers materialize (`fpemu._ops.fusion`).

Each materialization costs XLA compile time (bench/RESULTS_training.md, "fewer materializations"), so
only the long chains are materialized: a power-of-two block format's exponent, NVFP4's block scale
``d`` (and, not split, its table), never a per-tensor value, and nothing below `MATERIALIZE_MIN_SIZE`.
The bits do not depend on it: tests/scaled's other tests compare these paths with the references.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import fpemu._ops.fusion as fusion
from fpemu import Quantizer, scaled
from fpemu._scaled import core as _core
from fpemu._scaled import layout as _layout

LARGE = (256, 256)  # MATERIALIZE_MIN_SIZE elements
assert LARGE[0] * LARGE[1] == fusion.MATERIALIZE_MIN_SIZE


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


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "mxint8"])
@pytest.mark.parametrize("axis", [0, -1])
def test_a_power_of_two_block_format_materializes_its_exponent_only(materialized, name, axis):
    _trace(lambda x: scaled.quantize_dequantize(x, name, axis=axis))
    assert materialized == [1]  # k; the grid's limits and the NaN mask are recomputed per element


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
    _trace(lambda x: scaled.quantize_dequantize(x, "mxfp8_e4m3", axis=-1), shape=(LARGE[0] - 1, LARGE[1]))
    _trace(lambda x: scaled.quantize_dequantize(x, "mxfp8_e4m3", axis=-1), shape=LARGE)
    assert materialized == [1]  # only at MATERIALIZE_MIN_SIZE elements and above
