"""An exact, slow, obviously-correct reference for rounding into any `fpemu.Format`.

This module is the oracle that the fast path is tested against, so it is written from the
semantics alone, with exact rational arithmetic (`fractions.Fraction`), and shares no code with
the conversion engine. It only reads the encoding facts of a `Format` (field widths, bias, where
zero, infinity and NaN live).

Semantics, on the magnitude ``a = |x|`` with the sign reapplied afterwards:

- The neighbours are ``lo``, the largest format value ``<= a``, and ``hi``, the next one up, where
  the grid continues past the largest finite value with the top binade's spacing (so ``hi`` may be
  ``max + ulp(max)``, which is not representable: choosing it means overflow).
- Modes: ``nearest_even`` (ties to the even code; ties away from zero when ``mantissa_bits == 0``
  unless ``exponent_ties="even"``), ``nearest_away``, ``toward_zero``, ``toward_positive``,
  ``toward_negative``, ``to_odd`` (an inexact result takes the neighbour with an odd code) and
  ``stochastic`` (with ``k`` random bits ``r`` and ``f = (a - lo) / (hi - lo)``, round away from zero
  iff ``T + r >= 2**k``, where ``T`` is ``2**k * f`` rounded to an integer by ``stochastic_variant``:
  ``"floor"``, ``"nearest_even"``, ``"nearest_odd"`` (ties to odd) or ``"nearest_away"`` (half up)).
- Overflow (the chosen neighbour lies beyond max, or beyond the most negative value of a
  two's-complement format): with ``saturate=True`` (or IEEE P3109's ``"sat_finite"`` or
  ``"sat_propagate"``) the result is ±max; otherwise the nearest modes, ``stochastic`` and the
  outward directed mode give "infinity" (±inf if the format has one, else NaN if it has one, else
  ±max), and ``toward_zero``, ``to_odd`` (except under P3109's ``"ovf_inf"``) and the inward
  directed mode give ±max.
- NaN converts to NaN. Infinity converts to ±max if ``saturate`` is True or ``"sat_finite"`` (or
  ``"sat_propagate"`` without infinity in the format), else to infinity if present, else NaN if
  present, else ±max. Unsigned formats turn negative nonzero inputs into NaN, except under P3109's
  saturation modes (if the format has a zero): 0 for ``"sat_finite"`` and ``"sat_propagate"``, and
  for ``"ovf_inf"`` 0 where the result is zero or the mode is toward_zero or toward_positive (finite
  inputs), NaN otherwise. Formats without zero (E8M0) turn ±0 into NaN and anything below their
  smallest value into that value.
- ``subnormals=False`` flushes every nonzero result below the smallest normal to a zero of the
  same sign. ``-0`` survives only where the format has a negative zero.
- Codes of NaN: ``nan_code | sign`` for signed ``"ieee"``/``"fn"`` formats, ``nan_code`` for
  ``"fnuz"``, ``"p3109"`` and unsigned formats; formats without NaN (FP6, FP4) encode a NaN input as
  the zero code with the sign bit inverted (``+NaN -> sign_mask``), as ml_dtypes does, and
  two's-complement formats (OCP INT8) as the zero code. A two's-complement negative value's code is
  ``2**bits - magnitude``.

The scalar functions (`round_scalar`, `encode_scalar`, `decode_scalar`) are exact for every format.
The array functions (`round_array`, `encode_array`) use float64 NumPy arithmetic where that is
provably exact (formats of at most 16 bits and inputs of float32 or narrower); otherwise they loop
over the scalar functions.

Example:
  >>> from fpemu.testing import reference
  >>> reference.round_scalar(464.0, "e4m3fn")  # the tie above max rounds to the even max
  448.0
  >>> hex(reference.encode_scalar(464.00003, "e4m3fn"))  # just above the tie: NaN
  '0x7f'
  >>> reference.round_scalar(449.0, "e4m3fn", rounding="toward_negative")
  448.0
  >>> [float(v) for v in reference.values("e2m1fn")]
  [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from fpemu._core.format import Format
from fpemu._core.modes import (
    EXPONENT_TIES,
    P3109_SATURATIONS,
    ROUNDING_MODES,
    STOCHASTIC_VARIANTS,
    Rounding,
    Saturation,
)
from fpemu._core.registry import get_format
from fpemu.testing import _reference_exact as _exact
from fpemu.testing import _reference_vector as _vector

__all__ = [
    "ROUNDING_MODES",
    "Rounding",
    "decode_scalar",
    "encode_array",
    "encode_scalar",
    "round_and_encode_array",
    "round_array",
    "round_scalar",
    "values",
]


_MAX_VALUES_CODES = 1 << 20  # `values` refuses to build longer lists than this
_MAX_RANDOM_BITS = 64


def values(fmt: Any) -> list[Fraction]:
    """All finite magnitudes of a format, in magnitude-code order (which is increasing order).

    Element ``i`` is the exact value of magnitude code ``i`` (sign bit clear), for ``i`` in
    ``0..fmt.max_code``. Zero, where the format has one, is element 0. (A two's-complement format's
    most negative value, ``fmt.min``, has no positive twin and is not listed.)

    Args:
      fmt: Anything `fpemu.get_format` accepts.

    Returns:
      A new list of `fractions.Fraction`.

    Raises:
      ValueError: for a format with more than ``2**20`` finite magnitudes (fp32, fp64): use
        `decode_scalar` on the codes you need instead.

    Example:
      >>> values("e4m3fn")[:3]
      [Fraction(0, 1), Fraction(1, 512), Fraction(1, 256)]
      >>> values("e8m0fnu")[0] == Fraction(1, 2**127)
      True
    """
    fmt = get_format(fmt)
    if fmt.max_code + 1 > _MAX_VALUES_CODES:
        raise ValueError(
            f"format {fmt.name!r} has {fmt.max_code + 1} finite magnitudes; values() builds lists of at most "
            f"{_MAX_VALUES_CODES} (use decode_scalar for wide formats)"
        )
    return list(_exact.values_tuple(fmt)[: fmt.max_code + 1])


# -- argument checks --------------------------------------------------------------------------------


def _options(rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties) -> _exact.Options:
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}; valid modes: {', '.join(ROUNDING_MODES)}")
    if not isinstance(saturate, (bool, np.bool_)) and saturate not in P3109_SATURATIONS:
        raise ValueError(f"saturate must be a bool or one of {', '.join(P3109_SATURATIONS)}, got {saturate!r}")
    if stochastic_variant not in STOCHASTIC_VARIANTS:
        raise ValueError(
            f"stochastic_variant must be one of {', '.join(STOCHASTIC_VARIANTS)}, got {stochastic_variant!r}"
        )
    if exponent_ties not in EXPONENT_TIES:
        raise ValueError(f"exponent_ties must be one of {', '.join(EXPONENT_TIES)}, got {exponent_ties!r}")
    if isinstance(random_bits, bool) or not isinstance(random_bits, (int, np.integer)):
        raise ValueError(f"random_bits must be an int in [1, {_MAX_RANDOM_BITS}], got {random_bits!r}")
    if not 1 <= int(random_bits) <= _MAX_RANDOM_BITS:
        raise ValueError(f"random_bits must be in [1, {_MAX_RANDOM_BITS}], got {random_bits}")
    saturate = bool(saturate) if isinstance(saturate, (bool, np.bool_)) else saturate
    return _exact.Options(rounding, saturate, subnormals, int(random_bits), stochastic_variant, exponent_ties)


def _check_random_scalar(opts: _exact.Options, random: Any) -> int:
    if opts.rounding != "stochastic":
        return 0
    if random is None:
        raise ValueError("rounding='stochastic' needs random: an int in [0, 2**random_bits)")
    if isinstance(random, bool) or not isinstance(random, (int, np.integer)):
        raise ValueError(f"random must be an int, got {type(random).__name__} {random!r}")
    random = int(random)
    if not 0 <= random < (1 << opts.random_bits):
        raise ValueError(f"random must be in [0, 2**{opts.random_bits}), got {random}")
    return random


# -- the scalar oracle ------------------------------------------------------------------------------


def round_scalar(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    random: int | None = None,
    random_bits: int = 32,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
) -> float:
    """Round one number into a format, exactly, and return the result's value.

    NaN converts to NaN (also for formats without NaN: see `encode_scalar` for their code).
    Infinity converts to ±max if saturating, else to ±inf if the format has it, else NaN if it
    has NaN, else ±max. A finite input rounds to one of its two neighbours by ``rounding``; a result
    beyond max overflows as described in the module docstring.

    Args:
      x: A Python float or int, a `fractions.Fraction`, or a NumPy / ml_dtypes float scalar of at
        most 64 bits (all convert exactly).
      fmt: Anything `fpemu.get_format` accepts.
      rounding: One of `ROUNDING_MODES`.
      saturate: ``False``, ``True`` (clamp every overflow, and infinite inputs, to ±max), or one of
        IEEE P3109's ``"sat_finite"``, ``"sat_propagate"``, ``"ovf_inf"``.
      subnormals: If False, nonzero results below the smallest normal become zero of the same sign.
      random: For ``rounding="stochastic"`` only: the ``random_bits`` random bits of this element,
        an int in ``[0, 2**random_bits)``.
      random_bits: The number ``k`` of random bits, 1 to 64.
      stochastic_variant: ``"floor"``, ``"nearest_even"``, ``"nearest_odd"`` or ``"nearest_away"``.
      exponent_ties: ``"away"`` or ``"even"``, for ``nearest_even`` without mantissa bits.

    Returns:
      The exact result as a Python float: NaN as ``nan``, ``-0.0`` where the format keeps it.

    Raises:
      ValueError: for an unknown rounding mode, saturation, variant or tie rule (listing the valid
        ones), or a missing or out-of-range ``random`` in stochastic mode.

    Example:
      >>> round_scalar(1.0625, "e4m3fn"), round_scalar(1.0625, "e4m3fn", rounding="nearest_away")
      (1.0, 1.125)
      >>> round_scalar(float("inf"), "e4m3fn", saturate=True)
      448.0
      >>> round_scalar(0.75, "e8m0fnu")  # E8M0 ties go away from zero
      1.0
      >>> round_scalar(1.25, "e2m1fn", rounding="stochastic", random=2, random_bits=2)  # f = 1/2
      1.5
      >>> round_scalar(450.0, "e4m3fn", rounding="to_odd"), round_scalar(450.0, "e4m3fn", "to_odd", "ovf_inf")
      (448.0, nan)
    """
    fmt = get_format(fmt)
    opts = _options(rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties)
    random = _check_random_scalar(opts, random)
    return _exact.result_float(fmt, _exact.round_result(x, fmt, random, opts))


def encode_scalar(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    random: int | None = None,
    random_bits: int = 32,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
) -> int:
    """Round one number into a format, exactly, and return the code (sign | exponent | mantissa).

    Takes the same arguments as `round_scalar`. NaN results encode as ``nan_code | sign`` in
    signed ``"ieee"`` and ``"fn"`` formats (the sign of the input), as ``nan_code`` in ``"fnuz"``,
    ``"p3109"`` and unsigned formats, and, in formats without NaN, as the zero code with the sign bit
    inverted (``+NaN -> sign_mask``, ``-NaN -> 0``), matching ml_dtypes, or the zero code for
    two's-complement formats.

    Example:
      >>> hex(encode_scalar(-2.0**-10, "e4m3fn")), hex(encode_scalar(-2.0**-20, "e4m3fnuz"))
      ('0x80', '0x0')
      >>> hex(encode_scalar(float("nan"), "e2m1fn"))
      '0x8'
      >>> hex(encode_scalar(-2.0, "int8_ocp")), hex(encode_scalar(-3.0, "p3109_k8p3se"))
      ('0x80', '0xc6')
    """
    fmt = get_format(fmt)
    opts = _options(rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties)
    random = _check_random_scalar(opts, random)
    return _exact.encode_result(fmt, _exact.round_result(x, fmt, random, opts))


def decode_scalar(code: int, fmt: Any) -> float:
    """The exact value of any code of a format, as a Python float.

    NaN codes decode to ``nan`` (fnuz's and P3109's ``0x80...`` included), infinity codes to ``±inf``,
    the negative-zero code to ``-0.0``. Unsigned formats have no sign bit; two's-complement codes
    with the top bit set are negative (``0x80`` of OCP INT8 is -2.0).

    Raises:
      ValueError: if ``code`` is not in ``[0, 2**fmt.bits)``.

    Example:
      >>> decode_scalar(0x7E, "e4m3fn"), decode_scalar(0x80, "e4m3fnuz"), decode_scalar(0xFC, "e5m2")
      (448.0, nan, -inf)
      >>> decode_scalar(0x7F, "p3109_k8p3se"), decode_scalar(0xFE, "p3109_k8p3ue"), decode_scalar(0x80, "int8_ocp")
      (inf, inf, -2.0)
    """
    fmt = get_format(fmt)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)):
        raise ValueError(f"code must be an int, got {type(code).__name__} {code!r}")
    code = int(code)
    if not 0 <= code < fmt.num_codes:
        raise ValueError(f"code must be in [0, 2**{fmt.bits}) for {fmt.name}, got {code}")
    return _exact.decode(code, fmt)


# -- arrays -----------------------------------------------------------------------------------------


def _input_array(x: Any) -> np.ndarray:
    x = np.asarray(x)
    dtype = x.dtype
    if dtype.kind == "f" and dtype.itemsize <= 8:
        return x
    if dtype.kind == "V":
        try:
            ml_dtypes.finfo(dtype)
        except (TypeError, ValueError, KeyError):
            pass
        else:
            return x
    raise ValueError(
        f"x must be an array of float16, float32, float64 or an ml_dtypes float type, got dtype {dtype.name}"
    )


def _round_loop(x: np.ndarray, fmt: Format, random: Any, opts: _exact.Options) -> tuple[np.ndarray, np.ndarray]:
    stochastic = opts.rounding == "stochastic"
    rand = _vector.random_array(random, x.shape, opts.random_bits).ravel() if stochastic else None
    codes = np.empty(x.size, dtype=fmt.code_dtype)
    out = np.empty(x.size, dtype=np.float64)
    for i, element in enumerate(x.ravel()):
        r = int(rand[i]) if rand is not None else 0
        result = _exact.round_result(element, fmt, r, opts)
        codes[i] = _exact.encode_result(fmt, result)
        out[i] = _exact.result_float(fmt, result)
    return codes.reshape(x.shape), out.reshape(x.shape)


def _round_any(x: Any, fmt: Any, random: Any, *options) -> tuple[np.ndarray, np.ndarray]:
    fmt = get_format(fmt)
    opts = _options(*options)
    x = _input_array(x)
    if _vector.vector_exact(fmt) and _vector.is_narrow_input(x.dtype):
        return _vector.round_vector(x, fmt, random, opts)
    return _round_loop(x, fmt, random, opts)


def round_array(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    random: Any = None,
    random_bits: int = 32,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
) -> np.ndarray:
    """`round_scalar` over an array, returning float64 values of the same shape.

    Vectorised with float64 NumPy arithmetic when that is exact: formats of at most 16 bits
    (whose midpoints fit in float64) and inputs of float32 or narrower (float16, bfloat16 and the
    other ml_dtypes floats). For wider formats (fp32, tf32, fp64) and float64 inputs it loops over
    the scalar oracle: exact, but about 10 µs per element.

    Args:
      x: An array of float16, float32, float64 or an ml_dtypes float type.
      fmt, rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties: as in
        `round_scalar`.
      random: For ``rounding="stochastic"``: an unsigned-integer array of x's shape, each element
        already reduced to ``random_bits`` bits.

    Raises:
      ValueError: for another input dtype, an unknown rounding mode, or missing or out-of-range
        random bits.

    Example:
      >>> round_array(np.array([0.3, -7.0, np.inf], np.float32), "e2m1fn").tolist()
      [0.5, -6.0, 6.0]
    """
    options = (rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties)
    return _round_any(x, fmt, random, *options)[1]


def encode_array(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: Saturation = False,
    subnormals: bool = True,
    random: Any = None,
    random_bits: int = 32,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
) -> np.ndarray:
    """`encode_scalar` over an array, returning codes of dtype ``fmt.code_dtype``.

    Same arguments, same exactness and fallback as `round_array`.

    Example:
      >>> encode_array(np.array([448.0, 464.0, 464.0625, -np.inf], np.float32), "e4m3fn").tolist()
      [126, 126, 127, 255]
    """
    options = (rounding, saturate, subnormals, random_bits, stochastic_variant, exponent_ties)
    return _round_any(x, fmt, random, *options)[0]


def round_and_encode_array(x: Any, fmt: Any, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """(`encode_array`, `round_array`) of the same input, computed once (for exhaustive sweeps)."""
    defaults = {"rounding": "nearest_even", "saturate": False, "subnormals": True, "random": None, "random_bits": 32,
                "stochastic_variant": "floor", "exponent_ties": "away"}  # fmt: skip
    unknown = set(options) - set(defaults)
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}; valid: {', '.join(defaults)}")
    o = {**defaults, **options}
    keys = ("rounding", "saturate", "subnormals", "random_bits", "stochastic_variant", "exponent_ties")
    return _round_any(x, fmt, o["random"], *(o[k] for k in keys))
