"""Positions on a format's ordered grid of values: representability, codes of values, ulp distances.

Computed exactly in float64 from each value's binade and its multiple of the binade's spacing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fpemu._args import format_arg
from fpemu._core.format import Format
from fpemu.testing._bits import as_array, code_hex, widen

__all__ = [
    "CodeRange",
    "binade_position",
    "boundary_magnitudes",
    "checked_code_range",
    "code_range",
    "code_text",
    "finite_code",
    "magnitude_at_least",
    "magnitude_at_most",
    "next_magnitude",
    "position_parts",
    "representable",
    "spacing",
    "ulp_distance",
]


def binade_position(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """For magnitudes ``a`` (float64, >= 0): the binade of each (clamped below at emin) and
    ``a / 2**(binade - mantissa_bits)``, the magnitude in units of the binade's spacing (exact)."""
    with np.errstate(invalid="ignore"):
        _, exponent = np.frexp(np.where(np.isfinite(a), a, 0.0))
    e = exponent.astype(np.int64) - 1  # floor(log2(a)) for a > 0
    binade = np.maximum(np.where(a == 0, fmt.emin, e), fmt.emin)
    scaled = np.ldexp(a, (fmt.mantissa_bits - binade).astype(np.int32))
    return binade, scaled


def spacing(a: float, fmt: Format) -> float:
    """The distance between neighbouring values of ``fmt`` at magnitude ``a`` (>= 0, finite): the
    spacing of ``a``'s binade, clamped below at the subnormal spacing; past max, the grid continues."""
    binade, _ = binade_position(np.array(a, np.float64), fmt)
    return math.ldexp(1.0, int(binade) - fmt.mantissa_bits)


def next_magnitude(fmt: Format, code: int) -> float:
    """The value of magnitude code ``code + 1``; past max, the grid continues with the top spacing."""
    if code < fmt.max_code:
        return fmt.magnitude_value(code + 1)
    return fmt.max + spacing(fmt.max, fmt)


def magnitude_at_most(fmt: Format, x: float, top: int) -> int:
    """The largest magnitude code ``c <= top`` whose value is ``<= x``, or -1 if there is none."""
    if fmt.magnitude_value(0) > x:
        return -1
    lo, hi = 0, top
    while lo < hi:  # magnitude_value increases with the code
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fmt.magnitude_value(mid) <= x else (lo, mid - 1)
    return lo


def magnitude_at_least(fmt: Format, x: float, top: int) -> int:
    """The smallest magnitude code ``c <= top`` whose value is ``>= x``, or ``top + 1`` if there is none."""
    if fmt.magnitude_value(top) < x:
        return top + 1
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fmt.magnitude_value(mid) >= x else (mid + 1, hi)
    return lo


@dataclasses.dataclass(frozen=True)
class CodeRange:
    """The codes of a format whose values lie in a range: an interval of magnitude codes per sign
    (None where no value of that sign does), and which infinities lie in it."""

    positive: tuple[int, int] | None
    negative: tuple[int, int] | None  # magnitudes of negative values (two's complement: up to neg_max_code)
    gap: int | None  # without subnormals: the first normal code (magnitudes 1 .. gap - 1 are left out)
    pos_inf: bool
    neg_inf: bool


def _negative_zero(x: float) -> bool:
    return x == 0 and math.copysign(1.0, x) < 0


def _side(fmt: Format, top: int, low: float, high: float, zero_ok: bool, gap: int | None) -> tuple[int, int] | None:
    """Magnitude codes in ``[0, top]`` whose values lie in ``[low, high]``, zero only if ``zero_ok``."""
    if high < 0:
        return None
    lo = magnitude_at_least(fmt, low, top) if low > 0 else 0
    hi = magnitude_at_most(fmt, high, top)
    if lo == 0 and fmt.has_zero and not zero_ok:
        lo = 1
    if gap is not None:  # no subnormals: magnitudes 1 .. gap - 1 are out
        lo = gap if 1 <= lo < gap else lo
        hi = 0 if 1 <= hi < gap else hi
    return (lo, hi) if lo <= hi else None


def code_range(
    fmt: Format,
    *,
    subnormals: bool = True,
    negative: bool = True,
    min_value: float | None = None,
    max_value: float | None = None,
    min_magnitude: float | None = None,
    max_magnitude: float | None = None,
) -> CodeRange:
    """The finite codes of ``fmt`` whose values ``v`` satisfy ``min_value <= v <= max_value`` and
    ``min_magnitude <= |v| <= max_magnitude`` (None: no bound), and which infinities do.

    Zeros compare by sign, as in hypothesis: ``min_value=0.0`` leaves out -0.0 and
    ``max_value=-0.0`` leaves out +0.0; a ``min_magnitude`` above 0 leaves out both.
    """
    inf = math.inf
    gap = (1 << fmt.mantissa_bits) if not subnormals and fmt.has_subnormals else None
    no_small = not min_magnitude
    top_magnitude = inf if max_magnitude is None else max_magnitude
    low = max(0.0 if min_value is None else min_value, min_magnitude or 0.0)
    high = min(inf if max_value is None else max_value, top_magnitude)
    zero_ok = (
        no_small
        and (min_value is None or min_value <= 0)
        and (max_value is None or (max_value >= 0 and not _negative_zero(max_value)))
    )
    positive = _side(fmt, fmt.max_code, low, high, zero_ok, gap)
    negative_side = None
    if fmt.signed and negative:
        low = max(0.0 if max_value is None else -max_value, min_magnitude or 0.0)
        high = min(inf if min_value is None else -min_value, top_magnitude)
        zero_ok = (
            no_small
            and fmt.has_negative_zero
            and (min_value is None or min_value < 0 or _negative_zero(min_value))
            and (max_value is None or max_value >= 0)
        )
        negative_side = _side(fmt, fmt.neg_max_code, low, high, zero_ok, gap)
    unbounded = top_magnitude == inf
    return CodeRange(
        positive=positive,
        negative=negative_side,
        gap=gap,
        pos_inf=fmt.has_inf and unbounded and (max_value is None or max_value == inf),
        neg_inf=fmt.has_inf and fmt.signed and negative and unbounded and (min_value is None or min_value == -inf),
    )


def _bound_arg(value: Any, name: str, magnitude: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number or None, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (magnitude and value < 0):
        raise ValueError(f"{name} must be {'a non-negative number' if magnitude else 'a number'}, got {value!r}")
    return value


def checked_code_range(fmt: Format, subnormals: bool, negative: bool, bounds: dict[str, Any]) -> CodeRange:
    """The `code_range` of user bounds, checked: each a number, each pair ordered, some value inside."""
    b = {name: _bound_arg(v, name, name.endswith("magnitude")) for name, v in bounds.items()}
    for low, high in (("min_value", "max_value"), ("min_magnitude", "max_magnitude")):
        lo, hi = b[low], b[high]
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"{low} must be <= {high}, got {low}={lo!r}, {high}={hi!r}")
    found = code_range(fmt, subnormals=subnormals, negative=negative, **b)
    if found.positive is None and found.negative is None:
        given = ", ".join(f"{name}={v!r}" for name, v in b.items() if v is not None)
        raise ValueError(
            f"no finite value of {fmt.name} lies in the range {given or '(unbounded)'} (subnormals={subnormals}, "
            f"negative={negative}); its values run from {fmt.min!r} to {fmt.max!r}, smallest magnitude "
            f"{fmt.min_subnormal!r}"
        )
    return found


def finite_code(fmt: Format, magnitude: int, negative: bool) -> int:
    """The code of a finite value from its magnitude code and sign (-0 only where the format has it)."""
    if not negative or (magnitude == 0 and not fmt.has_negative_zero):
        return magnitude
    return (1 << fmt.bits) - magnitude if fmt.twos_complement else magnitude | fmt.sign_mask


def boundary_magnitudes(
    fmt: Format, found: CodeRange, lo: int, hi: int, subnormals: bool
) -> list[tuple[int, bool | None]]:
    """(magnitude code, sign or None for either) of the boundaries inside the range, simplest first."""
    first_normal = 1 << fmt.mantissa_bits
    candidates: list[tuple[int, bool | None]] = [(lo, None)]
    for ends, negative in ((found.positive, False), (found.negative, True)):
        if ends is not None:
            candidates += [(ends[1], negative), (ends[0], negative)]  # the values nearest the range's ends
    if fmt.has_subnormals and subnormals:
        candidates += [(1, None), (first_normal - 1, None)]  # the smallest and largest subnormal
    candidates += [(first_normal, None), (fmt.max_code, None), (fmt.neg_max_code, True)]
    edges: list[tuple[int, bool | None]] = []
    for magnitude, sign in candidates:
        side = found.negative if sign else found.positive
        if sign is not None and (side is None or not side[0] <= magnitude <= side[1]):
            continue
        drawable = lo <= magnitude <= hi and (found.gap is None or not 0 < magnitude < found.gap)
        if drawable and (magnitude, sign) not in edges:
            edges.append((magnitude, sign))
    return edges


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
      ValueError: if ``a`` and ``b`` do not broadcast together (naming both shapes).

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
    a64, b64 = widen(as_array(a, "a")), widen(as_array(b, "b"))
    try:
        a64, b64 = np.broadcast_arrays(a64, b64)
    except ValueError:
        raise ValueError(
            f"ulp_distance: a and b must broadcast together, got shapes {a64.shape} and {b64.shape}"
        ) from None
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
