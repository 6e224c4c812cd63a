"""The format registry: the built-in formats, their names, and lookup by name, dtype or `Format`.

This module is the single place where format facts are written down. Everything else asks it.
"""

from __future__ import annotations

import difflib
import threading
from typing import Any, Iterable, Union

import ml_dtypes
import numpy as np

from fpemu._core.format import Format, bind_dtype

FormatLike = Union[str, Format, np.dtype, type]

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
)


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
_names: dict[str, Format] = {}  # every accepted (lower-case) name -> Format


def _normalize(name: str) -> str:
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
    _formats[keys[0]] = fmt
    for key in keys:
        _names[key] = fmt


for _fmt, _dtype_name, _aliases in _BUILTINS:
    _prefixed = (_dtype_name,) if _dtype_name and _dtype_name.startswith("float") and "_" in _dtype_name else ()
    _add(_fmt, _prefixed + _aliases)


class UnknownFormatError(ValueError):
    """Raised for a format name or dtype that is not in the registry."""


def get_format(fmt: Any) -> Format:
    """Look up a format by name, dtype, or pass a `Format` through.

    Names are case-insensitive: the short names (``"e4m3fn"``, ``"bf16"``, ``"e2m1fn"``...), the
    ml_dtypes names (``"float8_e4m3fn"``), and the long spellings (``"float32"``, ``"bfloat16"``).
    Dtypes: NumPy, ml_dtypes and ``jnp`` float dtypes or scalar types (``jnp.float8_e4m3fn``).
    ``"e4m3"`` (IEEE-like, max 240, has infinity) and ``"e4m3fn"`` (OCP E4M3, max 448, no infinity)
    are different formats.

    Raises:
      UnknownFormatError: (a ValueError) for an unknown name, naming the closest registered ones.
      TypeError: for anything that is not a name, dtype or `Format`.

    Example:
      >>> import jax.numpy as jnp
      >>> get_format("float8_e4m3fn") is get_format(jnp.float8_e4m3fn) is get_format("E4M3FN")
      True
      >>> get_format("e4m3").max, get_format("e4m3fn").max
      (240.0, 448.0)
    """
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = _normalize(fmt)
        found = _names.get(key)
        if found is not None:
            return found
        close = difflib.get_close_matches(key, list(_names), n=4, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise UnknownFormatError(
            f"unknown format {fmt!r}; {hint}registered formats: {', '.join(_formats)} (see fpemu.formats())"
        )
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
        f"dtype {dtype.name} is not a floating-point format in the registry; registered formats: "
        f"{', '.join(_formats)}"
    )


def register_format(fmt: Format, aliases: Iterable[str] = ()) -> Format:
    """Add a custom format to the registry, under its name and any aliases (case-insensitive).

    Raises:
      TypeError: if ``fmt`` is not a `Format`.
      ValueError: if the name or an alias is already taken; the registry is left unchanged.

    Example:
      >>> import fpemu
      >>> fmt = fpemu.register_format(fpemu.Format(name="e3m3_doc", exponent_bits=3, mantissa_bits=3))
      >>> fpemu.get_format("E3M3_DOC") is fmt
      True
    """
    if not isinstance(fmt, Format):
        raise TypeError(f"fmt must be a fpemu.Format, got {type(fmt).__name__}")
    if isinstance(aliases, str):
        aliases = (aliases,)
    with _lock:
        _add(fmt, tuple(aliases))
    return fmt


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
