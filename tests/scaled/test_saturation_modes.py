"""IEEE P3109's saturation modes in the scaled recipes (issue 15): `BlockFormat.saturate` and the
``saturate=`` override take what `fpemu.quantize` takes (False, True, "sat_finite",
"sat_propagate", "ovf_inf") and pass it to the element rounding.

Where the modes differ: an element beyond the element format's max after an amax-derived scale
(the "ocp" rule scales amax into [2**emax, 2**(emax + 1)), above max for E4M3 and E2M1), the
directed and to_odd modes there, and ±inf elements, which only a given ``scale`` lets through
(under current scaling a group holding ±inf gets the NaN scale whatever the mode). Everything is
checked bit for bit against the independent oracle `fpemu.testing.scaled_reference`.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu.scaled import BlockArray, BlockFormat, get_block_format, quantize_dequantize
from fpemu.testing import scaled_reference as reference

MODES = [False, True, "sat_finite", "sat_propagate", "ovf_inf"]


def _cases(pairs, fast):
    """(recipe, rounding, saturate) for every pair and mode; in CI every mode for the first pair (the
    fused nearest-even fast path for power-of-two scales) and the ``fast`` modes of the others."""
    return [
        pytest.param(r, m, s, marks=() if i == 0 or s in fast.get(r, ()) else pytest.mark.slow, id=f"{r}-{m}-{s}")
        for i, (r, m) in enumerate(pairs)
        for s in MODES
    ]


def _blocks() -> np.ndarray:
    """Four blocks of 32: amax significands 1.9 and 1.99 (above E4M3's 1.75 and E2M1's 1.5 after an
    ocp scale), one with ±inf (NaN scale under current scaling), one ordinary."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (4, 32)).astype(np.float32)
    x[0, 3], x[1, 7] = 1.9, -1.99 * 2**5
    x[2, 0], x[2, 1] = np.inf, -np.inf
    return x


def _recipe(name: str, saturate) -> BlockFormat:
    return dataclasses.replace(get_block_format(name), name=f"{name}-{saturate}", saturate=saturate)


@pytest.mark.parametrize(
    ("recipe", "rounding", "saturate"),
    _cases(
        [
            ("mxfp8_e4m3", "nearest_even"),
            ("mxfp4", "to_odd"),
            ("mxfp8_e5m2", "toward_positive"),
            ("nvfp4", "stochastic"),
        ],
        {"mxfp4": (False, "ovf_inf"), "mxfp8_e5m2": ("sat_propagate",), "nvfp4": ("sat_finite",)},
    ),
)
def test_current_scaling_against_the_reference(recipe, rounding, saturate):
    x = _blocks()
    r = _recipe(recipe, saturate)
    kw = dict(rounding=rounding)
    ref_kw = dict(kw)
    if rounding == "stochastic":
        bits = np.random.default_rng(6).integers(0, 256, x.shape)
        kw.update(random=bits, random_bits=8)
        ref_kw.update(random=bits, random_bits=8)
    expected = reference.quantize(x, r, **ref_kw)
    reference.assert_equal(BlockArray.from_array(x, r, **kw), expected, f"{recipe} {saturate}")
    reference.assert_equal(quantize_dequantize(x, r, **kw), expected.dequantized, "fused")


@pytest.mark.parametrize(
    ("recipe", "rounding", "saturate"),
    _cases(
        [("mxfp8_e5m2", "nearest_even"), ("mxfp8_e4m3", "to_odd"), ("fp8_e5m2", "toward_zero")],
        {"mxfp8_e4m3": (False, "ovf_inf"), "fp8_e5m2": ("sat_propagate",)},
    ),
)
def test_a_given_scale_lets_infinities_and_overflow_through(recipe, rounding, saturate):
    """With given scales the elements are rounded one by one: ±inf and values beyond max * scale meet
    the saturation mode (E5M2 has infinities: "sat_propagate" keeps them, True clamps them)."""
    x = np.array([[1.0, np.inf, -np.inf, 7e4, -1e5, 3.0, 0.5, -0.0] * 4], np.float32)
    r = _recipe(recipe, saturate)
    scale = np.float32(2.0) if recipe.startswith("fp8") else np.array([[2.0]], np.float32)
    expected = reference.quantize(x, r, rounding=rounding, scale=scale)
    reference.assert_equal(BlockArray.from_array(x, r, rounding=rounding, scale=scale), expected, str(saturate))
    reference.assert_equal(quantize_dequantize(x, r, rounding=rounding, scale=scale), expected.dequantized, "fused")


def test_the_modes_differ_where_p3109_says():
    """Given scale 1, E5M2 elements (max 57344): inf and 1e5 in each mode, nearest even and to_odd."""
    x = jnp.array([[np.inf, 1e5] + [0.0] * 30], jnp.float32)

    def first_two(saturate, rounding="nearest_even"):
        y = quantize_dequantize(x, "mxfp8_e5m2", scale=1.0, saturate=saturate, rounding=rounding)
        return np.asarray(y)[0, :2].tolist()

    assert first_two(True) == first_two("sat_finite") == [57344.0, 57344.0]
    assert first_two("sat_propagate") == [np.inf, 57344.0]
    assert first_two(False) == first_two("ovf_inf") == [np.inf, np.inf]
    assert first_two(False, "to_odd") == [np.inf, 57344.0]  # to_odd never overflows...
    assert first_two("ovf_inf", "to_odd") == [np.inf, np.inf]  # ...except under OvfInf


def test_current_scaling_gives_an_infinite_group_the_nan_scale_in_every_mode():
    x = jnp.array([[np.inf] + [1.0] * 31], jnp.float32)
    for saturate in MODES:
        y = quantize_dequantize(x, "mxfp8_e5m2", saturate=saturate)
        assert np.isnan(np.asarray(y)).all(), saturate


def test_a_recipe_holds_the_mode():
    r = BlockFormat(name="p3109", element="e5m2", block_size=32, scale_format="e8m0fnu", scale_rule="ceil",
               saturate="sat_propagate")  # fmt: skip
    assert r.saturate == "sat_propagate"
    assert dataclasses.replace(r, saturate="ovf_inf").saturate == "ovf_inf"
    with pytest.raises(ValueError, match=r"block format 'p3109': saturate must be a bool .* 'sat_finite'"):
        BlockFormat(name="p3109", element="e5m2", saturate="satfinite")
    with pytest.raises(ValueError, match="saturate must be a bool"):
        quantize_dequantize(jnp.ones((32,)), "mxfp4", saturate=0)
