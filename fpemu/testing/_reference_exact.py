"""The scalar oracle of `fpemu.testing.reference`: one number, exact rational arithmetic.

Written from the semantics alone (docs/semantics.md and IEEE P3109's Project/Saturate), sharing no
code with the conversion engine: it reads only the encoding facts of a `Format`.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np

from fpemu._core.format import Format


class Options(NamedTuple):
    """Everything that decides a rounding, checked by the public functions."""

    rounding: str = "nearest_even"
    saturate: bool | str = False  # False, True, or "sat_finite", "sat_propagate", "ovf_inf" (IEEE P3109)
    subnormals: bool = True
    random_bits: int = 32
    stochastic_variant: str = "floor"
    exponent_ties: str = "away"


def pow2(exponent: int) -> Fraction:
    return Fraction(1 << exponent) if exponent >= 0 else Fraction(1, 1 << -exponent)


def _floor_log2(a: Fraction) -> int:
    """``floor(log2(a))`` for a positive Fraction, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if a < pow2(e) else e


def magnitude_fraction(fmt: Format, code: int) -> Fraction:
    """The exact value of a finite magnitude code, from the definition of the encoding.

    Two's-complement formats also have the magnitude ``max_code + 1`` (their most negative value).
    """
    m = fmt.mantissa_bits
    exponent_field = code >> m
    mantissa = code & ((1 << m) - 1)
    if fmt.has_zero and exponent_field == 0:
        return mantissa * pow2(fmt.emin - m)
    return ((1 << m) + mantissa) * pow2(exponent_field - fmt.bias - m)


def top_code(fmt: Format) -> int:
    """The largest finite magnitude code of either sign."""
    return fmt.max_code + 1 if fmt.twos_complement else fmt.max_code


@functools.lru_cache(maxsize=128)
def values_tuple(fmt: Format) -> tuple[Fraction, ...]:
    """Magnitudes of codes ``0..top_code(fmt)``."""
    return tuple(magnitude_fraction(fmt, code) for code in range(top_code(fmt) + 1))


def to_fraction(x: Any) -> Fraction | float:
    """A Fraction for finite x, or the float itself for NaN and ±inf (and -0.0, to keep its sign)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return Fraction(int(x))
    if isinstance(x, (complex, np.complexfloating)):
        raise TypeError(f"x must be a real number (round the real and imaginary parts separately), got {x!r}")
    if isinstance(x, np.longdouble) and np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant:
        raise ValueError("long double inputs cannot be converted to float exactly; pass a Fraction")
    xf = float(x)
    if math.isnan(xf) or math.isinf(xf) or (xf == 0.0 and math.copysign(1.0, xf) < 0):
        return xf
    return Fraction(xf)


def _to_integer(scaled: Fraction, variant: str) -> int:
    """``scaled >= 0`` rounded to an integer: the threshold of a stochastic variant."""
    n = math.floor(scaled)
    frac = scaled - n
    if variant == "floor" or frac == 0:
        return n
    half = Fraction(1, 2)
    if variant == "nearest_away":
        return n + (frac >= half)
    if frac != half:
        return n + (frac > half)
    return n + (n % 2 == 1 if variant == "nearest_even" else n % 2 == 0)


def round_magnitude(fmt: Format, a: Fraction, negative: bool, random: int, opts: Options) -> int:
    """The magnitude code that ``a > 0`` rounds to on the grid continued past the largest value
    (a code above ``max_code`` means beyond max)."""
    m = fmt.mantissa_bits
    emin = fmt.emin
    if not fmt.has_zero and a < pow2(emin):
        return 0  # no lower neighbour: the smallest value, in every mode
    e = _floor_log2(a)
    binade = max(e, emin) if fmt.has_zero else e
    quantum = pow2(binade - m)
    n = math.floor(a / quantum)
    # Magnitude codes count grid points: code = (binade - emin) * 2**m + n, less the implicit bit
    # where the lowest binade is normal. n == 2**(m+1) would be the next binade's first code.
    code_lo = ((binade - emin) << m) + n - (0 if fmt.has_zero else 1 << m)
    remainder = a - n * quantum
    if remainder == 0:
        return code_lo
    rounding = opts.rounding
    if rounding == "nearest_even":
        twice = 2 * remainder
        if twice != quantum:
            up = twice > quantum
        elif m == 0 and opts.exponent_ties == "away":
            up = True  # E8M0-like: the only significand bit is implicit; ml_dtypes ties away from zero
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
        k = opts.random_bits
        threshold = _to_integer((remainder / quantum) * (1 << k), opts.stochastic_variant)
        up = threshold + random >= (1 << k)
    else:  # pragma: no cover - validated by the callers
        raise AssertionError(rounding)
    return code_lo + int(up)


class Result(NamedTuple):
    kind: Literal["num", "inf", "nan"]
    negative: bool  # the sign of the result (for "nan": the sign of the NaN, see encode_result)
    magnitude: int = 0  # magnitude code, for kind "num"


def _largest(fmt: Format, negative: bool, opts: Options) -> Result:
    return finish(fmt, negative, fmt.neg_max_code if negative else fmt.max_code, opts)


def _infinity(fmt: Format, negative: bool, opts: Options) -> Result:
    """'Infinity': ±inf if the format has it, else NaN if it has NaN, else ±max."""
    if fmt.has_inf:
        return Result("inf", negative)
    if fmt.has_nan:
        return Result("nan", negative)
    return _largest(fmt, negative, opts)


def _overflow_is_max(opts: Options, negative: bool) -> bool:
    """Whether a finite result beyond max gives ±max (rather than "infinity")."""
    if opts.saturate in (True, "sat_finite", "sat_propagate"):
        return True
    rounding = opts.rounding
    if rounding == "to_odd":
        return opts.saturate != "ovf_inf"  # P3109's OvfInf lets round-to-odd overflow
    return rounding == "toward_zero" or rounding == ("toward_positive" if negative else "toward_negative")


def _unsigned_negative(fmt: Format, value: Fraction | float, random: int, opts: Options) -> Result:
    """A negative nonzero input (or -inf) into an unsigned format.

    fpemu (``saturate`` a bool) and formats without zero: NaN. IEEE P3109's saturation modes saturate
    it to the lowest value, 0: SatFinite and SatPropagate always; OvfInf when the rounded value is zero
    (-0), or for toward_zero and toward_positive of a finite value, NaN otherwise.
    """
    if isinstance(opts.saturate, bool) or not fmt.has_zero:
        return Result("nan", True)
    if opts.saturate in ("sat_finite", "sat_propagate"):
        return Result("num", False, 0)
    if isinstance(value, float):  # -inf under OvfInf
        return Result("nan", True)
    if opts.rounding in ("toward_zero", "toward_positive"):
        return Result("num", False, 0)
    code = round_magnitude(fmt, -value, True, random, opts)
    if finish(fmt, True, min(code, fmt.max_code), opts).magnitude == 0:
        return Result("num", False, 0)
    return Result("nan", True)


def round_result(x: Any, fmt: Format, random: int, opts: Options) -> Result:
    value = to_fraction(x)
    if isinstance(value, float):
        negative = math.copysign(1.0, value) < 0
        if math.isnan(value):
            return Result("nan", negative)
        if value == 0.0:  # -0.0
            value = Fraction(0)
    else:
        negative = value < 0
    if value == 0:
        if not fmt.has_zero:
            return Result("nan", negative)
        return finish(fmt, negative, 0, opts)
    if negative and not fmt.signed:
        return _unsigned_negative(fmt, value, random, opts)
    if isinstance(value, float):  # ±inf
        if opts.saturate in (True, "sat_finite") or (opts.saturate == "sat_propagate" and not fmt.has_inf):
            return _largest(fmt, negative, opts)
        return _infinity(fmt, negative, opts)
    code = round_magnitude(fmt, abs(value), negative, random, opts)
    if code > (fmt.neg_max_code if negative else fmt.max_code):
        if _overflow_is_max(opts, negative):
            return _largest(fmt, negative, opts)
        return _infinity(fmt, negative, opts)
    return finish(fmt, negative, code, opts)


def finish(fmt: Format, negative: bool, code: int, opts: Options) -> Result:
    """A finite result: flush subnormals if asked, and drop the sign of zero where there is no -0."""
    if not opts.subnormals and fmt.has_zero and code < (1 << fmt.mantissa_bits):
        code = 0
    if code == 0 and not fmt.has_negative_zero:
        negative = False
    return Result("num", negative, code)


def encode_result(fmt: Format, result: Result) -> int:
    if result.kind == "nan":
        if fmt.nan_code is None:  # FP6/FP4: ml_dtypes' zero code with the sign inverted; INT8: zero
            return 0 if result.negative or fmt.twos_complement else fmt.sign_mask
        if fmt.specials in ("fnuz", "p3109") or not fmt.signed:
            return fmt.nan_code  # a single NaN
        return fmt.nan_code | (fmt.sign_mask if result.negative else 0)
    sign = fmt.sign_mask if result.negative else 0
    if result.kind == "inf":
        assert fmt.inf_code is not None
        return fmt.inf_code | sign
    if fmt.twos_complement and result.negative and result.magnitude:
        return fmt.num_codes - result.magnitude
    return result.magnitude | sign


def result_float(fmt: Format, result: Result) -> float:
    if result.kind == "nan":
        return math.nan
    magnitude = math.inf if result.kind == "inf" else float(magnitude_fraction(fmt, result.magnitude))
    return -magnitude if result.negative else magnitude


def decode(code: int, fmt: Format) -> float:
    """The value of any code (checked to be in range by the caller)."""
    negative = bool(code & fmt.sign_mask)
    magnitude = code & ~fmt.sign_mask
    if fmt.twos_complement and negative:
        magnitude = fmt.num_codes - code
    m = fmt.mantissa_bits
    all_ones = (1 << (fmt.exponent_bits + m)) - 1
    specials = fmt.specials
    if specials == "ieee" and magnitude >> m == (1 << fmt.exponent_bits) - 1:
        if magnitude & ((1 << m) - 1):
            return math.nan
        return -math.inf if negative else math.inf
    if specials == "fn" and magnitude == all_ones:
        return math.nan
    if specials in ("fnuz", "p3109") and fmt.signed and code == fmt.sign_mask:
        return math.nan
    if specials == "p3109" and not fmt.signed and code == all_ones:
        return math.nan
    if specials == "p3109" and magnitude == (all_ones if fmt.signed else all_ones - 1):
        return -math.inf if negative else math.inf
    value = float(magnitude_fraction(fmt, magnitude))
    return -value if negative else value
