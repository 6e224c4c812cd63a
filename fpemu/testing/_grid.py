"""Positions on a format's ordered grid of values: representability, codes of values, ulp distances.

Computed exactly in float64 from each value's binade and its multiple of the binade's spacing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu._args import format_arg
from fpemu._core.format import Format
from fpemu.testing._bits import as_array, code_hex, widen

__all__ = ["binade_position", "code_text", "position_parts", "representable", "ulp_distance"]


def binade_position(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """For magnitudes ``a`` (float64, >= 0): the binade of each (clamped below at emin) and
    ``a / 2**(binade - mantissa_bits)``, the magnitude in units of the binade's spacing (exact)."""
    with np.errstate(invalid="ignore"):
        _, exponent = np.frexp(np.where(np.isfinite(a), a, 0.0))
    e = exponent.astype(np.int64) - 1  # floor(log2(a)) for a > 0
    binade = np.maximum(np.where(a == 0, fmt.emin, e), fmt.emin)
    scaled = np.ldexp(a, (fmt.mantissa_bits - binade).astype(np.int32))
    return binade, scaled


def position_parts(v: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each float64 value's position on the format's ordered grid of magnitudes, as an exact integer
    part (int64) plus a float64 part in ``[0, 2**(mantissa_bits + 1))``, and its sign.

    Magnitude code ``c`` sits at position ``c``; between two neighbours the position is linear in
    the value; past max the grid continues as if the format had more exponent range. The parts of
    ±inf and NaN are (0, inf) and (0, NaN).
    """
    a = np.abs(v)
    binade, scaled = binade_position(a, fmt)
    offset = 0 if fmt.has_zero else 1 << fmt.mantissa_bits
    whole = ((binade - fmt.emin) << fmt.mantissa_bits) - offset
    part = np.where(np.isinf(a), np.inf, np.where(np.isnan(a), np.nan, scaled))
    return np.where(np.isfinite(a), whole, 0), part, np.signbit(v)


def representable(v: np.ndarray, fmt: Format, subnormals: bool = True) -> np.ndarray:
    """Whether each float64 value is a value of ``fmt`` (NaN: iff the format has a NaN code)."""
    a = np.abs(v)
    negative = np.signbit(v)
    finite = np.isfinite(v)
    _, scaled = binade_position(a, fmt)
    in_range = a <= fmt.max
    if fmt.twos_complement:  # the most negative value, -(max + quantum), has no positive twin
        in_range |= v == fmt.min
    with np.errstate(invalid="ignore"):
        on_grid = finite & (a != 0) & (scaled == np.floor(scaled)) & in_range & (a >= fmt.min_subnormal)
    if not subnormals:
        on_grid &= a >= fmt.min_normal
    if not fmt.signed:
        on_grid &= ~negative
    zero = (a == 0) & fmt.has_zero & (~negative | fmt.has_negative_zero)
    infinity = np.isinf(v) & fmt.has_inf & (~negative | fmt.signed)
    nan = np.isnan(v) & fmt.has_nan
    return on_grid | zero | infinity | nan


def code_text(value: float, fmt: Format) -> str:
    """The code of a value in ``fmt`` in hex, or ``-`` if the format has no such value."""
    v = np.array(value, np.float64)
    if not representable(v, fmt):
        return "-"
    if math.isnan(value):
        return "nan"
    sign = fmt.sign_mask if math.copysign(1.0, value) < 0 else 0
    if math.isinf(value) and fmt.inf_code is not None:  # representable: the format has infinities
        return code_hex(fmt.inf_code | sign, fmt.bits)
    whole, part, _ = position_parts(v, fmt)
    magnitude = int(whole) + int(part)
    if fmt.twos_complement and sign:  # -k quanta is the code 2**bits - k
        return code_hex((1 << fmt.bits) - magnitude, fmt.bits)
    return code_hex(magnitude | sign, fmt.bits)


def ulp_distance(a: Any, b: Any, fmt: Any) -> Any:
    """The distance between ``a`` and ``b`` in units of ``fmt``'s spacing: the number of steps
    between them in the format's ordered list of finite values.

    Special values first: two NaNs are at distance 0 and a NaN is at distance ``inf`` from
    anything else; equal infinities are at distance 0, and an infinity is at distance ``inf`` from
    anything else. -0 and +0 are the same point (distance 0): compare bits with
    `assert_bit_exact` to catch a sign-of-zero difference.

    For values of ``fmt`` the distance is an integer: the number of codes between them, counted
    on the ordered list ``-max, ..., -min_subnormal, 0, min_subnormal, ..., max`` (one zero). For
    other values it is interpolated linearly between neighbouring values, so ``ulp_distance(x,
    quantize(x, fmt), fmt) <= 0.5`` after rounding to nearest. Past max the grid continues as if
    the format had more exponent range; for unsigned formats negative values are measured on the
    mirrored grid. Computed in float64 and exact while positions stay below 2**53 (every format
    except fp64 itself).

    Args:
      a, b: Arrays or numbers of any float (or integer) dtype; they broadcast together.
      fmt: Anything `fpemu.get_format` accepts.

    Returns:
      A float64 array of the broadcast shape (a NumPy scalar for scalar inputs).

    Raises:
      TypeError: for inputs that are not float, integer or bool, or a bad ``fmt``.

    Example:
      >>> float(ulp_distance(1.0, 1.25, "e4m3fn"))  # 1.0, 1.125, 1.25: two steps
      2.0
      >>> float(ulp_distance(-0.001953125, 0.001953125, "e4m3fn"))  # -min_subnormal, 0, +min_subnormal
      2.0
      >>> float(ulp_distance(1.0625, 1.0, "e4m3fn"))  # a midpoint is half a step away
      0.5
      >>> ulp_distance([float("nan"), float("nan"), float("inf")], [float("nan"), 1.0, float("inf")], "bf16").tolist()
      [0.0, inf, 0.0]
    """
    fmt = format_arg(fmt)
    a64, b64 = np.broadcast_arrays(widen(as_array(a, "a")), widen(as_array(b, "b")))
    whole_a, part_a, negative_a = position_parts(a64, fmt)
    whole_b, part_b, negative_b = position_parts(b64, fmt)
    with np.errstate(invalid="ignore"):
        # Same sign: the difference of the integer parts is exact, so the distance keeps its
        # fractional digits however far from zero both are. Opposite signs: the magnitudes add.
        same_sign = np.abs((whole_a - whole_b).astype(np.float64) + (part_a - part_b))
        opposite = whole_a.astype(np.float64) + whole_b.astype(np.float64) + part_a + part_b
        distance = np.where(negative_a == negative_b, same_sign, opposite)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    distance = np.where(nan_a | nan_b, np.inf, distance)
    distance = np.where((nan_a & nan_b) | (np.isinf(a64) & (a64 == b64)), 0.0, distance)
    return distance[()] if distance.ndim == 0 else distance
