"""Nearest-even rounding by thresholds (`fpemu._scaled.table`), against `fpemu.quantize`, for every
registry format it applies to; the bits of whole recipes are checked against the reference in
test_match_reference.py and test_variants.py."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu._scaled import core as _core
from fpemu._scaled import table as _table
from fpemu.scaled import get_block_format

TABLE_FORMATS = [fmt.name for fmt in fpemu.formats() if _table.applies(fmt)]


def _around(values):
    """Each value and midpoint, and the float32 patterns just below and above them."""
    points = np.array([0.0, *values, *((a + b) / 2 for a, b in zip((0.0, *values[:-1]), values, strict=True))])
    points = points.astype(np.float32)
    near = [np.nextafter(points, np.float32(-1)), points, np.nextafter(points, np.float32(np.inf))]
    extra = np.array([2.0**-149, 2.0**-126, 1e30, np.finfo(np.float32).max, np.inf], np.float32)
    return np.abs(np.concatenate([*near, extra]))


def test_e2m1_uses_tables_and_wider_formats_do_not():
    assert "e2m1fn" in TABLE_FORMATS
    assert not _table.applies(fpemu.get_format("e3m2fn"))  # 31 positive values
    assert not _table.applies(fpemu.get_format("e4m3fn"))  # NaN
    assert _core._by_table(get_block_format("nvfp4"), None, "nearest_even")  # NVFP4 takes this path
    assert not _core._by_table(get_block_format("nvfp4"), None, "stochastic")


@pytest.mark.long
def test_a_mantissa_less_element_rounds_ties_as_fpemu_quantize():
    """E2M0 (values 1, 2, 4): `fpemu.quantize` sends the ties 0.5 and 3 away from zero (its default
    ``exponent_ties``), which thresholds ending on the even code would not: no table for it, and an
    NVFP4-like block format with it gives what `BlockArray.from_array` then `dequantize` give."""
    e2m0 = fpemu.Format(name="e2m0_no_specials", exponent_bits=2, mantissa_bits=0, bias=1, specials="none")
    assert not _table.applies(e2m0)
    ties = np.array([0.5, 3.0, -3.0, 1.5], np.float32)
    assert np.asarray(fpemu.quantize(ties, e2m0)).tolist() == [1.0, 4.0, -4.0, 2.0]
    block_format = dataclasses.replace(get_block_format("nvfp4"), name="nvfp4_e2m0", element=e2m0)
    x = jnp.asarray(np.tile(np.array([4.0, 0.5, 3.0, -3.0], np.float32), 4))  # one block of 16, amax 4
    fused = scaled.quantize_dequantize(x, block_format)
    stored = scaled.BlockArray.from_array(x, block_format).dequantize()
    np.testing.assert_array_equal(np.asarray(fused).view(np.uint32), np.asarray(stored).view(np.uint32))


@pytest.mark.parametrize("name", TABLE_FORMATS)
@pytest.mark.parametrize("saturate", [True, False])
def test_round_to_table_is_nearest_even(name, saturate):
    fmt = fpemu.get_format(name)
    values = _table.positive_values(fmt)
    y = _around(values)
    table = [jnp.uint32(b) for b in np.array(values, np.float32).view(np.uint32)]
    got = jax.jit(lambda m: _table.round_to_table(m, table, fmt))(jnp.asarray(y.view(np.uint32)))
    expected = np.asarray(fpemu.quantize(jnp.asarray(y), fmt, rounding="nearest_even", saturate=saturate))
    np.testing.assert_array_equal(np.asarray(got), expected.view(np.uint32))
