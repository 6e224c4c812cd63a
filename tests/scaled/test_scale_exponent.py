"""`pow2_exponent_of_field`: a power-of-two scale from a group's largest exponent field gives the bits
`pow2_exponent` gives from the group's amax, wherever `exponent_field_applies` (the OCP rule, E8M0 scales, a
margin that clamps every subnormal amax); checked over every exponent field, with several significands
each, for every block format of the registry and margins from -64 to 64."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled
from fpemu._scaled.block_format import get_block_format
from fpemu._scaled.scale import exponent_field_applies, pow2_exponent, pow2_exponent_of_field

_SIGNIFICANDS = (0, 1, 0x3FFFFF, 0x400000, 0x7FFFFF)
# every exponent field (0: zero and subnormal amaxes, 255: inf and NaN) with low, middle and high significands
AMAX = np.array([(e << 23) | s for e in range(256) for s in _SIGNIFICANDS], np.uint32)
MARGINS = (-64, -8, -1, 0, 1, 8, 64)


def _both(block_format):
    amax = jnp.asarray(AMAX)
    want = pow2_exponent(amax, block_format)
    got = pow2_exponent_of_field(amax >> np.uint32(23), block_format)
    return [np.asarray(x) for x in (*want, *got)]


APPLYING = [
    (name, margin)
    for name in scaled.block_formats()
    for margin in MARGINS
    if exponent_field_applies(dataclasses.replace(get_block_format(name), margin=margin))
]


@pytest.mark.parametrize(("name", "margin"), APPLYING)
def test_the_largest_exponent_field_gives_the_amaxs_scale_where_it_applies(name, margin):
    k, nonfinite, k_field, nonfinite_field = _both(dataclasses.replace(get_block_format(name), margin=margin))
    np.testing.assert_array_equal(k_field, k)
    np.testing.assert_array_equal(nonfinite_field, nonfinite)


def test_the_registrys_mx_formats_apply_and_the_others_do_not():
    applies = {name for name in scaled.block_formats() if exponent_field_applies(get_block_format(name))}
    assert applies == {name for name in scaled.block_formats() if get_block_format(name).scale_rule == "ocp"}
    assert {"mxfp8_e4m3", "mxfp4"} <= applies and "nvfp4" not in applies and "fp8_e4m3" not in applies
    assert len(APPLYING) >= 6 * 5  # every MX format, for the margins up to 1 at least


def test_a_margin_that_leaves_subnormal_amaxes_apart_needs_the_whole_amax():
    # margin 64 moves k up by 64: a subnormal amax's own binade (below 2**-127) is then no longer clamped to
    # E8M0's smallest exponent, so the exponent field (0 for all of them) cannot stand for it
    block_format = dataclasses.replace(get_block_format("mxfp8_e4m3"), margin=64)
    assert not exponent_field_applies(block_format)
    k, _, k_field, _ = _both(block_format)
    assert (k != k_field).any()
