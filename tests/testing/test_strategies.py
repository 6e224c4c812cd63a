"""The hypothesis strategies of fpemu.testing draw what they promise, and shrink to simple examples.

Representability is checked against the exact oracle (`reference`) and, for formats that fit
float32, against `fpemu.quantize`, comparing bits.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import fpemu
from fpemu._core.format import fits
from fpemu.testing import arrays, boundaries, codes, formats, from_dtype, reference, values
from fpemu.testing._strategies import LAYOUTS

FP32 = fpemu.get_format("fp32")
BUILTINS = list(fpemu.formats())
FITS_FP32 = [f for f in BUILTINS if fits(f, FP32)]
SMALL = [f for f in BUILTINS if f.bits <= 16]
ids = lambda f: f.name
# Many draws, deterministically: for the coverage counts.
MANY = settings(max_examples=400, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
# `find` searches and shrinks the same way on every run, whatever profile is loaded: no test depends on luck.
SEARCH = settings(max_examples=2000, derandomize=True, database=None)


def _same_value(got: float, want: float) -> bool:
    """Equal as values, NaN equal to NaN, and -0 distinct from +0."""
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def _oracle_keeps(value: float, fmt) -> bool:
    """Whether the exact oracle rounds ``value`` to itself (for NaN: whether the format has NaN)."""
    if math.isnan(value):
        return fmt.has_nan
    return _same_value(reference.round_scalar(value, fmt), value)


# -- values and codes -------------------------------------------------------------------------------


@given(data=st.data())
def test_values_are_representable_builtin(data):
    fmt = data.draw(st.sampled_from(BUILTINS), label="fmt")
    v = data.draw(values(fmt), label="v")
    assert isinstance(v, float)
    assert _oracle_keeps(v, fmt), f"{v!r} is not a value of {fmt.name}"


@given(fmt=formats(), data=st.data())
def test_values_are_representable_custom(fmt, data):
    v = data.draw(values(fmt), label="v")
    assert _oracle_keeps(v, fmt), f"{v!r} is not a value of {fmt}"


@pytest.mark.long
@pytest.mark.parametrize("fmt", FITS_FP32, ids=ids)
@settings(max_examples=15)
@given(data=st.data())
def test_quantize_is_the_identity_on_drawn_arrays(fmt, data):
    """Bits of quantize(a) equal bits of a (NaN is the canonical float32 NaN on both sides)."""
    a = data.draw(arrays(fmt, (32,)), label="a")
    q = np.asarray(fpemu.quantize(jnp.asarray(a), fmt))
    np.testing.assert_array_equal(q.view(np.uint32), a.view(np.uint32))


@pytest.mark.parametrize("fmt", SMALL, ids=ids)
@settings(max_examples=30)
@given(data=st.data())
def test_codes_decode_to_values_that_encode_back(fmt, data):
    code = data.draw(codes(fmt), label="code")
    assert 0 <= code < fmt.num_codes
    value = reference.decode_scalar(code, fmt)
    if math.isnan(value):
        assert fmt.has_nan
    else:
        assert reference.encode_scalar(value, fmt) == code


@given(fmt=formats(), data=st.data(), specials=st.booleans(), subnormals=st.booleans(), negative=st.booleans())
def test_codes_options(fmt, data, specials, subnormals, negative):
    code = data.draw(codes(fmt, specials=specials, subnormals=subnormals, negative=negative), label="code")
    value = reference.decode_scalar(code, fmt)
    assert 0 <= code < fmt.num_codes
    if not specials:
        assert math.isfinite(value)
    if not subnormals and fmt.has_zero:
        assert not 0 < abs(value) < fmt.min_normal
    if not negative or not fmt.signed:
        assert not code & fmt.sign_mask or math.isnan(value)
    if fmt.specials == "fnuz" and code == fmt.sign_mask:
        assert specials  # 0x80 is NaN: only drawn as a special


@pytest.mark.long
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "bf16", "e4m3fnuz", "e2m1fn", "e8m0fnu", "p3109_k8p3se",
                                 "p3109_k8p3ue", "int8_ocp"])  # fmt: skip
def test_values_cover_every_kind(fmt):
    """Over many draws: zero, subnormals, normals, negatives, and each special the format has."""
    fmt = fpemu.get_format(fmt)
    seen = set()

    @MANY
    @given(values(fmt))
    def collect(v):
        if math.isnan(v):
            seen.add("nan")
        elif math.isinf(v):
            seen.add("inf")
        elif v == 0:
            seen.add("-0" if math.copysign(1, v) < 0 else "+0")
        else:
            seen.add("subnormal" if abs(v) < fmt.min_normal else "normal")
            if v < 0:
                seen.add("negative")

    collect()
    expected = {"normal"}
    expected |= {"nan"} if fmt.has_nan else set()
    expected |= {"inf"} if fmt.has_inf else set()
    expected |= {"+0"} if fmt.has_zero else set()
    expected |= {"-0"} if fmt.has_negative_zero else set()
    expected |= {"subnormal"} if fmt.has_subnormals else set()
    expected |= {"negative"} if fmt.signed else set()
    assert seen == expected  # every kind the format has, and nothing it does not have


def test_special_values_are_a_minority():
    """About one draw in eight is special: arrays of values are mostly numbers."""
    draws = []

    @MANY
    @given(values("e5m2"))
    def collect(v):
        draws.append(math.isfinite(v))

    collect()
    assert 0.03 < 1 - np.mean(draws) < 0.3


def test_nan_payloads_are_drawn_for_ieee_formats():
    payloads = set()

    @MANY
    @given(codes("bf16"))
    def collect(code):
        if (code & 0x7F80) == 0x7F80 and code & 0x7F:
            payloads.add(code & 0x7F)

    collect()
    assert 0x40 in payloads and len(payloads) > 1  # the canonical quiet NaN, and others


def test_values_options_exclude():
    fmt = fpemu.get_format("e4m3fn")

    @given(values(fmt, specials=False, subnormals=False, negative=False))
    def check(v):
        assert math.isfinite(v) and (v == 0 or v >= fmt.min_normal) and math.copysign(1, v) > 0

    check()


# -- boundaries -------------------------------------------------------------------------------------


def _neighbours(a: Fraction, fmt) -> tuple[Fraction, Fraction]:
    grid = reference.values(fmt)
    i = bisect.bisect_right(grid, a) - 1
    if i < 0:
        return Fraction(0), grid[0]
    top = grid[-1] - grid[-2]
    hi = grid[i + 1] if i + 1 < len(grid) else grid[-1] + top
    return grid[i], hi


def _classify(x: float, fmt, dtype=np.float32) -> set[str]:
    """What kind of boundary ``x`` is, decided with exact arithmetic."""
    if math.isnan(x):
        return {"nan"}
    if math.isinf(x):
        return {"inf"}
    if x == 0:
        return {"zero"}
    a = Fraction(abs(x))
    kinds = set()
    lo, hi = _neighbours(a, fmt)
    if a == lo:
        kinds.add("value")
    if a == (lo + hi) / 2:
        kinds.add("tie")
    ulp_up = Fraction(float(np.nextafter(dtype(abs(x)), dtype(np.inf)))) - a
    ulp_down = a - Fraction(float(np.nextafter(dtype(abs(x)), dtype(0))))
    if a + ulp_up == (lo + hi) / 2 or a - ulp_down == (lo + hi) / 2:
        kinds.add("tie±1")
    top_tie = Fraction(fmt.max) + (Fraction(fmt.max) - reference.values(fmt)[-2]) / 2
    for name, point in (("max", Fraction(fmt.max)), ("overflow", top_tie), ("min_normal", Fraction(fmt.min_normal)),
                        ("min_subnormal", Fraction(fmt.min_subnormal))):  # fmt: skip
        if a == point:
            kinds.add(name)
        elif a + ulp_up == point or a - ulp_down == point:
            kinds.add(name + "±1")
    if x < 0:
        kinds.add("negative")
    return kinds


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e2m1fn", "e3m2fn", "e4m3fnuz"])
def test_boundaries_hit_ties_and_thresholds(fmt):
    """Over many draws, every kind of boundary comes up, each checked exactly."""
    fmt = fpemu.get_format(fmt)
    seen: set[str] = set()

    @MANY
    @given(boundaries(fmt))
    def collect(x):
        assert float(np.float32(x)) == x or math.isnan(x)  # float32 holds it exactly
        seen.update(_classify(x, fmt))

    collect()
    wanted = {"nan", "inf", "zero", "value", "tie", "tie±1", "max", "max±1", "overflow", "overflow±1",
              "min_normal", "min_normal±1", "min_subnormal", "min_subnormal±1", "negative"}  # fmt: skip
    assert wanted <= seen, f"never drawn: {sorted(wanted - seen)}"


def test_boundaries_find_the_overflow_tie_of_e4m3fn():
    """464 is the tie above e4m3fn's max 448 (PITFALLS): find reaches it, and a point just above."""
    fast = settings(max_examples=3000, derandomize=True, database=None)
    assert find(boundaries("e4m3fn"), lambda x: x == 464.0, settings=fast) == 464.0
    above = float(np.nextafter(np.float32(464), np.float32(np.inf)))
    assert find(boundaries("e4m3fn"), lambda x: x == above, settings=fast) == above


@pytest.mark.long
def test_boundary_ties_are_where_rounding_to_nearest_switches():
    """At every drawn tie the oracle's nearest result switches: the float32 neighbours below and
    above round to different values, toward_zero gives the lower one and nearest_away the upper."""
    fmt = fpemu.get_format("e4m3fn")
    ties = []

    @MANY
    @given(boundaries(fmt, negative=False))
    def collect(x):
        if "tie" in _classify(x, fmt):
            ties.append(x)
            below = reference.round_scalar(float(np.nextafter(np.float32(x), np.float32(0))), fmt)
            above = reference.round_scalar(float(np.nextafter(np.float32(x), np.float32(np.inf))), fmt)
            assert not _same_value(below, above)
            assert _same_value(reference.round_scalar(x, fmt, rounding="toward_zero"), below)
            assert _same_value(reference.round_scalar(x, fmt, rounding="nearest_away"), above)

    collect()
    assert len(ties) > 20


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_boundaries_in_other_dtypes(dtype):
    np_dtype = np.dtype(dtype)

    @settings(max_examples=100, database=None)
    @given(boundaries("e4m3fn", dtype=dtype))
    def check(x):
        assert math.isnan(x) or float(np.asarray(x).astype(np_dtype)) == x

    check()


def test_boundaries_beyond_the_dtype_range_clamp_to_its_max():
    """fp16's overflow tie 65520 is beyond float16: in float16 inputs it becomes 65504, not inf."""
    from fpemu.testing._bits import in_dtype

    f16 = np.dtype("float16")
    assert in_dtype(65520.0, f16, 0) == 65504.0
    assert in_dtype(65520.0, f16, -1) == 65472.0
    assert in_dtype(65520.0, f16, 1) == 65504.0  # finite points stay finite
    assert in_dtype(65520.0, np.dtype("float32"), 1) == float(np.nextafter(np.float32(65520), np.float32(np.inf)))

    @settings(max_examples=200, database=None)
    @given(boundaries("fp16", dtype="float16"))
    def check(x):
        assert math.isnan(x) or float(np.float16(x)) == x

    check()


# -- arrays -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, dtype",
    [("e4m3fn", "float32"), ("e4m3fn", "bfloat16"), ("e4m3fn", ml_dtypes.float8_e4m3fn), ("e2m1fn", "float16"),
     ("bf16", jnp.bfloat16), ("e5m2", "float64")],
)  # fmt: skip
def test_arrays_dtype_shape_and_values(fmt, dtype):
    fmt = fpemu.get_format(fmt)

    @settings(max_examples=20)
    @given(arrays(fmt, (3, 4), dtype=dtype))
    def check(a):
        assert a.dtype == np.dtype(dtype) and a.shape == (3, 4)
        for v in a.astype(np.float64).ravel().tolist():
            assert _oracle_keeps(v, fmt)

    check()


def test_arrays_default_and_strategy_shapes():
    @settings(max_examples=30)
    @given(arrays("e2m1fn"), arrays("e2m1fn", st.sampled_from([(0,), (2, 0, 3)])))
    def check(a, empty):
        assert 1 <= a.ndim <= 2 and all(1 <= n <= 8 for n in a.shape)
        assert empty.size == 0

    check()


def test_arrays_with_boundary_elements():
    @settings(max_examples=20)
    @given(arrays("e4m3fn", 16, elements=boundaries("e4m3fn")))
    def check(a):
        assert a.dtype == np.float32 and a.shape == (16,)

    check()


def test_arrays_reject_a_dtype_too_narrow():
    with pytest.raises(ValueError, match="bfloat16 cannot hold every value of fp16"):
        arrays("fp16", dtype="bfloat16")
    with pytest.raises(ValueError, match="infinity/NaN of e4m3"):
        arrays("e4m3", dtype=ml_dtypes.float8_e4m3fn)  # fits, but e4m3's inf does not
    arrays("e4m3", dtype=ml_dtypes.float8_e4m3fn, specials=False)
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        arrays("e4m3fn", dtype="int32")
    with pytest.raises(TypeError, match="elements"):
        arrays("e4m3fn", elements=[1.0])


# -- formats ----------------------------------------------------------------------------------------


@given(fmt=formats())
def test_formats_are_within_the_documented_ranges(fmt):
    assert 0 <= fmt.exponent_bits <= 11 and 0 <= fmt.mantissa_bits <= 23
    ieee_bias = 2 ** (fmt.exponent_bits - 1) - 1 if fmt.exponent_bits else 0
    assert abs(fmt.bias - ieee_bias) <= 2 or fmt.exponent_bits == 11


@pytest.mark.parametrize("layout", LAYOUTS)
def test_formats_cover_every_layout(layout):
    found = find(formats(layouts=[layout]), lambda f: True, settings=SEARCH)
    expected = {
        "ieee": ("ieee", True, True), "fn": ("fn", True, True), "fnuz": ("fnuz", True, True),
        "none": ("none", True, True), "unsigned_ieee": ("ieee", False, True), "unsigned_fn": ("fn", False, True),
        "e8m0_like": ("fn", False, False), "p3109": ("p3109", True, True), "unsigned_p3109": ("p3109", False, True),
        "twos_complement": ("none", True, True),
    }[layout]  # fmt: skip
    assert (found.specials, found.signed, found.has_zero) == expected
    assert found.twos_complement == (layout == "twos_complement")
    if layout == "twos_complement":
        assert found.exponent_bits == 0 and found.min == -(found.max + found.min_subnormal)


def test_formats_fits_in_and_ranges():
    @settings(max_examples=40)
    @given(formats(exponent_bits=(3, 8), mantissa_bits=5, fits_in="bfloat16"))
    def check(fmt):
        assert 3 <= fmt.exponent_bits <= 8 and fmt.mantissa_bits in (5,)
        assert fits(fmt, fpemu.get_format("bf16"))

    with pytest.raises(ValueError, match="mantissa_bits must satisfy"):
        formats(mantissa_bits=(5, 2))
    with pytest.raises(TypeError, match="exponent_bits must be an int"):
        formats(exponent_bits="4")
    with pytest.raises(ValueError, match="unknown: \\['ocp'\\]"):
        formats(layouts=["ieee", "ocp"])


def test_formats_reach_eleven_exponent_bits():
    """Wide exponents need a raised bias for layouts without reserved exponents: still drawn."""
    fmt = find(formats(exponent_bits=11, layouts=["none"]), lambda f: True, settings=SEARCH)
    assert fmt.exponent_bits == 11 and fmt.emax <= 1023


# -- from_dtype -------------------------------------------------------------------------------------

ML_ONLY = [f for f in BUILTINS if f.dtype is not None and f.dtype.kind == "V"]


@pytest.mark.parametrize("fmt", ML_ONLY, ids=ids)
def test_from_dtype_ml_dtypes(fmt):
    seen_nan = []

    @settings(max_examples=60)
    @given(from_dtype(fmt.dtype))
    def check(x):
        assert isinstance(x, np.generic) and x.dtype == fmt.dtype
        seen_nan.append(math.isnan(float(x)))

    check()

    @settings(max_examples=60)
    @given(from_dtype(fmt.dtype, allow_nan=False, allow_infinity=False, allow_subnormal=False))
    def check_finite(x):
        v = float(x)
        assert math.isfinite(v) and (v == 0 or abs(v) >= fmt.min_normal)

    check_finite()


def test_from_dtype_one_kind_of_special():
    @settings(max_examples=80)
    @given(from_dtype(jnp.bfloat16, allow_nan=False), from_dtype("bfloat16", allow_infinity=False))
    def check(no_nan, no_inf):
        assert not math.isnan(float(no_nan)) and not math.isinf(float(no_inf))

    check()


def test_from_dtype_reaches_every_bfloat16_nan_payload_kind():
    x = find(from_dtype("bfloat16"), lambda v: math.isnan(float(v)) and np.asarray(v).view(np.uint16) & 0x3F != 0,
             settings=SEARCH)  # fmt: skip
    assert math.isnan(float(x))


def test_from_dtype_falls_back_to_hypothesis_for_numpy_dtypes():
    @settings(max_examples=20)
    @given(from_dtype(np.float32, allow_nan=False), from_dtype("int8"))
    def check(f, i):
        assert isinstance(f, np.float32) and not np.isnan(f)
        assert isinstance(i, np.int8)

    check()
    with pytest.raises(TypeError, match="accepts only allow_nan, allow_infinity, allow_subnormal"):
        from_dtype("float8_e4m3fn", min_value=0)


# -- shrinking and argument errors ------------------------------------------------------------------


def test_strategies_shrink_to_the_simplest_example():
    anything = lambda _: True
    assert find(codes("e4m3fn"), anything, settings=SEARCH) == 0
    v = find(values("e4m3fn"), anything, settings=SEARCH)
    assert v == 0.0 and math.copysign(1, v) == 1
    assert find(values("e8m0fnu"), anything, settings=SEARCH) == 2.0**-127  # no zero: the smallest value
    assert find(boundaries("e5m2"), anything, settings=SEARCH) == 0.0
    assert find(arrays("e4m3fn", 3), anything, settings=SEARCH).tolist() == [0.0, 0.0, 0.0]
    assert find(formats(), anything, settings=SEARCH).name == "e2m1_ieee_b1"
    assert find(values("e4m3fn"), lambda v: v < -1, settings=SEARCH) == -1.125  # the smallest magnitude past -1
    assert find(values("e4m3fn"), lambda v: v > 0, settings=SEARCH) == 2.0**-9  # the smallest subnormal
    assert find(values("e4m3fn", subnormals=False), lambda v: v > 0, settings=SEARCH) == 2.0**-6


def test_argument_errors_name_the_argument():
    with pytest.raises(fpemu.UnknownFormatError):
        values("e9m9")
    with pytest.raises(TypeError, match="fmt must be"):
        codes(3.5)
    with pytest.raises(TypeError, match="specials must be a bool"):
        values("e4m3fn", specials="yes")
    with pytest.raises(ValueError, match="dtype must be one of float16, bfloat16, float32, float64"):
        boundaries("e4m3fn", dtype="int32")


# -- value ranges -----------------------------------------------------------------------------------


def _all_values(fmt) -> list[float]:
    """Every finite value of a format (of at most 16 bits), from the oracle's grid: both signs, -0 where
    the format has it, a two's-complement format's extra negative value."""
    grid = [float(v) for v in reference.values(fmt)]
    out = list(grid)
    if fmt.signed:
        out += [-v for v in grid if v != 0] + ([-0.0] if fmt.has_negative_zero else [])
        if fmt.twos_complement:
            out.append(fmt.min)
    return out


def _key(v: float) -> tuple[float, float]:
    """Order values with -0 below +0, as the strategies' bounds compare them."""
    return (v, math.copysign(1.0, v))


def _in_range(v, min_value=None, max_value=None, min_magnitude=None, max_magnitude=None) -> bool:
    return (
        (min_value is None or _key(v) >= _key(min_value))
        and (max_value is None or _key(v) <= _key(max_value))
        and (min_magnitude is None or abs(v) >= min_magnitude)
        and (max_magnitude is None or abs(v) <= max_magnitude)
    )


RANGES = [
    ("bf16", {"min_value": -100.0, "max_value": 100.0}),
    ("bf16", {"min_magnitude": 2.0**-3, "max_magnitude": 2.0**3}),
    ("e4m3fn", {"min_value": 0.3, "max_value": 17.0}),
    ("e4m3fn", {"min_value": -1.0, "max_value": -0.0}),
    ("e5m2", {"min_value": 0.0, "max_magnitude": 1.0}),
    ("e2m1fn", {"min_value": -2.5, "max_value": 5.0}),
    ("int8_ocp", {"min_value": -3.0, "max_value": -1.0}),
    ("p3109_k8p3se", {"max_value": 10.0, "min_magnitude": 1.0}),
    ("p3109_k8p3ue", {"min_value": 1e-3, "max_value": 1e3}),
    ("e8m0fnu", {"min_value": 0.75, "max_value": 2.0**10}),
]


@pytest.mark.long
@pytest.mark.parametrize("fmt, bounds", RANGES, ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_ranges_draw_only_values_inside_and_hit_the_boundaries(fmt, bounds):
    """Every draw is a value of the format inside the range; over many draws the range's ends (the
    values nearest min_value and max_value inside it), zero, the smallest subnormal and max come up
    wherever they lie inside. The expected set comes from the oracle's grid of every value."""
    fmt = fpemu.get_format(fmt)
    inside = sorted((v for v in _all_values(fmt) if _in_range(v, **bounds)), key=_key)
    seen: set[tuple[float, float]] = set()

    @settings(MANY, max_examples=250)
    @given(values(fmt, **bounds))
    def collect(v):
        assert math.isfinite(v), "a range draws no specials by default"
        assert _in_range(v, **bounds) and _oracle_keeps(v, fmt), v
        seen.add(_key(v))

    collect()
    wanted = [inside[0], inside[-1]]  # the ends
    wanted += [
        v for v in (0.0, fmt.min_subnormal, -fmt.min_subnormal, fmt.max, fmt.min) if _key(v) in map(_key, inside)
    ]
    missing = [v for v in wanted if _key(v) not in seen]
    assert not missing, f"never drawn: {missing}"


def test_ranges_with_specials():
    """specials=True with a range: NaN, and only the infinities inside it."""
    kinds: set[str] = set()

    @MANY
    @given(values("bf16", min_value=-10, specials=True))
    def collect(v):
        assert math.isnan(v) or v >= -10
        kinds.add("nan" if math.isnan(v) else "+inf" if v == math.inf else "finite")

    collect()
    assert kinds == {"nan", "+inf", "finite"}  # -inf is below the range


def test_layernorm_arrays_stay_in_range():
    """The issue's layernorm test: bf16 arrays within +-1e4 (no overflow when squared), no filter."""

    @settings(max_examples=30)
    @given(arrays("bf16", (4, 8), min_value=-1e4, max_value=1e4))
    def check(a):
        assert (np.abs(a) <= 1e4).all() and np.isfinite(a).all()
        np.testing.assert_array_equal(
            a.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32), a.view(np.uint32)
        )

    check()


@given(fmt=formats(), data=st.data())
def test_ranges_on_custom_formats(fmt, data):
    """Between any two values of any format: only values of the format inside, in order."""
    ends = sorted([data.draw(values(fmt, specials=False), label=f"end{i}") for i in range(2)], key=_key)
    v = data.draw(values(fmt, min_value=ends[0], max_value=ends[1]), label="v")
    assert _key(ends[0]) <= _key(v) <= _key(ends[1]) and _oracle_keeps(v, fmt)


def test_range_argument_errors():
    with pytest.raises(ValueError, match="min_value must be <= max_value, got min_value=2.0, max_value=1.0"):
        values("bf16", min_value=2, max_value=1)
    with pytest.raises(ValueError, match="min_magnitude must be a non-negative number"):
        values("bf16", min_magnitude=-1)
    with pytest.raises(ValueError, match="max_value must be a number, got nan"):
        codes("bf16", max_value=math.nan)
    with pytest.raises(TypeError, match="min_value must be a real number or None"):
        arrays("bf16", min_value="1")
    with pytest.raises(ValueError, match="no finite value of e4m3fn lies in the range min_value=500.0"):
        values("e4m3fn", min_value=500)
    with pytest.raises(ValueError, match="no finite value of e4m3fn lies in the range min_value=1.01, max_value=1.1"):
        values("e4m3fn", min_value=1.01, max_value=1.1)  # between 1 and 1.125


# -- elements of arrays -----------------------------------------------------------------------------


def test_elements_are_rounded_into_the_format():
    """The issue's example: st.floats(-10, 10) into bf16 gives bf16 values (nearest even by default)."""

    @settings(max_examples=30)
    @given(arrays("bf16", 8, elements=st.floats(-10, 10)))
    def check(a):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(
            a.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32), a.view(np.uint32)
        )

    check()
    # 2.9 lies between e2m1fn's 2 and 3: nearest gives 3, toward_zero 2; 7 overflows to max, 6.
    assert find(arrays("e2m1fn", 2, elements=st.just(2.9)), lambda a: True, settings=SEARCH).tolist() == [3.0, 3.0]
    down = arrays("e2m1fn", 1, elements=st.just(2.9), rounding="toward_zero")
    assert find(down, lambda a: True, settings=SEARCH).tolist() == [2.0]
    assert find(arrays("e2m1fn", 1, elements=st.just(7.0)), lambda a: True, settings=SEARCH).tolist() == [6.0]


def test_boundaries_and_unrounded_elements_are_stored_as_drawn():
    """boundaries() draws inputs around a format, stored unrounded (ties included); rounding=None too,
    but an element the dtype does not hold is an error, never a silent cast."""
    tie = find(arrays("e4m3fn", 4, elements=boundaries("e4m3fn")), lambda a: (a == 464.0).any(), settings=SEARCH)
    assert 464.0 in tie.tolist()  # the overflow tie above 448, not a value of e4m3fn
    raw = find(arrays("e4m3fn", 1, elements=st.just(1.0625), rounding=None), lambda a: True, settings=SEARCH)
    assert raw.tolist() == [1.0625]

    @settings(max_examples=5, database=None)
    @given(arrays("e4m3fn", 2, elements=st.just(0.1), rounding=None))
    def unrounded(a):
        pass

    with pytest.raises(ValueError, match="element 0.1 .drawn unrounded. is not a value of dtype float32"):
        unrounded()


def test_elements_argument_errors():
    with pytest.raises(ValueError, match="min_value bound the values arrays draws itself"):
        arrays("bf16", elements=st.floats(), min_value=0)
    with pytest.raises(ValueError, match="rounding must be one of 'nearest_even'"):
        arrays("bf16", elements=st.floats(), rounding="stochastic")
    with pytest.raises(ValueError, match="bfloat16 cannot hold every value of fp16"):
        arrays("fp16", dtype="bfloat16", elements=st.floats(-1, 1))


# -- P3109 and two's-complement formats -------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, wanted",
    [
        (fpemu.get_format("p3109_k8p3se"), {0x80: "nan", 0x7F: "+inf", 0xFF: "-inf", 0x7E: "max", 0xFE: "-max"}),
        (fpemu.get_format("p3109_k8p3ue"), {0xFF: "nan", 0xFE: "+inf", 0xFD: "max", 0x01: "min_subnormal"}),
        (fpemu.p3109_format(8, 8), {0x80: "nan", 0x7F: "+inf", 0xFF: "-inf", 0x01: "min_subnormal"}),
        (fpemu.p3109_format(8, 1, extended=False), {0x80: "nan", 0x7F: "max", 0xFF: "-max"}),
        (fpemu.get_format("int8_ocp"), {0x80: "-2.0", 0x7F: "max", 0x81: "-max", 0xFF: "-min_subnormal"}),
    ],
    ids=lambda v: v.name if isinstance(v, fpemu.Format) else "",
)
def test_codes_of_p3109_and_twos_complement_formats(fmt, wanted):
    """The specials of P3109 (NaN at 0x80, +-inf at 0x7f/0xff; unsigned: +inf 0xfe, NaN 0xff) and
    OCP INT8's -2.0 (0x80) are drawn; every code decodes to a value that encodes back to it."""
    seen = set()

    @settings(MANY, max_examples=200)
    @given(codes(fmt))
    def collect(code):
        value = reference.decode_scalar(code, fmt)
        assert math.isnan(value) or reference.encode_scalar(value, fmt) == code
        assert not (value == 0 and math.copysign(1, value) < 0), "no -0 in these formats"
        seen.add(code)

    collect()
    assert set(wanted) <= seen, [name for code, name in wanted.items() if code not in seen]


def test_boundaries_of_a_twos_complement_format():
    """int8_ocp (k/64, k = -128..127): -2.0 and the negative overflow tie -2 - 1/128 are drawn; the
    tie above max 127/64 is 127/64 + 1/128 (its spacing is 1/64 everywhere)."""
    for point in (-2.0, -2.0 - 2.0**-7, 127 / 64 + 2.0**-7):
        assert find(boundaries("int8_ocp"), lambda x, p=point: x == p, settings=SEARCH) == point
