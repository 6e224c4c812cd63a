"""Properties that hold for every input: the error bound of a scaled element, power-of-two
invariance, and sign symmetry."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fpemu import scaled
from fpemu.scaled import get_block_format
from tests.scaled.test_match_reference import VARIANTS, arrays, share

POW2 = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8", *VARIANTS[:2], VARIANTS[5]]


def _ulp(v: np.ndarray, fmt) -> np.ndarray:
    """The element format's spacing at |v| (its quantum in v's binade, at least the subnormal one)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.abs(v)))
    e = np.nan_to_num(e, nan=fmt.emin, neginf=fmt.emin, posinf=fmt.emin)
    return np.ldexp(1.0, (np.maximum(e, fmt.emin) - fmt.mantissa_bits).astype(int))


@pytest.mark.parametrize("recipe", POW2, ids=str)
@share(4)
@given(x=arrays())
def test_error_within_half_an_element_ulp_times_the_scale(recipe, x):
    """Power-of-two scales, nearest even: |dequantize(quantize(x)) - x| <= ulp_elem(x / s) * s / 2
    for every finite element that does not saturate (|x / s| <= max_elem)."""
    r = get_block_format(recipe)
    axis = -1 if r.block_size or recipe is VARIANTS[5] else None
    sa = scaled.BlockArray.from_array(jnp.asarray(x), r, axis=axis)
    s = np.broadcast_to(np.repeat(np.asarray(sa.scale_values(), np.float64), r.block_size or 1, axis=-1), x.shape)
    with np.errstate(all="ignore"):  # NaN (signalling ones too) and inf elements are masked out
        x64 = x.astype(np.float64)
        y = np.asarray(sa.dequantize(), np.float64)
        v = x64 / s
        ok = np.isfinite(v) & (np.abs(v) <= r.element.max) & np.isfinite(y)
        bound = _ulp(v, r.element) * s / 2
    assert np.all(np.abs(y - x64)[ok] <= bound[ok])


@pytest.mark.parametrize("recipe", ["fp8_e4m3", "fp8_e5m2", "nvfp4"])
@share(4)
@given(x=arrays())
def test_float_scale_error_bound(recipe, x):
    """Float scales round x * enc to float32 first: the bound gains a float32 rounding of x."""
    r = get_block_format(recipe)
    sa = scaled.BlockArray.from_array(jnp.asarray(x), r)
    s = np.asarray(sa.scale_values(), np.float64)
    if r.block_size:
        s = np.repeat(s, r.block_size, axis=-1) * float(np.asarray(sa.global_scale).ravel()[0])
    s = np.broadcast_to(s, x.shape)
    with np.errstate(all="ignore"):  # NaN (signalling ones too) and inf elements are masked out
        x64 = x.astype(np.float64)
        y = np.asarray(sa.dequantize(), np.float64)
        v = x64 / s
        ok = np.isfinite(v) & (np.abs(v) <= r.element.max * (1 - 2.0**-20)) & np.isfinite(y) & (s > 2.0**-100)
        bound = _ulp(v, r.element) * s / 2 * (1 + 2.0**-20) + np.abs(x64) * 2.0**-21 + 2.0**-140
    assert np.all(np.abs(y - x64)[ok] <= bound[ok])


@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "mxfp4", "mxint8", "nvfp4", "fp8_e4m3", VARIANTS[2]], ids=str)
@given(seed=st.integers(0, 2**32 - 1), j=st.integers(-40, 40), heavy=st.booleans())
def test_power_of_two_scaling_commutes_with_quantization(recipe, seed, j, heavy):
    """quantize(x * 2**j): the same element codes, scales multiplied by 2**j (E8M0 codes + j)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_t(2, (4, 64)) if heavy else rng.standard_normal((4, 64))) * 2.0 ** rng.integers(-40, 40, (4, 1))
    x = x.astype(np.float32)
    assume(np.all(np.abs(x[x != 0]) > 2.0**-80))
    xj = (x.astype(np.float64) * 2.0**j).astype(np.float32)  # exact
    a = scaled.BlockArray.from_array(jnp.asarray(x), recipe)
    b = scaled.BlockArray.from_array(jnp.asarray(xj), recipe)
    np.testing.assert_array_equal(np.asarray(a.values), np.asarray(b.values))
    r = a.block_format
    if r.scale_kind == "pow2":
        np.testing.assert_array_equal(np.asarray(b.scale).astype(int), np.asarray(a.scale).astype(int) + j)
    elif r.scale_kind == "narrow":
        np.testing.assert_array_equal(np.asarray(b.scale), np.asarray(a.scale))
        np.testing.assert_array_equal(np.asarray(b.global_scale), np.asarray(a.global_scale) * np.float32(2.0**j))
    else:
        np.testing.assert_array_equal(np.asarray(b.scale), np.asarray(a.scale) * np.float32(2.0**j))
    expected = (np.asarray(a.dequantize()).astype(np.float64) * 2.0**j).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(b.dequantize()), expected)


@pytest.mark.parametrize("recipe", ["mxfp8_e5m2", "mxfp6_e2m3", "mxint8", "nvfp4", "fp8_e5m2"])
@share(6)
@given(x=arrays())
def test_sign_symmetry(recipe, x):
    """Nearest-even rounding and amax-based scales are symmetric: qdq(-x) == -qdq(x) (zeros of
    either sign compare equal, as two's complement MXINT8 has no -0)."""
    y = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), recipe))
    y_neg = np.asarray(scaled.quantize_dequantize(jnp.asarray(-x), recipe))
    np.testing.assert_array_equal(y_neg, -y)


def test_scale_exponent_rules_by_hand():
    """The four power-of-two rules on amax = 5 (e2m1: M = 6 = 1.5 * 2**2, emax 2, 2 significant bits)."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 5.0
    codes = {}
    for rule in ("ocp", "ceil", "even", "ceil_log2"):
        codes[rule] = int(scaled.BlockArray.from_array(jnp.asarray(x), "mxfp4", scale_rule=rule).scale[0, 0]) - 127
    # ocp: floor(log2 5) - 2 = 0; ceil: ceil(log2(5/6)) = 0; even: 5 rounds to 2 bits -> 6 (ties away
    # at 5), floor(log2 6) - 2 = 0; ceil_log2: ceil(log2 5) - 2 = 1
    assert codes == {"ocp": 0, "ceil": 0, "even": 0, "ceil_log2": 1}
    x[0, 0] = 7.0  # 7 > 6: ceil gives 1; 7 rounds to 8 -> even gives 1
    codes = {
        rule: int(scaled.BlockArray.from_array(jnp.asarray(x), "mxfp4", scale_rule=rule).scale[0, 0]) - 127
        for rule in codes
    }
    assert codes == {"ocp": 0, "ceil": 1, "even": 1, "ceil_log2": 1}
    assert math.isclose(6 * 2.0 ** codes["ceil"], 12.0)
