"""An exact, slow, obviously-correct reference for rounding into any `fpemu.Format`.

This module is the oracle that the fast path is tested against, so it is written from the
semantics alone, with exact rational arithmetic (`fractions.Fraction`), and shares no code with
the conversion engine. It only reads the encoding facts of a `Format` (field widths, bias, where
zero, infinity and NaN live).

Semantics, on the magnitude ``a = |x|`` with the sign reapplied afterwards:

- The neighbours are ``lo``, the largest format value ``<= a``, and ``hi``, the next one up, where
  the grid continues past the largest finite value with the top binade's spacing (so ``hi`` may be
  ``max + ulp(max)``, which is not representable: choosing it means overflow).
- Modes: ``nearest_even`` (ties to the even code; ties away from zero when ``mantissa_bits == 0``),
  ``nearest_away``, ``toward_zero``, ``toward_positive``, ``toward_negative``, ``to_odd`` (an inexact
  result takes the neighbour with an odd code) and ``stochastic`` (with ``k`` random bits ``r`` and
  ``f = (a - lo) / (hi - lo)``, round away from zero iff ``floor(2**k * f) + r >= 2**k``).
- Overflow (the chosen neighbour lies beyond max): with ``saturate`` the result is ±max; otherwise
  the nearest modes, ``stochastic`` and the outward directed mode give "infinity" (±inf if the format
  has one, else NaN if it has one, else ±max), and ``toward_zero``, ``to_odd`` and the inward
  directed mode give ±max.
- NaN converts to NaN. Infinity converts to ±max if saturating, else to infinity if present, else
  NaN if present, else ±max. Unsigned formats turn negative nonzero inputs into NaN; formats
  without zero (E8M0) turn ±0 into NaN and anything below their smallest value into that value.
- ``subnormals=False`` flushes every nonzero result below the smallest normal to a zero of the
  same sign. ``-0`` survives only where the format has a negative zero.
- Codes of NaN: ``nan_code | sign`` for signed ``"ieee"``/``"fn"`` formats, ``nan_code`` for
  ``"fnuz"`` and unsigned formats; formats without NaN (FP6, FP4) encode a NaN input as the zero code
  with the sign bit inverted (``+NaN -> sign_mask``), as ml_dtypes does.

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

import functools
import math
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import ml_dtypes
import numpy as np

from fpemu._core.format import Format
from fpemu._core.modes import ROUNDING_MODES, Rounding
from fpemu._core.registry import get_format

__all__ = [
    "ROUNDING_MODES",
    "Rounding",
    "decode_scalar",
    "encode_array",
    "encode_scalar",
    "round_array",
    "round_scalar",
    "values",
]


_MAX_VALUES_CODES = 1 << 20  # `values` refuses to build longer lists than this
_VECTOR_MAX_BITS = 16  # the float64 array path is exact for formats up to this width
_MAX_RANDOM_BITS = 64


# -- exact arithmetic helpers -----------------------------------------------------------------------


def _pow2(exponent: int) -> Fraction:
    return Fraction(1 << exponent) if exponent >= 0 else Fraction(1, 1 << -exponent)


def _floor_log2(a: Fraction) -> int:
    """``floor(log2(a))`` for a positive Fraction, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if a < _pow2(e) else e


def _magnitude_fraction(fmt: Format, code: int) -> Fraction:
    """The exact value of a finite magnitude code, from the definition of the encoding."""
    m = fmt.mantissa_bits
    exponent_field = code >> m
    mantissa = code & ((1 << m) - 1)
    if fmt.has_zero and exponent_field == 0:
        return mantissa * _pow2(fmt.emin - m)
    return ((1 << m) + mantissa) * _pow2(exponent_field - fmt.bias - m)


def _top_ulp_exponent(fmt: Format) -> int:
    """Exponent of the spacing of the top binade: ``max + 2**this`` is the first value beyond max."""
    return (fmt.max_code >> fmt.mantissa_bits) - fmt.bias - fmt.mantissa_bits


@functools.lru_cache(maxsize=64)
def _values_tuple(fmt: Format) -> tuple[Fraction, ...]:
    return tuple(_magnitude_fraction(fmt, code) for code in range(fmt.max_code + 1))


def values(fmt: Any) -> list[Fraction]:
    """All finite magnitudes of a format, in magnitude-code order (which is increasing order).

    Element ``i`` is the exact value of magnitude code ``i`` (sign bit clear), for ``i`` in
    ``0..fmt.max_code``. Zero, where the format has one, is element 0.

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
    return list(_values_tuple(fmt))


# -- the scalar oracle ------------------------------------------------------------------------------


class _Result(NamedTuple):
    kind: Literal["num", "inf", "nan"]
    negative: bool  # the sign of the result (for "nan": the sign of the NaN, see _encode_result)
    magnitude: int = 0  # magnitude code, for kind "num"


def _check_rounding(rounding: str) -> None:
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}; valid modes: {', '.join(ROUNDING_MODES)}")


def _check_random_bits(random_bits: Any) -> int:
    if isinstance(random_bits, bool) or not isinstance(random_bits, (int, np.integer)):
        raise ValueError(f"random_bits must be an int in [1, {_MAX_RANDOM_BITS}], got {random_bits!r}")
    if not 1 <= int(random_bits) <= _MAX_RANDOM_BITS:
        raise ValueError(f"random_bits must be in [1, {_MAX_RANDOM_BITS}], got {random_bits}")
    return int(random_bits)


def _check_random_scalar(rounding: str, random: Any, random_bits: int) -> int:
    if rounding != "stochastic":
        return 0
    if random is None:
        raise ValueError("rounding='stochastic' needs random: an int in [0, 2**random_bits)")
    if isinstance(random, bool) or not isinstance(random, (int, np.integer)):
        raise ValueError(f"random must be an int, got {type(random).__name__} {random!r}")
    random = int(random)
    if not 0 <= random < (1 << random_bits):
        raise ValueError(f"random must be in [0, 2**{random_bits}), got {random}")
    return random


def _to_fraction(x: Any) -> Fraction | float:
    """A Fraction for finite x, or the float itself for NaN and ±inf (and -0.0, to keep its sign)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return Fraction(int(x))
    if isinstance(x, np.longdouble) and np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant:
        raise ValueError("long double inputs cannot be converted to float exactly; pass a Fraction")
    xf = float(x)
    if math.isnan(xf) or math.isinf(xf) or (xf == 0.0 and math.copysign(1.0, xf) < 0):
        return xf
    return Fraction(xf)


def _round_magnitude(fmt: Format, a: Fraction, rounding: str, negative: bool, random: int, random_bits: int) -> int:
    """The magnitude code that ``a > 0`` rounds to; ``> fmt.max_code`` means beyond max (overflow)."""
    m = fmt.mantissa_bits
    emin = fmt.emin
    if not fmt.has_zero and a < _pow2(emin):
        return 0  # no lower neighbour: the smallest value, in every mode
    e = _floor_log2(a)
    binade = max(e, emin) if fmt.has_zero else e
    quantum = _pow2(binade - m)
    n = math.floor(a / quantum)
    # Magnitude codes count grid points: code = (binade - emin) * 2**m + n, less the implicit bit
    # where the lowest binade is normal. n == 2**(m+1) would be the next binade's first code.
    code_lo = ((binade - emin) << m) + n - (0 if fmt.has_zero else 1 << m)
    remainder = a - n * quantum
    if remainder == 0:
        return code_lo
    if rounding == "nearest_even":
        twice = 2 * remainder
        if twice != quantum:
            up = twice > quantum
        elif m == 0:
            up = True  # E8M0-like: the only significand bit is implicit, ties go away from zero
        else:
            up = code_lo % 2 == 1  # the upper neighbour has the even code
    elif rounding == "nearest_away":
        up = 2 * remainder >= quantum
    elif rounding == "toward_zero":
        up = False
    elif rounding == "toward_positive":
        up = not negative
    elif rounding == "toward_negative":
        up = negative
    elif rounding == "to_odd":
        up = code_lo % 2 == 0  # the upper neighbour has the odd code
    elif rounding == "stochastic":
        threshold = math.floor((remainder / quantum) * (1 << random_bits))
        up = threshold + random >= (1 << random_bits)
    else:  # pragma: no cover - validated by the callers
        raise AssertionError(rounding)
    return code_lo + int(up)


def _infinity(fmt: Format, negative: bool, subnormals: bool) -> _Result:
    """'Infinity': ±inf if the format has it, else NaN if it has NaN, else ±max."""
    if fmt.has_inf:
        return _Result("inf", negative)
    if fmt.has_nan:
        return _Result("nan", negative)
    return _finish(fmt, negative, fmt.max_code, subnormals)


def _overflow_is_max(rounding: str, negative: bool) -> bool:
    """Whether a non-saturating overflow in this mode gives ±max (rather than "infinity")."""
    return rounding in ("toward_zero", "to_odd") or rounding == ("toward_positive" if negative else "toward_negative")


def _round(
    x: Any, fmt: Format, rounding: str, saturate: bool, subnormals: bool, random: int, random_bits: int
) -> _Result:
    value = _to_fraction(x)
    if isinstance(value, float):
        negative = math.copysign(1.0, value) < 0
        if math.isnan(value):
            return _Result("nan", negative)
        if value == 0.0:  # -0.0
            value = Fraction(0)
    else:
        negative = value < 0
    if value == 0:
        if not fmt.has_zero:
            return _Result("nan", negative)
        return _finish(fmt, negative, 0, subnormals)
    if negative and not fmt.signed:
        return _Result("nan", True)
    if isinstance(value, float):  # ±inf
        if saturate:
            return _finish(fmt, negative, fmt.max_code, subnormals)
        return _infinity(fmt, negative, subnormals)
    code = _round_magnitude(fmt, abs(value), rounding, negative, random, random_bits)
    if code > fmt.max_code:
        if saturate or _overflow_is_max(rounding, negative):
            return _finish(fmt, negative, fmt.max_code, subnormals)
        return _infinity(fmt, negative, subnormals)
    return _finish(fmt, negative, code, subnormals)


def _finish(fmt: Format, negative: bool, code: int, subnormals: bool) -> _Result:
    """A finite result: flush subnormals if asked, and drop the sign of zero where there is no -0."""
    if not subnormals and fmt.has_zero and code < (1 << fmt.mantissa_bits):
        code = 0
    if code == 0 and not fmt.has_negative_zero:
        negative = False
    return _Result("num", negative, code)


def _encode_result(fmt: Format, result: _Result) -> int:
    if result.kind == "nan":
        if fmt.nan_code is None:  # FP6/FP4: ml_dtypes' zero code with the sign inverted
            return 0 if result.negative else fmt.sign_mask
        if fmt.specials == "fnuz" or not fmt.signed:
            return fmt.nan_code
        return fmt.nan_code | (fmt.sign_mask if result.negative else 0)
    sign = fmt.sign_mask if result.negative else 0
    if result.kind == "inf":
        assert fmt.inf_code is not None
        return fmt.inf_code | sign
    return result.magnitude | sign


def _result_float(fmt: Format, result: _Result) -> float:
    if result.kind == "nan":
        return math.nan
    magnitude = math.inf if result.kind == "inf" else float(_magnitude_fraction(fmt, result.magnitude))
    return -magnitude if result.negative else magnitude


def round_scalar(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: bool = False,
    subnormals: bool = True,
    random: int | None = None,
    random_bits: int = 32,
) -> float:
    """Round one number into a format, exactly, and return the result's value.

    NaN converts to NaN (also for formats without NaN: see `encode_scalar` for their code).
    Infinity converts to ±max if ``saturate``, else to ±inf if the format has it, else NaN if it
    has NaN, else ±max. A finite input rounds to one of its two neighbours by ``rounding``; a result
    beyond max overflows as described in the module docstring.

    Args:
      x: A Python float or int, a `fractions.Fraction`, or a NumPy / ml_dtypes float scalar of at
        most 64 bits (all convert exactly).
      fmt: Anything `fpemu.get_format` accepts.
      rounding: One of `ROUNDING_MODES`.
      saturate: Clamp every overflow (and infinite inputs) to ±max.
      subnormals: If False, nonzero results below the smallest normal become zero of the same sign.
      random: For ``rounding="stochastic"`` only: the ``random_bits`` random bits of this element,
        an int in ``[0, 2**random_bits)``.
      random_bits: The number ``k`` of random bits, 1 to 64.

    Returns:
      The exact result as a Python float: NaN as ``nan``, ``-0.0`` where the format keeps it.

    Raises:
      ValueError: for an unknown rounding mode (listing the valid ones), or a missing or
        out-of-range ``random`` in stochastic mode.

    Example:
      >>> round_scalar(1.0625, "e4m3fn"), round_scalar(1.0625, "e4m3fn", rounding="nearest_away")
      (1.0, 1.125)
      >>> round_scalar(float("inf"), "e4m3fn", saturate=True)
      448.0
      >>> round_scalar(0.75, "e8m0fnu")  # E8M0 ties go away from zero
      1.0
      >>> round_scalar(1.25, "e2m1fn", rounding="stochastic", random=2, random_bits=2)  # f = 1/2
      1.5
    """
    fmt = get_format(fmt)
    _check_rounding(rounding)
    random_bits = _check_random_bits(random_bits)
    random = _check_random_scalar(rounding, random, random_bits)
    return _result_float(fmt, _round(x, fmt, rounding, saturate, subnormals, random, random_bits))


def encode_scalar(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: bool = False,
    subnormals: bool = True,
    random: int | None = None,
    random_bits: int = 32,
) -> int:
    """Round one number into a format, exactly, and return the code (sign | exponent | mantissa).

    Takes the same arguments as `round_scalar`. NaN results encode as ``nan_code | sign`` in
    signed ``"ieee"`` and ``"fn"`` formats (the sign of the input), as ``nan_code`` in ``"fnuz"``
    and unsigned formats, and, in formats without NaN, as the zero code with the sign bit inverted
    (``+NaN -> sign_mask``, ``-NaN -> 0``), matching ml_dtypes.

    Example:
      >>> hex(encode_scalar(-2.0**-10, "e4m3fn")), hex(encode_scalar(-2.0**-20, "e4m3fnuz"))
      ('0x80', '0x0')
      >>> hex(encode_scalar(float("nan"), "e2m1fn"))
      '0x8'
    """
    fmt = get_format(fmt)
    _check_rounding(rounding)
    random_bits = _check_random_bits(random_bits)
    random = _check_random_scalar(rounding, random, random_bits)
    return _encode_result(fmt, _round(x, fmt, rounding, saturate, subnormals, random, random_bits))


def decode_scalar(code: int, fmt: Any) -> float:
    """The exact value of any code of a format, as a Python float.

    NaN codes decode to ``nan`` (fnuz's ``0x80...`` included), infinity codes to ``±inf``, the
    negative-zero code to ``-0.0``. Unsigned formats have no sign bit.

    Raises:
      ValueError: if ``code`` is not in ``[0, 2**fmt.bits)``.

    Example:
      >>> decode_scalar(0x7E, "e4m3fn"), decode_scalar(0x80, "e4m3fnuz"), decode_scalar(0xFC, "e5m2")
      (448.0, nan, -inf)
    """
    fmt = get_format(fmt)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)):
        raise ValueError(f"code must be an int, got {type(code).__name__} {code!r}")
    code = int(code)
    if not 0 <= code < fmt.num_codes:
        raise ValueError(f"code must be in [0, 2**{fmt.bits}) for {fmt.name}, got {code}")
    negative = bool(code & fmt.sign_mask)
    magnitude = code & ~fmt.sign_mask
    m = fmt.mantissa_bits
    all_ones_exponent = (1 << fmt.exponent_bits) - 1
    if fmt.specials == "ieee" and magnitude >> m == all_ones_exponent:
        if magnitude & ((1 << m) - 1):
            return math.nan
        return -math.inf if negative else math.inf
    if fmt.specials == "fn" and magnitude == (1 << (fmt.exponent_bits + m)) - 1:
        return math.nan
    if fmt.specials == "fnuz" and code == fmt.sign_mask:
        return math.nan
    value = float(_magnitude_fraction(fmt, magnitude))
    return -value if negative else value


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


def _is_narrow_input(dtype: np.dtype) -> bool:
    """Whether every value of dtype is a float32 value (so float64 arithmetic on it stays exact)."""
    return dtype.itemsize <= 4 if dtype.kind == "f" else dtype.itemsize <= 2


def _vector_exact(fmt: Format) -> bool:
    # Midpoints need one bit below the smallest subnormal and max + ulp must be finite in float64.
    return fmt.bits <= _VECTOR_MAX_BITS and fmt.min_subnormal_exponent - 1 >= -1074 and fmt.emax + 1 <= 1023


def _random_array(random: Any, shape: tuple[int, ...], random_bits: int) -> np.ndarray:
    if random is None:
        raise ValueError("rounding='stochastic' needs random: one non-negative integer per element")
    random = np.asarray(random)
    if random.dtype.kind not in "ui":
        raise ValueError(f"random must be an array of unsigned integers, got dtype {random.dtype.name}")
    if random.shape != shape:
        raise ValueError(f"random must have the shape of x, {shape}, got {random.shape}")
    if random.dtype.kind == "i" and random.size and random.min() < 0:
        raise ValueError("random must be non-negative")
    random = random.astype(np.uint64)
    if random_bits < 64 and random.size and int(random.max()) >> random_bits:
        raise ValueError(f"random must be reduced to random_bits={random_bits} bits, got {int(random.max())}")
    return random


@functools.lru_cache(maxsize=64)
def _grid(fmt: Format) -> np.ndarray:
    """The finite magnitudes as float64, followed by the first value beyond max."""
    grid = [float(v) for v in _values_tuple(fmt)]
    grid.append(grid[-1] + math.ldexp(1.0, _top_ulp_exponent(fmt)))
    return np.array(grid, dtype=np.float64)


def _round_vector(
    x: np.ndarray, fmt: Format, rounding: str, saturate: bool, subnormals: bool, random: Any, random_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) for a float32-or-narrower array and a format with `_vector_exact`."""
    grid = _grid(fmt)
    max_code = fmt.max_code
    m = fmt.mantissa_bits
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises FE_INVALID; it stays NaN
        x64 = x.astype(np.float64)
    negative = np.signbit(x64)
    a = np.abs(x64)
    is_nan = np.isnan(a)
    is_inf = np.isinf(a)
    is_zero = a == 0
    finite = ~(is_nan | is_inf | is_zero)

    a_safe = np.where(finite, a, grid[0])
    idx = np.searchsorted(grid, a_safe, side="right").astype(np.int64) - 1
    below = idx < 0  # only formats without zero: below the smallest value
    beyond = idx > max_code  # at or above max + ulp: beyond max whatever the mode
    code_lo = np.clip(idx, 0, max_code)
    lo = grid[code_lo]
    quantum = grid[code_lo + 1] - lo  # a power of two, exactly
    in_grid = finite & ~below & ~beyond
    remainder = np.where(in_grid, a_safe - lo, 0.0)  # exact: fewer than 53 significant bits
    inexact = remainder != 0
    odd_lo = (code_lo & 1) == 1
    if rounding == "nearest_even":
        twice = 2.0 * remainder
        tie_up = np.True_ if m == 0 else odd_lo
        up = (twice > quantum) | ((twice == quantum) & tie_up)
    elif rounding == "nearest_away":
        up = 2.0 * remainder >= quantum
    elif rounding == "toward_zero":
        up = np.zeros_like(inexact)
    elif rounding == "toward_positive":
        up = ~negative
    elif rounding == "toward_negative":
        up = negative
    elif rounding == "to_odd":
        up = ~odd_lo
    else:  # stochastic
        rand = _random_array(random, x.shape, random_bits)
        # floor(f * 2**k) with f = remainder / quantum: scaling by powers of two is exact, and a
        # quotient that underflows is below 1, where the floor is 0 either way.
        threshold = np.floor(remainder * math.ldexp(1.0, random_bits) / quantum).astype(np.uint64)
        mask = np.uint64((1 << random_bits) - 1)
        up = rand > mask - threshold  # floor(f * 2**k) + r >= 2**k, without overflowing uint64
    code = code_lo + (up & inexact)
    code = np.where(beyond, max_code + 1, code)
    code = np.where(below, 0, code)

    over = finite & (code > max_code)
    if rounding in ("toward_zero", "to_odd"):
        over_to_max = over
    elif rounding == "toward_positive":
        over_to_max = over & negative
    elif rounding == "toward_negative":
        over_to_max = over & ~negative
    else:
        over_to_max = np.zeros_like(over)
    if saturate:
        over_to_max = over
    over_to_inf = over & ~over_to_max
    code = np.minimum(code, max_code)

    code = np.where(is_zero, 0, code)
    code = np.where(is_inf, max_code, code)  # saturated infinities; the rest are overwritten below
    to_infinity = over_to_inf | (is_inf & ~np.bool_(saturate))
    if not subnormals and fmt.has_zero:
        code = np.where(code < (1 << m), 0, code)

    result_nan = is_nan.copy()
    if not fmt.has_zero:
        result_nan |= is_zero
    if not fmt.signed:
        result_nan |= negative & ~is_zero
    if fmt.has_inf:
        result_inf = to_infinity & ~result_nan
    else:
        result_inf = np.zeros_like(to_infinity)
        if fmt.has_nan:
            result_nan |= to_infinity
    # (without inf or NaN, "infinity" is ±max, already in code)

    number = ~(result_nan | result_inf)
    result_negative = negative.copy()
    if not fmt.has_negative_zero:
        result_negative &= ~(number & (code == 0))

    sign = np.where(result_negative, fmt.sign_mask, 0)
    codes = np.where(number, code | sign, 0)
    if fmt.has_inf:
        codes = np.where(result_inf, fmt.inf_code | sign, codes)
    if fmt.nan_code is None:
        nan_codes = np.where(negative, 0, fmt.sign_mask)
    elif fmt.specials == "fnuz" or not fmt.signed:
        nan_codes = np.full(x.shape, fmt.nan_code)
    else:
        nan_codes = fmt.nan_code | sign
    codes = np.where(result_nan, nan_codes, codes).astype(fmt.code_dtype)

    magnitude = np.where(number, grid[code], np.inf)
    out = np.where(result_negative, -magnitude, magnitude)
    out = np.where(result_nan, np.nan, out)
    return codes, out.astype(np.float64)


def _round_loop(
    x: np.ndarray, fmt: Format, rounding: str, saturate: bool, subnormals: bool, random: Any, random_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    rand = _random_array(random, x.shape, random_bits).ravel() if rounding == "stochastic" else None
    codes = np.empty(x.size, dtype=fmt.code_dtype)
    out = np.empty(x.size, dtype=np.float64)
    for i, element in enumerate(x.ravel()):
        r = int(rand[i]) if rand is not None else 0
        result = _round(element, fmt, rounding, saturate, subnormals, r, random_bits)
        codes[i] = _encode_result(fmt, result)
        out[i] = _result_float(fmt, result)
    return codes.reshape(x.shape), out.reshape(x.shape)


def _round_any(
    x: Any, fmt: Any, rounding: str, saturate: bool, subnormals: bool, random: Any, random_bits: int
) -> tuple[np.ndarray, np.ndarray]:
    fmt = get_format(fmt)
    _check_rounding(rounding)
    random_bits = _check_random_bits(random_bits)
    x = _input_array(x)
    if _vector_exact(fmt) and _is_narrow_input(x.dtype):
        return _round_vector(x, fmt, rounding, saturate, subnormals, random, random_bits)
    return _round_loop(x, fmt, rounding, saturate, subnormals, random, random_bits)


def round_array(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: bool = False,
    subnormals: bool = True,
    random: Any = None,
    random_bits: int = 32,
) -> np.ndarray:
    """`round_scalar` over an array, returning float64 values of the same shape.

    Vectorised with float64 NumPy arithmetic when that is exact: formats of at most 16 bits
    (whose midpoints fit in float64) and inputs of float32 or narrower (float16, bfloat16 and the
    other ml_dtypes floats). For wider formats (fp32, tf32, fp64) and float64 inputs it loops over
    the scalar oracle: exact, but about 10 µs per element.

    Args:
      x: An array of float16, float32, float64 or an ml_dtypes float type.
      fmt, rounding, saturate, subnormals, random_bits: as in `round_scalar`.
      random: For ``rounding="stochastic"``: an unsigned-integer array of x's shape, each element
        already reduced to ``random_bits`` bits.

    Raises:
      ValueError: for another input dtype, an unknown rounding mode, or missing or out-of-range
        random bits.

    Example:
      >>> round_array(np.array([0.3, -7.0, np.inf], np.float32), "e2m1fn").tolist()
      [0.5, -6.0, 6.0]
    """
    return _round_any(x, fmt, rounding, saturate, subnormals, random, random_bits)[1]


def encode_array(
    x: Any,
    fmt: Any,
    rounding: Rounding = "nearest_even",
    saturate: bool = False,
    subnormals: bool = True,
    random: Any = None,
    random_bits: int = 32,
) -> np.ndarray:
    """`encode_scalar` over an array, returning codes of dtype ``fmt.code_dtype``.

    Same arguments, same exactness and fallback as `round_array`.

    Example:
      >>> encode_array(np.array([448.0, 464.0, 464.0625, -np.inf], np.float32), "e4m3fn").tolist()
      [126, 126, 127, 255]
    """
    return _round_any(x, fmt, rounding, saturate, subnormals, random, random_bits)[0]
