"""The assertions of fpemu.testing catch what they promise (a planted 1-ulp error, a sign-of-zero
difference, NaN against a number), pass on equal inputs, and say why in their messages;
ulp_distance agrees with counting codes and assert_representable with the exact oracle."""

from __future__ import annotations

import bisect
import math
import re
from fractions import Fraction

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fpemu
from fpemu.testing import (
    TOLERANCES,
    Tolerance,
    arrays,
    assert_bit_exact,
    assert_close,
    assert_representable,
    formats,
    reference,
    tolerances,
    ulp_distance,
    values,
)

SMALL = [f for f in fpemu.formats() if f.bits <= 16]
BYTE = [f for f in fpemu.formats() if f.bits <= 8]
ids = lambda f: f.name


def _fails(fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# -- assert_bit_exact -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [np.float32([0.0, -0.0, 1.5, np.inf, -np.inf, np.nan]), np.array([1.0, -0.0, np.nan], ml_dtypes.bfloat16),
     np.array([448, -0.0, 0.001953125], ml_dtypes.float8_e4m3fn), np.float16([65504, -0.0]), np.uint8([0, 255]),
     np.float64(2.5), np.zeros((0, 3), np.float32), jnp.array([1.0, -0.0], jnp.bfloat16)],
)  # fmt: skip
def test_bit_exact_passes_on_equal_inputs(x):
    assert_bit_exact(x, np.array(x, copy=True))


def test_bit_exact_catches_a_planted_one_ulp_error():
    expected = np.float32(np.linspace(-3, 3, 25))
    actual = expected.copy()
    actual[7] = np.nextafter(actual[7], np.float32(np.inf))
    message = _fails(assert_bit_exact, actual, expected)
    assert "1 of 25 elements differ" in message
    row = message.splitlines()[-1].split()
    assert row[0] == "7"  # the index
    assert row[3:5] == [hex(actual.view(np.uint32)[7]), hex(expected.view(np.uint32)[7])]
    assert row[-1] == "1"  # one ulp of float32


def test_bit_exact_catches_a_one_ulp_error_in_a_format():
    """The same planted error, described in e4m3fn: codes and ulps of the format."""
    expected = np.float32([1.0, 2.0, 448.0])
    actual = np.float32([1.0, 2.25, 448.0])
    message = _fails(assert_bit_exact, actual, expected, fmt="e4m3fn")
    assert re.search(r"^  1 +2\.25 +2\.0 +0x40100000 +0x40000000 +0x41 / 0x40 +1$", message, re.M), message


def test_bit_exact_catches_the_sign_of_zero():
    message = _fails(assert_bit_exact, np.float32([0.0]), np.float32([-0.0]))
    assert "0x00000000" in message and "0x80000000" in message
    _fails(assert_bit_exact, jnp.array([-0.0], jnp.bfloat16), jnp.array([0.0], jnp.bfloat16))


def test_bit_exact_nan_against_a_number_and_payloads():
    _fails(assert_bit_exact, np.float32([np.nan]), np.float32([1.0]))
    _fails(assert_bit_exact, np.float32([0.0]), np.float32([np.nan]))
    quiet, payload = np.uint32([0x7FC00000, 0xFFC00001]).view(np.float32)
    assert_bit_exact(np.float32([quiet]), np.float32([payload]))  # any NaN equals any NaN
    message = _fails(assert_bit_exact, np.float32([quiet]), np.float32([payload]), nan_payload=True)
    assert "0x7fc00000" in message and "0xffc00001" in message


def test_bit_exact_checks_dtype_and_shape():
    assert "dtype mismatch: actual float32, expected float64" in _fails(assert_bit_exact, np.float32(1), np.float64(1))
    assert "shape mismatch: actual (2,), expected (1, 2)" in _fails(
        assert_bit_exact, np.zeros(2, np.float32), np.zeros((1, 2), np.float32)
    )
    assert_bit_exact(np.float32([1.0, -0.0]), np.float64([1.0, -0.0]), check_dtype=False)  # exact values
    _fails(assert_bit_exact, np.float32([0.1]), np.float64([0.1]), check_dtype=False)
    _fails(assert_bit_exact, np.float32([0.0]), np.float64([-0.0]), check_dtype=False)


def test_bit_exact_lists_the_first_mismatches_and_counts_the_rest():
    message = _fails(assert_bit_exact, np.arange(30, dtype=np.float32), np.zeros(30, np.float32), show=4, err_msg="v2")
    lines = message.splitlines()
    assert lines[0] == "v2"
    assert "29 of 30 elements differ" in lines[1]
    assert [line.split()[0] for line in lines[4:8]] == ["1", "2", "3", "4"]
    assert lines[-1].strip() == "... and 25 more"
    message = _fails(assert_bit_exact, np.eye(3, dtype=np.float32), np.zeros((3, 3), np.float32))
    assert "(1, 1)" in message  # N-d indices


def test_bit_exact_integer_codes_with_a_format():
    message = _fails(assert_bit_exact, np.uint8([0x38, 0x7F]), np.uint8([0x39, 0x7F]), fmt="e4m3fn")
    assert re.search(r"^  0 +0x38 +0x39 +1\.0 / 1\.125 +1$", message, re.M), message


@given(fmt=st.sampled_from(SMALL), data=st.data())
def test_bit_exact_property(fmt, data):
    """Equal arrays pass; changing one element's bits fails, naming that index."""
    a = data.draw(arrays(fmt, (12,), specials=False), label="a")
    assert_bit_exact(a, a.copy())
    i = data.draw(st.integers(0, 11), label="i")
    b = a.copy()
    b.view(np.uint32)[i] ^= 1 << data.draw(st.integers(0, 31), label="bit")
    if np.isnan(a[i]) and np.isnan(b[i]):
        return
    message = _fails(assert_bit_exact, b, a)
    assert "1 of 12" in message and re.search(rf"^  {i} ", message, re.M)


# -- ulp_distance -----------------------------------------------------------------------------------


def _ordered_finite_values(fmt) -> list[Fraction]:
    """Every finite value of the format, once (the two zeros are one), in increasing order: from
    the oracle's code-by-code decoding, sharing nothing with ulp_distance."""
    found = set()
    for code in range(fmt.num_codes):
        v = reference.decode_scalar(code, fmt)
        if math.isfinite(v):
            found.add(Fraction(v))
    return sorted(found)


@pytest.mark.parametrize("fmt", BYTE, ids=ids)
def test_ulp_distance_counts_codes(fmt):
    """For every pair of finite codes: the distance is the difference of their ranks."""
    ordered = _ordered_finite_values(fmt)
    rank = {v: i for i, v in enumerate(ordered)}
    finite = [c for c in range(fmt.num_codes) if math.isfinite(reference.decode_scalar(c, fmt))]
    vals = np.array([reference.decode_scalar(c, fmt) for c in finite])
    ranks = np.array([rank[Fraction(v)] for v in vals])
    got = ulp_distance(vals[:, None], vals[None, :], fmt)
    np.testing.assert_array_equal(got, np.abs(ranks[:, None] - ranks[None, :]).astype(np.float64))


# Custom formats with at most 2**13 codes: the count below lists every value.
SMALL_CUSTOM = formats(exponent_bits=(2, 6), mantissa_bits=(0, 6))


@given(fmt=SMALL_CUSTOM, data=st.data())
def test_ulp_distance_counts_values_between_on_custom_formats(fmt, data):
    a = data.draw(values(fmt, specials=False), label="a")
    b = data.draw(values(fmt, specials=False), label="b")
    magnitudes = reference.values(fmt)
    signed = sorted(set(magnitudes) | ({-m for m in magnitudes} if fmt.signed else set()))
    lo, hi = sorted((Fraction(a), Fraction(b)))
    between = bisect.bisect_left(signed, hi) - bisect.bisect_left(signed, lo)
    assert ulp_distance(a, b, fmt) == between


@given(fmt=formats(), data=st.data())
def test_ulp_distance_of_a_rounded_value_is_at_most_half(fmt, data):
    """Between two neighbours the position is linear: rounding to nearest moves <= 0.5 ulp."""
    x = data.draw(st.floats(-fmt.max, fmt.max), label="x")
    if not fmt.signed:
        x = abs(x)
    assume(fmt.has_zero or x >= fmt.min_normal)  # below E8M0's smallest value everything rounds up to it
    y = reference.round_scalar(x, fmt)
    if not math.isnan(y):
        assert ulp_distance(x, y, fmt) <= 0.5


def test_ulp_distance_special_values_and_fractions():
    nan, inf = math.nan, math.inf
    got = ulp_distance(
        [nan, nan, inf, inf, -inf, 0.0, 1.0, 1.0625], [nan, 1.0, inf, -inf, 448.0, -0.0, 1.0, 1.0], "e4m3fn"
    )
    assert got.tolist() == [0.0, inf, 0.0, inf, inf, 0.0, 0.0, 0.5]
    assert ulp_distance(448.0, 480.0, "e4m3fn") == 1.0  # past max the grid continues
    assert ulp_distance(2.0**-127, 2.0**-126, "e8m0fnu") == 1.0
    assert ulp_distance(0.5, 2.0, "e8m0fnu") == 2.0
    assert isinstance(ulp_distance(1.0, 2.0, "bf16"), np.floating)
    assert ulp_distance(1.0, np.nextafter(np.float32(1), np.float32(2)), "fp32") == 1.0
    assert ulp_distance(np.float32(-1e-45), np.float32(1e-45), "fp32") == 2.0  # across zero, subnormals
    with pytest.raises(TypeError, match="a must be a float, integer or bool array"):
        ulp_distance(np.array(["x"]), 1.0, "bf16")


# -- assert_representable ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_patterns() -> np.ndarray:
    """Every bfloat16 bit pattern, as float32: zeros, subnormals, every binade, infinities, NaNs."""
    return (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("fmt", SMALL, ids=ids)
def test_representable_agrees_with_the_oracle(fmt, bf16_patterns):
    """x is representable iff the exact oracle rounds it to itself, bit for bit (NaN: iff the
    format has a NaN code); checked on all 65536 bf16 patterns and every flush option."""
    from fpemu.testing._bits import widen
    from fpemu.testing._grid import representable

    x = bf16_patterns
    for subnormals in (True, False):
        rounded = reference.round_array(x, fmt, subnormals=subnormals).astype(np.float32)
        keeps = np.where(np.isnan(x), fmt.has_nan, rounded.view(np.uint32) == x.view(np.uint32))
        got = representable(widen(x), fmt, subnormals=subnormals)
        np.testing.assert_array_equal(got, keeps, err_msg=f"{fmt.name} subnormals={subnormals}")


@given(fmt=formats(), data=st.data())
def test_representable_custom_formats(fmt, data):
    from fpemu.testing._grid import representable

    x = data.draw(st.one_of(values(fmt), st.floats()), label="x")
    expected = fmt.has_nan if math.isnan(x) else (
        lambda y: y == x and math.copysign(1, y) == math.copysign(1, x)
    )(reference.round_scalar(x, fmt))  # fmt: skip
    assert bool(representable(np.float64(x), fmt)) == expected


def test_assert_representable_messages():
    assert_representable(np.float32([0.0, -448.0, 2.0**-9, np.nan]), "e4m3fn")
    assert_representable(jnp.array([6.0, -0.0], jnp.float32), "e2m1fn")
    message = _fails(assert_representable, np.float32([1.0, 1.0625, 500.0, np.inf]), "e4m3fn")
    assert "3 of 4 elements are not values of e4m3fn" in message
    assert "between 1.0 and 1.125" in message and "beyond max 448.0" in message and "no infinity" in message
    assert "no NaN code" in _fails(assert_representable, np.float32([np.nan]), "e2m1fn")
    assert "no negative zero" in _fails(assert_representable, np.float32([-0.0]), "e4m3fnuz")
    assert "unsigned" in _fails(assert_representable, np.float32([-1.0]), "e8m0fnu")
    assert "has no zero" in _fails(assert_representable, np.float32([0.0]), "e8m0fnu")
    assert "subnormal" in _fails(assert_representable, np.float32([2.0**-9]), "e4m3fn", subnormals=False)
    assert "below the smallest value" in _fails(assert_representable, np.float32([2.0**-11]), "e4m3fn")
    with pytest.raises(TypeError, match="bool"):
        assert_representable(np.array([True]), "e4m3fn")


# -- assert_close and tolerances ---------------------------------------------------------------------


def test_close_default_is_one_ulp_of_the_format():
    assert_close(np.float32([1.0, 448.0]), np.float32([1.125, 416.0]), fmt="e4m3fn")
    message = _fails(assert_close, np.float32([1.0, 448.0]), np.float32([1.25, 448.0]), fmt="e4m3fn")
    assert "Not close (ulps=1 in e4m3fn): 1 of 2" in message
    assert re.search(r"^  0 +1\.0 +1\.25 .* 0\.25 +0\.2 +0x38 / 0x3a +2$", message, re.M), message
    # Without fmt: one ulp of expected's own dtype.
    one = np.float32(1)
    assert_close(np.float32([np.nextafter(one, np.float32(2))]), np.float32([one]))
    _fails(assert_close, np.float32([np.nextafter(np.nextafter(one, np.float32(2)), np.float32(2))]), np.float32([one]))


def test_close_special_values():
    nan, inf = np.nan, np.inf
    assert_close(np.float32([nan, inf, -inf, 0.0]), np.float32([nan, inf, -inf, -0.0]))  # -0 == +0 here
    _fails(assert_close, np.float32([nan]), np.float32([1.0]), ulps=100)
    _fails(assert_close, np.float32([1.0]), np.float32([nan]), rtol=1.0)
    _fails(assert_close, np.float32([inf]), np.float32([3e38]), rtol=1.0)
    _fails(assert_close, np.float32([nan]), np.float32([nan]), equal_nan=False)


def test_close_rtol_atol_like():
    assert_close(np.float32([1.0, 0.0]), np.float32([1.01, 1e-9]), rtol=0.02, atol=1e-8)
    _fails(assert_close, np.float32([1.0]), np.float32([1.01]), rtol=0.005)
    assert_close(np.float32([0.0]), np.float32([1e-6]), atol=1e-5)
    # torch's float32 default: rtol 1.3e-6, atol 1e-5.
    assert_close(np.float32([1.0]), np.float32([1.0 + 1e-5]), like="torch")
    _fails(assert_close, np.float32([1.0]), np.float32([1.0 + 2e-5]), like="torch")
    # bfloat16 with torch's rtol 1.6e-2: one bf16 ulp at 1.0 (2**-7 = 0.0078) passes, 3 do not.
    assert_close(jnp.array([1.0], jnp.bfloat16), jnp.array([1.0078125], jnp.bfloat16), like="torch")
    _fails(assert_close, jnp.array([1.0], jnp.bfloat16), jnp.array([1.0234375], jnp.bfloat16), like="torch")
    # Either criterion passes an element: ulps OR rtol/atol.
    assert_close(np.float32([0.0, 1.0]), np.float32([1e-30, 1.125]), fmt="e4m3fn", ulps=1, atol=1e-20)


def test_close_argument_errors():
    x = np.float32([1.0])
    with pytest.raises(ValueError, match="like= or rtol=/atol=, not both"):
        assert_close(x, x, like="torch", rtol=1e-3)
    with pytest.raises(ValueError, match="ulps must be a non-negative number"):
        assert_close(x, x, ulps=-1)
    with pytest.raises(ValueError, match="ulps needs a format"):
        assert_close(np.int32([1]), np.int32([1]), ulps=1)
    with pytest.raises(ValueError, match="like must be one of 'torch', 'numpy', 'numpy.allclose', 'jax'"):
        assert_close(x, x, like="tensorflow")
    assert "dtype mismatch" in _fails(assert_close, x, np.float64([1.0]))
    assert_close(x, np.float64([1.0]), check_dtype=False)


def test_tolerances_are_the_documented_defaults():
    assert tolerances("torch", "float64") == Tolerance(1e-7, 1e-7)
    assert tolerances("torch", np.float32) == Tolerance(1.3e-6, 1e-5)
    assert tolerances("torch", "float16") == Tolerance(1e-3, 1e-5)
    assert tolerances("torch", jnp.bfloat16) == Tolerance(1.6e-2, 1e-5)
    assert set(tolerances("numpy").values()) == {Tolerance(1e-7, 0.0)}
    assert set(tolerances("numpy.allclose").values()) == {Tolerance(1e-5, 1e-8)}
    assert tolerances("jax", "float32") == Tolerance(1e-6, 1e-6)
    assert tolerances("jax", "float64") == Tolerance(1e-15, 1e-15)
    assert tolerances("jax", "bfloat16") == Tolerance(1e-2, 1e-2)
    assert tolerances("jax", ml_dtypes.float8_e4m3fn) == Tolerance(1e-1, 1e-1)
    assert list(TOLERANCES) == ["torch", "numpy", "numpy.allclose", "jax"]
    with pytest.raises(TypeError):
        TOLERANCES["torch"]["float32"] = Tolerance(0, 0)  # read-only
    # torch's table has no float8 (nor integer) entry: `_DTYPE_PRECISIONS.get(dtype, (0.0, 0.0))`, exact.
    assert tolerances("torch", ml_dtypes.float8_e4m3fn) == Tolerance(0.0, 0.0)
    assert tolerances("torch", "int32") == Tolerance(0.0, 0.0)
    # NumPy's defaults do not depend on the dtype.
    assert tolerances("numpy", ml_dtypes.float8_e5m2) == Tolerance(1e-7, 0.0)
    assert tolerances("numpy.allclose", "float6_e2m3fn") == Tolerance(1e-5, 1e-8)
    assert tolerances("jax", "int8") == Tolerance(0.0, 0.0)
    with pytest.raises(ValueError, match="jax has no default tolerance for float6_e2m3fn; it has: float64"):
        tolerances("jax", ml_dtypes.float6_e2m3fn)  # not in JAX's table (KeyError there)


def test_tolerances_of_two_dtypes_are_the_loosest():
    """torch and JAX take the largest rtol and the largest atol of the two dtypes."""
    assert tolerances("torch", "float32", "float64") == Tolerance(1.3e-6, 1e-5)
    assert tolerances("torch", "float64", "bfloat16") == Tolerance(1.6e-2, 1e-5)
    assert tolerances("torch", ml_dtypes.float8_e4m3fn, "float32") == Tolerance(1.3e-6, 1e-5)
    assert tolerances("jax", "float64", ml_dtypes.float8_e4m3fn) == Tolerance(1e-1, 1e-1)
    assert tolerances("numpy", "float64", "float16") == Tolerance(1e-7, 0.0)
    with pytest.raises(TypeError, match="dtype must be a dtype"):
        tolerances("torch", "float32", object())


def test_like_uses_the_loosest_of_actual_and_expected():
    """A float32 result against a float64 reference: torch's float32 tolerance (rtol 1.3e-6, atol
    1e-5), not float64's (1e-7, 1e-7), as torch.testing.assert_close(..., check_dtype=False) does."""
    actual, expected = np.float32([1.0000015]), np.float64([1.0])  # 1.55e-6 apart (13 float32 ulps)
    assert_close(actual, expected, like="torch", check_dtype=False)
    assert_close(expected, actual, like="torch", check_dtype=False)  # the same either way round
    _fails(assert_close, actual.astype(np.float64), expected, like="torch")  # both float64: too far
    assert_close(actual, expected, like="jax", check_dtype=False)  # JAX: float32's 1e-6 + 1e-6
    _fails(assert_close, actual, expected, like="numpy", check_dtype=False)  # NumPy: 1e-7 whatever the dtypes
    # torch compares float8 exactly: one ulp apart fails, equal passes; against float32, float32's tolerance.
    one, next_up = (
        np.float32([1.0]).astype(ml_dtypes.float8_e4m3fn),
        np.float32([1.125]).astype(ml_dtypes.float8_e4m3fn),
    )
    assert_close(one, one, like="torch")
    _fails(assert_close, one, next_up, like="torch")
    assert_close(one, np.float32([1.000005]), like="torch", check_dtype=False)


def test_jax_tolerances_match_the_installed_jax():
    """Our copy of JAX's table agrees with the installed JAX's own (private) table."""
    public_test_util = pytest.importorskip("jax._src.public_test_util")
    for name, tol in tolerances("jax").items():
        assert public_test_util.default_tolerance()[np.dtype(name)] == tol.rtol == tol.atol, name


@settings(max_examples=30)
@given(data=st.data())
def test_close_agrees_with_numpy_isclose(data):
    """With rtol/atol only, assert_close accepts exactly what numpy.isclose accepts (finite values)."""
    a = data.draw(arrays("bf16", (8,), specials=False), label="a")
    b = data.draw(arrays("bf16", (8,), specials=False), label="b")
    rtol = data.draw(st.sampled_from([0.0, 1e-3, 0.1]), label="rtol")
    atol = data.draw(st.sampled_from([0.0, 1e-6, 1.0]), label="atol")
    expected_ok = bool(np.isclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol).all())
    try:
        assert_close(a, b, rtol=rtol, atol=atol)
        ok = True
    except AssertionError:
        ok = False
    assert ok == expected_ok
