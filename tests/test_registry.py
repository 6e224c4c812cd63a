"""The registry: lookup by name, alias and dtype; registering custom formats; errors."""

import itertools

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import Format

_ML_DTYPES_NAMES = [
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e3m4",
    "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu",
]  # fmt: skip


@pytest.mark.parametrize("name", _ML_DTYPES_NAMES)
def test_ml_dtypes_names_prefixless_names_and_dtypes_agree(name):
    fmt = fpemu.get_format(name)
    assert fpemu.get_format(name.split("_", 1)[1]) is fmt
    assert fpemu.get_format(getattr(ml_dtypes, name)) is fmt
    assert fpemu.get_format(np.dtype(getattr(ml_dtypes, name))) is fmt
    assert fmt.dtype == np.dtype(getattr(ml_dtypes, name))


@pytest.mark.parametrize(
    ("names", "dtype"),
    [
        (("fp64", "float64", "double"), np.float64),
        (("fp32", "float32", "single"), np.float32),
        (("fp16", "float16", "half"), np.float16),
        (("bf16", "bfloat16"), jnp.bfloat16),
        (("tf32", "tensorfloat32"), None),
    ],
)
def test_ieee_names(names, dtype):
    formats = {fpemu.get_format(n) for n in names} | {fpemu.get_format(n.upper()) for n in names}
    assert len(formats) == 1
    (fmt,) = formats
    if dtype is not None:
        assert fpemu.get_format(dtype) is fmt and fmt.dtype == np.dtype(dtype)
    else:
        assert fmt.dtype is None and (fmt.exponent_bits, fmt.mantissa_bits) == (8, 10)


def test_every_builtin_is_listed_once():
    names = [f.name for f in fpemu.formats()]
    assert len(names) == len(set(names))
    assert set(names) >= {"fp64", "fp32", "tf32", "fp16", "bf16", "e4m3fn", "e5m2", "e8m0fnu", "e2m1fn"}


def test_unknown_name_suggests_close_matches():
    with pytest.raises(fpemu.UnknownFormatError, match="did you mean 'e4m3fn'") as info:
        fpemu.get_format("e4m3f")
    assert isinstance(info.value, ValueError)
    with pytest.raises(fpemu.UnknownFormatError, match="registered formats: fp64, fp32"):
        fpemu.get_format("zzz")


def test_non_float_dtype_and_wrong_types():
    with pytest.raises(fpemu.UnknownFormatError, match="int32"):
        fpemu.get_format(np.int32)
    with pytest.raises(TypeError, match="fmt must be a format name"):
        fpemu.get_format(3.5)


_counter = itertools.count()


def _fresh_name():
    return f"test_custom_{next(_counter)}"


def test_register_and_use_a_custom_format():
    name = _fresh_name()
    fmt = fpemu.register_format(Format(name=name, exponent_bits=3, mantissa_bits=2, specials="fn"), aliases=["Alias_" + name])
    assert fpemu.get_format(name) is fmt and fpemu.get_format("alias_" + name) is fmt
    assert fmt in fpemu.formats()
    assert float(fpemu.quantize(jnp.float32(100.0), name, saturate=True)) == fmt.max


def test_reregistering_a_taken_name_raises_and_changes_nothing():
    before = fpemu.formats()
    with pytest.raises(ValueError, match="already taken.*'e4m3fn'"):
        fpemu.register_format(Format(name="E4M3FN", exponent_bits=4, mantissa_bits=3))
    name = _fresh_name()
    with pytest.raises(ValueError, match="already taken.*'bf16'"):
        fpemu.register_format(Format(name=name, exponent_bits=4, mantissa_bits=3), aliases=["bf16"])
    assert fpemu.formats() == before
    with pytest.raises(fpemu.UnknownFormatError):
        fpemu.get_format(name)  # the valid part of a rejected registration was not added


def test_register_rejects_non_formats_and_duplicate_aliases():
    with pytest.raises(TypeError, match="fpemu.Format"):
        fpemu.register_format("e4m3fn")
    name = _fresh_name()
    with pytest.raises(ValueError, match="repeat"):
        fpemu.register_format(Format(name=name, exponent_bits=4, mantissa_bits=3), aliases=[name.upper()])
