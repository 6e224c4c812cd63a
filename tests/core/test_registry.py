"""The registry: lookup by name, alias and dtype; registering custom formats; errors."""

import itertools

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import Format
from fpemu._core.registry import aliases, p3109_format  # p3109_format: public as fpemu.p3109_format

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
    formats = {fpemu.get_format(n) for n in names}
    assert len(formats) == 1
    (fmt,) = formats
    for name in names:  # names are exact: the upper-case spelling is an error naming the registered one
        with pytest.raises(fpemu.UnknownFormatError, match=f"lower case; did you mean {name!r}"):
            fpemu.get_format(name.upper())
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
    fmt = fpemu.register_format(
        Format(name=name, exponent_bits=3, mantissa_bits=2, specials="fn"), aliases=["alias_" + name]
    )
    assert fpemu.get_format(name) is fmt and fpemu.get_format("alias_" + name) is fmt
    assert fmt in fpemu.formats()
    assert float(fpemu.quantize(jnp.float32(100.0), name, saturate=True)) == fmt.max
    with pytest.raises(fpemu.UnknownFormatError, match=f"did you mean 'alias_{name}'"):
        fpemu.get_format("Alias_" + name)


def test_registered_names_are_lower_case():
    name = _fresh_name()
    before = fpemu.formats()
    with pytest.raises(ValueError, match=f"lower case.*'Alias_{name}'.*use 'alias_{name}'"):
        fpemu.register_format(Format(name=name, exponent_bits=3, mantissa_bits=2), aliases=["Alias_" + name])
    with pytest.raises(ValueError, match="lower case"):
        fpemu.register_format(Format(name=name.upper(), exponent_bits=3, mantissa_bits=2))
    with pytest.raises(ValueError, match="lower case"):
        fpemu.register_format(Format(name=f" {name}", exponent_bits=3, mantissa_bits=2))
    assert fpemu.formats() == before


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


def test_register_aliases_none_means_no_aliases():
    name = _fresh_name()
    fmt = fpemu.register_format(Format(name=name, exponent_bits=3, mantissa_bits=2), aliases=None)
    assert fpemu.get_format(name) is fmt
    assert fpemu.format_aliases(fmt) == (name,)


def test_register_rejects_non_iterable_aliases_naming_the_argument():
    name = _fresh_name()
    before = fpemu.formats()
    with pytest.raises(TypeError, match=r"aliases must be a format name, an iterable of names or None, got int"):
        fpemu.register_format(Format(name=name, exponent_bits=3, mantissa_bits=2), aliases=3)
    assert fpemu.formats() == before


# -- names people type ------------------------------------------------------------------------------


def test_upper_case_e4m3_names_both_e4m3fn_and_e4m3():
    for name in ("E4M3", "E4m3", " e4m3 "):
        with pytest.raises(fpemu.UnknownFormatError) as info:
            fpemu.get_format(name)
        message = str(info.value)
        assert "'e4m3fn'" in message and "'e4m3'" in message and "448" in message and "240" in message
    assert fpemu.get_format("e4m3").max == 240.0  # the exact lower-case name is the IEEE-like format


@pytest.mark.parametrize(
    ("name", "points_to"),
    [
        ("fp8", "'e4m3fn'.*'e5m2'"),
        ("FP8", "lower case.*'e4m3fn'"),
        ("fp4", "'e2m1fn'"),
        ("fp6", "'e2m3fn' or 'e3m2fn'"),
        ("int8", "'int8_ocp'"),
        ("mxfp4", r"fpemu.scaled.*get_block_format\('mxfp4'\).*'e2m1fn'"),
        ("nvfp4", r"fpemu.scaled.*'e2m1fn'"),
        ("mxfp8", r"fpemu.scaled.*'e4m3fn' or 'e5m2'"),
        ("MXFP6_E3M2", r"get_block_format\('mxfp6_e3m2'\).*'e3m2fn'"),
        ("mxint8", "'int8_ocp'"),
        ("fp8_e4m3", "'e4m3fn'"),
    ],
)
def test_family_and_block_format_names_point_to_where_they_live(name, points_to):
    with pytest.raises(fpemu.UnknownFormatError, match=points_to):
        fpemu.get_format(name)


def test_argument_layer_names_the_argument():
    with pytest.raises(fpemu.UnknownFormatError, match="fmt: unknown format 'E4M3'.*'e4m3fn'"):
        fpemu.quantize(jnp.ones(2), "E4M3")


# -- IEEE P3109 and OCP INT8 ------------------------------------------------------------------------

_P3109_K8 = [(p, s, d) for s in "su" for d in "ef" for p in range(1, 8 if s == "s" else 9)]


@pytest.mark.parametrize(("p", "signedness", "domain"), _P3109_K8, ids=lambda v: str(v))
def test_p3109_binary8_formats_are_registered_under_gfloat_and_p3109_names(p, signedness, domain):
    fmt = fpemu.get_format(f"p3109_k8p{p}{signedness}{domain}")
    assert fpemu.get_format(f"binary8p{p}{signedness}{domain}") is fmt
    assert fmt is p3109_format(8, p, signed=signedness == "s", extended=domain == "e")
    assert fmt.bits == 8 and fmt.precision == p and fmt.signed == (signedness == "s")
    assert fmt.bias == (2 ** (8 - p - 1) if signedness == "s" else 2 ** (8 - p))
    assert fmt.has_inf == (domain == "e") and fmt.has_nan and not fmt.has_negative_zero
    assert fmt.nan_code == (0x80 if signedness == "s" else 0xFF)
    assert fmt.inf_code == ({"s": 0x7F, "u": 0xFE}[signedness] if domain == "e" else None)


def test_p3109_finite_formats_equal_to_ml_dtypes_formats_are_aliases():
    assert fpemu.get_format("p3109_k8p4sf") is fpemu.get_format("e4m3fnuz")
    assert fpemu.get_format("binary8p3sf") is fpemu.get_format("e5m2fnuz")
    assert "p3109_k8p4sf" in aliases("e4m3fnuz")
    names = [f.name for f in fpemu.formats()]
    assert "p3109_k8p4sf" not in names and "p3109_k8p3se" in names and "int8_ocp" in names
    assert names[:5] == ["fp64", "fp32", "tf32", "fp16", "bf16"]


def test_p3109_format_builds_any_width():
    fmt = p3109_format(11, 3)
    assert (fmt.name, fmt.exponent_bits, fmt.mantissa_bits, fmt.bias) == ("p3109_k11p3se", 8, 2, 128)
    assert fmt == p3109_format(11, 3)  # equal descriptors: one jit cache entry
    u = p3109_format(16, 16, signed=False, extended=False)
    assert (u.exponent_bits, u.mantissa_bits, u.bias, u.max) == (1, 15, 1, 2 - 2 * 2.0**-15)
    s = p3109_format(6, 6, extended=False)  # P = K signed: no exponent field (gfloat's bias 0)
    assert (s.exponent_bits, s.bias, s.max, s.min_subnormal) == (0, 0, 31 / 16, 1 / 16)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((8, 9), {}, ValueError, "1 <= p <= k"),
        ((8, 0), {}, ValueError, "1 <= p <= k"),
        ((1, 1), {}, ValueError, "k >= 2"),
        ((8.0, 3), {}, TypeError, "k must be an int"),
        ((8, 3), {"signed": 1}, TypeError, "signed must be a bool"),
        ((16, 1), {}, ValueError, "P3109 k=16 p=1 signed.*beyond float64"),
        ((2, 1), {}, ValueError, "no positive finite value"),
    ],
)
def test_p3109_format_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        p3109_format(*args, **kwargs)


def test_ocp_int8_names():
    fmt = fpemu.get_format("int8_ocp")
    assert fpemu.get_format("ocp_int8") is fmt is fpemu.get_format("mxint8_element")
    assert fmt.twos_complement and (fmt.max, fmt.min) == (127 / 64, -2.0)
