"""Nearest-even rounding by thresholds (`fpemu.scaled._table`), against `fpemu.quantize`, for every
registry format it applies to; the bits of whole recipes are checked against the reference in
test_match_reference.py and test_variants.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.scaled import _core, _table, get_block_format

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
