"""The format registry: the built-in formats, their names, and lookup by name, dtype or `Format`.

This module is the single place where format facts are written down. Everything else asks it.

Names are exact and lower case: ``"e4m3fn"``, never ``"E4M3FN"``. A name that differs from a
registered one only in case (or surrounding spaces) is an error that names the registered one, and
``"E4M3"`` in particular names both ``e4m3fn`` (OCP E4M3, what PyTorch and Transformer Engine call
E4M3) and ``e4m3`` (the IEEE-like format), since a case-insensitive lookup would silently pick the
wrong one. Family and block-format names (``"fp8"``, ``"mxfp4"``, ``"nvfp4"``...) are answered with
where those live.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

from fpemu._core.format import Format, Specials, bind_dtype

FormatLike = str | Format | np.dtype | type


def _p3109_name(k: int, p: int, signed: bool, extended: bool) -> str:
    return f"p3109_k{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}"


def _p3109_descriptor(k: int, p: int, signed: bool, extended: bool) -> Format:
    """The `Format` of IEEE P3109's binaryK pP format (gfloat's ``format_info_p3109``)."""
    mantissa_bits = p - 1
    exponent_bits = k - mantissa_bits - (1 if signed else 0)
    if signed:  # P3109: 2**(K-P-1); with P = K (no exponent field, outside P3109) gfloat's floor(2**-1) = 0
        bias = 1 << (k - p - 1) if k > p else 0
    else:
        bias = 1 << (k - p)
    specials: Specials = "p3109" if extended else ("fnuz" if signed else "fn")
    return Format(
        name=_p3109_name(k, p, signed, extended), exponent_bits=exponent_bits, mantissa_bits=mantissa_bits,
        bias=bias, signed=signed, specials=specials,
    )  # fmt: skip


def _p3109_aliases(k: int, p: int, signed: bool, extended: bool) -> tuple[str, ...]:
    """P3109's own spelling (``binary8p3se``) beside gfloat's canonical ``p3109_k8p3se``."""
    return (f"binary{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}",)


# name, encoding, the NumPy/ml_dtypes dtype name with exactly this encoding (or None), extra aliases.
# Unprefixed short names are canonical; the ml_dtypes names are aliases.
_BUILTINS: tuple[tuple[Format, str | None, tuple[str, ...]], ...] = (
    (Format(name="fp64", exponent_bits=11, mantissa_bits=52), "float64", ("float64", "double", "f64")),
    (Format(name="fp32", exponent_bits=8, mantissa_bits=23), "float32", ("float32", "single", "f32")),
    (Format(name="tf32", exponent_bits=8, mantissa_bits=10), None, ("tensorfloat32", "e8m10")),
    (Format(name="fp16", exponent_bits=5, mantissa_bits=10), "float16", ("float16", "half", "f16", "e5m10")),
    (Format(name="bf16", exponent_bits=8, mantissa_bits=7), "bfloat16", ("bfloat16", "e8m7")),
    (Format(name="e4m3fn", exponent_bits=4, mantissa_bits=3, specials="fn"), "float8_e4m3fn", ()),
    (Format(name="e5m2", exponent_bits=5, mantissa_bits=2), "float8_e5m2", ()),
    (Format(name="e4m3fnuz", exponent_bits=4, mantissa_bits=3, bias=8, specials="fnuz"), "float8_e4m3fnuz", ()),
    (Format(name="e5m2fnuz", exponent_bits=5, mantissa_bits=2, bias=16, specials="fnuz"), "float8_e5m2fnuz", ()),
    (
        Format(name="e4m3b11fnuz", exponent_bits=4, mantissa_bits=3, bias=11, specials="fnuz"),
        "float8_e4m3b11fnuz",
        (),
    ),
    (Format(name="e4m3", exponent_bits=4, mantissa_bits=3), "float8_e4m3", ()),
    (Format(name="e3m4", exponent_bits=3, mantissa_bits=4), "float8_e3m4", ()),
    (Format(name="e3m2fn", exponent_bits=3, mantissa_bits=2, specials="none"), "float6_e3m2fn", ()),
    (Format(name="e2m3fn", exponent_bits=2, mantissa_bits=3, specials="none"), "float6_e2m3fn", ()),
    (Format(name="e2m1fn", exponent_bits=2, mantissa_bits=1, specials="none"), "float4_e2m1fn", ()),
    (
        Format(name="e8m0fnu", exponent_bits=8, mantissa_bits=0, signed=False, specials="fn", has_zero=False),
        "float8_e8m0fnu",
        (),
    ),
    # OCP MX v1.0 INT8 (the MXINT8 element): two's-complement k / 64, -2.0 (code 0x80) .. 127/64.
    (
        Format(name="int8_ocp", exponent_bits=0, mantissa_bits=7, bias=0, specials="none", twos_complement=True),
        None,
        ("ocp_int8", "mxint8_element"),
    ),
)

# IEEE P3109 binary8: every precision, signed (P = 1..7: P = 8 would have no exponent field, which
# P3109 does not define) and unsigned (P = 1..8), extended and finite domains. Two of them are
# ml_dtypes formats already (the same codes): their P3109 names are aliases of those.
_P3109_K8 = [
    (p, signed, extended)
    for signed in (True, False)
    for extended in (True, False)
    for p in range(1, 8 + (0 if signed else 1))
]


def _lookup_dtype(name: str | None) -> np.dtype | None:
    if name is None:
        return None
    scalar_type = getattr(ml_dtypes, name, None) or getattr(np, name, None)
    return None if scalar_type is None else np.dtype(scalar_type)


for _fmt, _dtype_name, _ in _BUILTINS:
    _dtype = _lookup_dtype(_dtype_name)
    if _dtype is not None:
        bind_dtype(_fmt, _dtype)

_lock = threading.Lock()
_formats: dict[str, Format] = {}  # canonical name -> Format, in registration order
_names: dict[str, Format] = {}  # every accepted name (exact, lower case) -> Format


def _normalize(name: str) -> str:
    """The key two names collide on: registered names may not differ only in case or spaces."""
    return name.strip().lower()


def _add(fmt: Format, aliases: Iterable[str]) -> None:
    names = [fmt.name, *aliases]
    for alias in names:
        if not isinstance(alias, str) or not alias.strip():
            raise ValueError(f"aliases must be non-empty strings, got {alias!r}")
    keys = [_normalize(alias) for alias in names]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"format {fmt.name!r}: name/aliases repeat {duplicates}")
    taken = [k for k in keys if k in _names]
    if taken:
        owners = ", ".join(f"{k!r} (used by {_names[k].name!r})" for k in taken)
        raise ValueError(f"cannot register format {fmt.name!r}: name already taken: {owners}")
    inexact = [n for n in names if n != _normalize(n)]
    if inexact:
        raise ValueError(
            f"cannot register format {fmt.name!r}: format names are lower case without surrounding spaces; "
            f"got {', '.join(map(repr, inexact))} (use {', '.join(repr(_normalize(n)) for n in inexact)})"
        )
    _formats[names[0]] = fmt
    for name in names:
        _names[name] = fmt


for _fmt, _dtype_name, _aliases in _BUILTINS:
    _prefixed = (_dtype_name,) if _dtype_name and _dtype_name.startswith("float") and "_" in _dtype_name else ()
    _add(_fmt, _prefixed + _aliases)

for _p, _signed, _extended in _P3109_K8:
    _fmt = _p3109_descriptor(8, _p, _signed, _extended)
    _names_k8 = (_fmt.name, *_p3109_aliases(8, _p, _signed, _extended))
    _same = [f for f in _formats.values() if f.encoding == _fmt.encoding]
    if _same:  # e4m3fnuz is binary8p4sf, e5m2fnuz is binary8p3sf
        for _name in _names_k8:
            _names[_name] = _same[0]
    else:
        _add(_fmt, _names_k8[1:])


class UnknownFormatError(ValueError):
    """Raised for a format name or dtype that is not in the registry."""


# Names people type for a family of formats or for a block-scaled format (a block format of fpemu.scaled,
# not an element format): where each one lives.
_OCP_FP8 = "OCP FP8 is 'e4m3fn' (E4M3, max 448, no infinity) or 'e5m2' (E5M2)"
_FAMILIES = {
    "fp8": f"{_OCP_FP8}; see also 'e4m3fnuz', 'e5m2fnuz' and IEEE P3109's 'p3109_k8p{{P}}{{s|u}}{{e|f}}'",
    "float8": _OCP_FP8,
    "fp8_e4m3": "the OCP E4M3 element format is 'e4m3fn' (per-tensor scaled FP8 is the fpemu.scaled block format 'fp8_e4m3')",
    "fp8_e5m2": "the OCP E5M2 element format is 'e5m2' (per-tensor scaled FP8 is the fpemu.scaled block format 'fp8_e5m2')",
    "fp6": "OCP FP6 is 'e2m3fn' or 'e3m2fn'",
    "float6": "OCP FP6 is 'e2m3fn' or 'e3m2fn'",
    "fp4": "OCP FP4 (the MXFP4 and NVFP4 element) is 'e2m1fn'",
    "float4": "OCP FP4 (the MXFP4 and NVFP4 element) is 'e2m1fn'",
    "e2m1": "OCP FP4 (the MXFP4 and NVFP4 element) is 'e2m1fn'",
    "e8m0": "the OCP MX scale format is 'e8m0fnu'",
    "int8": "OCP INT8 (the MXINT8 element, two's-complement k/64) is 'int8_ocp'",
}
_BLOCK_ELEMENTS = {
    "mxfp8": "'e4m3fn' or 'e5m2'", "mxfp8_e4m3": "'e4m3fn'", "mxfp8_e5m2": "'e5m2'", "mxfp6": "'e2m3fn' or 'e3m2fn'",
    "mxfp6_e2m3": "'e2m3fn'", "mxfp6_e3m2": "'e3m2fn'", "mxfp4": "'e2m1fn'", "nvfp4": "'e2m1fn'",
    "mxint8": "'int8_ocp'",
}  # fmt: skip


def _listing() -> str:
    p3109 = [name for name in _formats if name.startswith("p3109_k8")]
    others = [name for name in _formats if not name.startswith("p3109_k8")]
    return ", ".join(others) + (", and IEEE P3109's p3109_k8p{P}{s|u}{e|f}" if p3109 else "")


def _unknown_name(name: str) -> str:
    key = _normalize(name)
    lower = "format names are exact and lower case; " if key != name else ""
    if key == "e4m3":
        return (
            f"unknown format {name!r}: {lower}OCP E4M3 (torch.float8_e4m3fn, Transformer Engine's E4M3: max 448, no "
            "infinity) is 'e4m3fn'; 'e4m3' is the IEEE-like format (max 240, with infinity)"
        )
    if key in _names:
        return f"unknown format {name!r}: {lower}did you mean {key!r}?"
    if key in _FAMILIES:
        return f"unknown format {name!r}: {lower}{_FAMILIES[key]}"
    if key in _BLOCK_ELEMENTS or key.startswith(("mxfp", "mxint", "nvfp")):
        element = _BLOCK_ELEMENTS.get(key)
        return (
            f"unknown format {name!r}: {lower}block-scaled formats (MX, NVFP4), whose blocks share a scale, are "
            f"block formats of fpemu.scaled (fpemu.scaled.get_block_format({key!r})), not element formats"
            + (f"; the element format is {element}" if element else "")
        )
    close = difflib.get_close_matches(key, list(_names), n=4, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown format {name!r}; {lower}{hint}registered formats: {_listing()} (see fpemu.formats())"


def get_format(fmt: Any) -> Format:
    """Look up a format by name, dtype, or pass a `Format` through.

    Names are exact and lower case: the short names (``"e4m3fn"``, ``"bf16"``, ``"e2m1fn"``...), the
    ml_dtypes names (``"float8_e4m3fn"``), the long spellings (``"float32"``, ``"bfloat16"``) and IEEE
    P3109's (``"p3109_k8p3se"``, as gfloat spells them, or ``"binary8p3se"``). Dtypes: NumPy, ml_dtypes
    and ``jnp`` float dtypes or scalar types (``jnp.float8_e4m3fn``). ``"e4m3"`` (IEEE-like, max 240,
    has infinity) and ``"e4m3fn"`` (OCP E4M3, max 448, no infinity) are different formats, so
    ``"E4M3"`` is an error that names both.

    Raises:
      UnknownFormatError: (a ValueError) for an unknown name: the registered name it differs from only
        in case, else where a family (``"fp8"``) or block-format (``"mxfp4"``) name lives, else the
        closest registered names.
      TypeError: for anything that is not a name, dtype or `Format`.

    Example:
      >>> import jax.numpy as jnp
      >>> get_format("float8_e4m3fn") is get_format(jnp.float8_e4m3fn) is get_format("e4m3fn")
      True
      >>> get_format("e4m3").max, get_format("e4m3fn").max
      (240.0, 448.0)
      >>> try:
      ...     get_format("E4M3")
      ... except UnknownFormatError as e:
      ...     print(e)
      unknown format 'E4M3': format names are exact and lower case; OCP E4M3 (torch.float8_e4m3fn, Transformer Engine's E4M3: max 448, no infinity) is 'e4m3fn'; 'e4m3' is the IEEE-like format (max 240, with infinity)
    """
    if fmt is None:  # NumPy would read None as float64
        raise TypeError("fmt must be a format name, a fpemu.Format or a floating-point dtype, got None")
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        found = _names.get(fmt)
        if found is not None:
            return found
        raise UnknownFormatError(_unknown_name(fmt))
    try:
        dtype = np.dtype(fmt)
    except TypeError:
        raise TypeError(
            f"fmt must be a format name, a fpemu.Format or a floating-point dtype, got {type(fmt).__name__} {fmt!r}"
        ) from None
    for registered in _formats.values():
        if registered.dtype == dtype:
            return registered
    raise UnknownFormatError(
        f"dtype {dtype.name} is not a floating-point format in the registry; registered formats: {_listing()}"
    )


def register_format(fmt: Format, aliases: Iterable[str] | str | None = ()) -> Format:
    """Add a custom format to the registry, under its name and any aliases (exact, lower case).

    ``aliases`` is one name, an iterable of names, or None (no aliases, as ``()``).

    Raises:
      TypeError: if ``fmt`` is not a `Format`, or ``aliases`` is not a string, an iterable of strings
        or None.
      ValueError: if the name or an alias is already taken (names that differ only in case count as
        the same), or is not lower case; the registry is left unchanged.

    Example:
      >>> import fpemu
      >>> fmt = fpemu.register_format(fpemu.Format(name="e3m3_doc", exponent_bits=3, mantissa_bits=3))
      >>> fpemu.get_format("e3m3_doc") is fmt
      True
    """
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a fpemu.Format, got {type(fmt).__name__}")
    if aliases is None:
        aliases = ()
    elif isinstance(aliases, str):
        aliases = (aliases,)
    elif not isinstance(aliases, Iterable):
        raise TypeError(
            f"aliases must be a format name, an iterable of names or None, got {type(aliases).__name__} "
            f"(e.g. register_format(fmt, aliases=('my_alias',)))"
        )
    with _lock:
        _add(fmt, tuple(aliases))
    return fmt


def p3109_format(k: int, p: int, *, signed: bool = True, extended: bool = True) -> Format:
    """The IEEE P3109 format binaryK pP, signed or unsigned, extended (with infinity) or finite.

    Named ``p3109_k{K}p{P}{s|u}{e|f}`` as gfloat's ``format_info_p3109`` names it (the K = 8 formats
    are registered under these names; other widths are built on demand). The layout, from the P3109
    interim report: ``P - 1`` mantissa bits, ``K - P`` exponent bits (signed, after the sign bit) or
    ``K - P + 1`` (unsigned), bias ``2**(K-P-1)`` (signed) or ``2**(K-P)`` (unsigned), subnormals,
    no negative zero. Signed formats have one NaN, the negative-zero code ``2**(K-1)``, and, extended,
    ±infinity at ``2**(K-1) - 1`` and ``2**K - 1`` (``specials="p3109"``; finite: ``"fnuz"``). Unsigned
    formats have one NaN, ``2**K - 1``, and, extended, +infinity at ``2**K - 2`` (``"p3109"``; finite:
    ``"fn"``). A signed format with P = K has no exponent field; P3109 leaves it undefined and fpemu
    follows gfloat (bias 0, every value a subnormal).

    Args:
      k: Width in bits, at least 2.
      p: Precision in bits (significant bits, the implicit one included), 1 to ``k``.
      signed: Signed (default) or unsigned.
      extended: The extended domain (with infinity, default) or the finite one.

    Raises:
      TypeError: for non-int widths or non-bool flags.
      ValueError: for ``p`` outside ``1..k``, or a format whose values are not all float64 values
        (fpemu computes in float64 at most: signed formats need ``K - P <= 11``, unsigned ``K - P <= 10``),
        or one with no positive finite value.

    Example:
      >>> fmt = p3109_format(8, 3)
      >>> fmt.name, fmt.max, fmt.inf_code, fmt.nan_code, fmt is get_format("p3109_k8p3se")
      ('p3109_k8p3se', 49152.0, 127, 128, True)
      >>> p3109_format(10, 4, signed=False, extended=False).max  # 1.75 * 2**63
      1.6140901064495858e+19
    """
    for name, value in (("k", k), ("p", p)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    for name, value in (("signed", signed), ("extended", extended)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}")
    k, p, signed, extended = int(k), int(p), bool(signed), bool(extended)
    if k < 2 or not 1 <= p <= k:
        raise ValueError(f"P3109 formats need k >= 2 and 1 <= p <= k, got k={k}, p={p}")
    registered = _names.get(_p3109_name(k, p, signed, extended))
    try:
        fmt = _p3109_descriptor(k, p, signed, extended)
    except ValueError as e:
        raise ValueError(f"P3109 k={k} p={p} {'signed' if signed else 'unsigned'}: {e}") from None
    return registered if registered is not None and registered.encoding == fmt.encoding else fmt


def formats() -> tuple[Format, ...]:
    """All registered formats, built-ins first, in registration order.

    Example:
      >>> [f.name for f in formats()][:5]
      ['fp64', 'fp32', 'tf32', 'fp16', 'bf16']
    """
    return tuple(_formats.values())


def aliases(fmt: FormatLike) -> tuple[str, ...]:
    """Every accepted name of a registered format, canonical name first."""
    fmt = get_format(fmt)
    return tuple(name for name, registered in _names.items() if registered is fmt)
