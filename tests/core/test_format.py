"""The Format descriptor: derived numbers against ml_dtypes' finfo, validation, hashability."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
import fpemu.testing.reference
from fpemu import Format

WITH_DTYPE = [f for f in fpemu.formats() if f.dtype is not None]


@pytest.mark.parametrize("fmt", WITH_DTYPE, ids=lambda f: f.name)
def test_derived_numbers_match_finfo(fmt):
    info = ml_dtypes.finfo(fmt.dtype)
    assert fmt.max == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert fmt.eps == float(info.eps)
    assert fmt.mantissa_bits == info.nmant
    assert fmt.bits == info.bits


@pytest.mark.parametrize("fmt", WITH_DTYPE, ids=lambda f: f.name)
def test_special_layout_matches_the_dtype(fmt):
    with np.errstate(invalid="ignore", over="ignore"):
        specials = np.array([np.inf, -0.0, np.nan], np.float32).astype(fmt.dtype).astype(np.float32)
    assert fmt.has_inf == bool(np.isinf(specials[0]))
    assert fmt.has_negative_zero == bool(specials[1] == 0 and np.signbit(specials[1]))
    assert fmt.has_nan == bool(np.isnan(specials[2]))


def test_issue_example_numbers():
    fmt = fpemu.get_format("e4m3fn")
    assert (fmt.max, fmt.min_normal, fmt.min_subnormal, fmt.eps, fmt.bias) == (448.0, 2.0**-6, 2.0**-9, 0.125, 7)
    assert fmt.dtype == jnp.float8_e4m3fn


def test_e4m3_and_e4m3fn_are_different_formats():
    e4m3, e4m3fn = fpemu.get_format("e4m3"), fpemu.get_format("e4m3fn")
    assert (e4m3.max, e4m3.has_inf) == (240.0, True)
    assert (e4m3fn.max, e4m3fn.has_inf) == (448.0, False)
    assert e4m3 != e4m3fn


@pytest.mark.parametrize("fmt", fpemu.formats(), ids=lambda f: f.name)
def test_codes_and_values_are_consistent(fmt):
    assert fmt.num_codes == 2**fmt.bits
    assert np.dtype(fmt.code_dtype).itemsize * 8 >= fmt.bits
    assert fmt.magnitude_value(fmt.max_code) == fmt.max
    # the top magnitude code is all ones except where NaN takes it ("fn": one mantissa step less) and
    # infinity (P3109's extended formats: one more step less, and one more for unsigned NaN)
    steps = {"fn": 2, "p3109": 2 if fmt.signed else 3}.get(fmt.specials, 1)
    if fmt.specials == "ieee":
        expected_max = math.ldexp(2 - 2.0**-fmt.mantissa_bits, fmt.emax)
    else:
        m = fmt.mantissa_bits
        exponent_field, mantissa = divmod((1 << (fmt.exponent_bits + m)) - steps, 1 << m)
        if exponent_field == 0 and fmt.has_zero:  # no exponent field: every value a subnormal
            expected_max = math.ldexp(mantissa, 1 - fmt.bias - m)
        else:
            expected_max = math.ldexp((1 << m) + mantissa, exponent_field - fmt.bias - m)
    assert fmt.max == expected_max
    assert fmt.min == (-(fmt.max + fmt.min_subnormal) if fmt.twos_complement else -fmt.max if fmt.signed else fmt.min)
    assert fmt.min_normal == 2.0**fmt.emin
    if fmt.has_subnormals:
        assert fmt.magnitude_value(1) == fmt.min_subnormal


def test_custom_format_defaults_to_ieee():
    fmt = Format(name="e6m9", exponent_bits=6, mantissa_bits=9)
    assert fmt.bias == 31 and fmt.has_inf and fmt.has_nan and fmt.has_negative_zero and fmt.has_subnormals
    assert fmt.max == (2 - 2.0**-9) * 2.0**31
    assert fmt.dtype is None


def test_custom_format_equal_to_builtin_shares_its_dtype():
    fmt = Format(name="my_e4m3fn", exponent_bits=4, mantissa_bits=3, specials="fn")
    assert fmt.dtype == jnp.float8_e4m3fn
    assert fmt.encoding == fpemu.get_format("e4m3fn").encoding


def test_format_is_frozen_and_hashable():
    fmt = fpemu.get_format("e5m2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.bias = 3
    assert hash(fmt) == hash(Format(name="e5m2", exponent_bits=5, mantissa_bits=2))
    # usable as a jit static argument
    f = jax.jit(lambda x, fmt: fpemu.quantize(x, fmt), static_argnums=1)
    assert float(f(jnp.float32(9.0), fmt)) == 8.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"exponent_bits": 0, "mantissa_bits": 3}, "exponent_bits"),
        ({"exponent_bits": 4, "mantissa_bits": -1}, "mantissa_bits"),
        ({"exponent_bits": 11, "mantissa_bits": 53}, "mantissa_bits"),
        ({"exponent_bits": 12, "mantissa_bits": 52}, "bits exceeds 64"),
        ({"exponent_bits": 4, "mantissa_bits": 0}, "specials='ieee' needs mantissa_bits"),
        ({"exponent_bits": 1, "mantissa_bits": 0, "specials": "fn"}, "no positive finite value"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "specials": "fnuz", "signed": False}, "fnuz"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "specials": "none", "signed": False}, "signed=False"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "has_zero": False}, "has_zero=False"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "specials": "nope"}, "specials must be one of"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "bias": -1100}, "beyond float64"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "bias": 1100}, "below float64"),
        ({"exponent_bits": -1, "mantissa_bits": 3, "specials": "fn"}, "exponent_bits must be >= 0"),
        ({"exponent_bits": 0, "mantissa_bits": 3, "specials": "fn", "signed": False, "has_zero": False}, "has_zero"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "twos_complement": True}, "twos_complement=True needs"),
        ({"exponent_bits": 0, "mantissa_bits": 7, "specials": "fnuz", "twos_complement": True}, "twos_complement"),
        ({"exponent_bits": 8, "mantissa_bits": 0, "specials": "p3109", "signed": False, "bias": -800}, "beyond"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "twos_complement": 1}, "twos_complement must be a bool"),
        ({"exponent_bits": 4.0, "mantissa_bits": 3}, "exponent_bits must be an int"),
        ({"exponent_bits": 4, "mantissa_bits": 3, "signed": 1}, "signed must be a bool"),
    ],
)
def test_impossible_layouts_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("(", "\\(").replace("=", "=")):
        Format(name="bad", **kwargs)


def test_empty_name_is_rejected():
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Format(name=" ", exponent_bits=4, mantissa_bits=3)


def test_magnitude_value_rejects_non_finite_codes():
    with pytest.raises(ValueError, match="finite magnitude code"):
        fpemu.get_format("e4m3fn").magnitude_value(0x7F)


def test_p3109_layouts():
    se = Format(name="k8p3se", exponent_bits=5, mantissa_bits=2, bias=16, specials="p3109")
    assert (se.nan_code, se.inf_code, se.max_code, se.max, se.has_inf, se.has_negative_zero) == (
        0x80, 0x7F, 0x7E, 49152.0, True, False,
    )  # fmt: skip
    ue = Format(name="k8p3ue", exponent_bits=6, mantissa_bits=2, bias=32, signed=False, specials="p3109")
    assert (ue.nan_code, ue.inf_code, ue.max_code, ue.max, ue.min) == (0xFF, 0xFE, 0xFD, 1.25 * 2.0**31, 0.0)
    uf = Format(name="k8p3uf", exponent_bits=6, mantissa_bits=2, bias=32, signed=False, specials="fn")
    assert (uf.nan_code, uf.inf_code, uf.max_code, uf.has_zero) == (0xFF, None, 0xFE, True)


def test_formats_without_exponent_bits_are_fixed_point():
    fmt = Format(name="k8p8sf", exponent_bits=0, mantissa_bits=7, bias=0, specials="fnuz")
    assert [fmt.magnitude_value(c) for c in (1, 2, 127)] == [2.0**-6, 2.0**-5, 127 / 64]
    assert (fmt.max, fmt.min_subnormal, fmt.nan_code, fmt.bits) == (127 / 64, 2.0**-6, 0x80, 8)
    assert fmt.min_normal > fmt.max  # no normal value at all


def test_twos_complement_int8():
    fmt = fpemu.get_format("int8_ocp")
    assert (fmt.max, fmt.min, fmt.neg_max_code, fmt.has_negative_zero, fmt.has_nan) == (
        127 / 64,
        -2.0,
        128,
        False,
        False,
    )
    assert fmt.magnitude_value(128) == 2.0
    assert fmt.eps == 1 / 64  # 1.0 is 64/64, the next value 65/64
    assert fmt.encoding != Format(name="int8_sm", exponent_bits=0, mantissa_bits=7, bias=0, specials="none").encoding
    assert fpemu.testing.reference.decode_scalar(0x80, fmt) == -2.0  # imported below through fpemu.testing
    assert fmt.dtype is None
