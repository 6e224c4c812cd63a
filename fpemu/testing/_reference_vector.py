"""The array path of `fpemu.testing.reference`: the scalar oracle's semantics in float64 NumPy.

Exact where it is used: formats of at most 16 bits (whose midpoints and ``max + ulp`` are float64
values) and inputs of float32 or narrower, so every difference, quotient by a power of two and
comparison below is exact. Shares no code with the conversion engine.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from fpemu._core.format import Format
from fpemu.testing._reference_exact import Options, top_code, values_tuple

VECTOR_MAX_BITS = 16  # the float64 array path is exact for formats up to this width


def vector_exact(fmt: Format) -> bool:
    # Midpoints need one bit below the smallest subnormal and max + ulp must be finite in float64.
    return fmt.bits <= VECTOR_MAX_BITS and fmt.min_subnormal_exponent - 1 >= -1074 and fmt.emax + 1 <= 1023


def is_narrow_input(dtype: np.dtype) -> bool:
    """Whether every value of dtype is a float32 value (so float64 arithmetic on it stays exact)."""
    return dtype.itemsize <= 4 if dtype.kind == "f" else dtype.itemsize <= 2


def random_array(random: Any, shape: tuple[int, ...], random_bits: int) -> np.ndarray:
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


@functools.lru_cache(maxsize=128)
def _grid(fmt: Format) -> np.ndarray:
    """The finite magnitudes (codes 0..top_code) as float64, followed by the first value beyond them."""
    grid = [float(v) for v in values_tuple(fmt)]
    top = top_code(fmt)
    ulp_exponent = (top >> fmt.mantissa_bits) - fmt.bias - fmt.mantissa_bits
    if fmt.has_zero and top >> fmt.mantissa_bits == 0:  # no exponent field: every value a subnormal
        ulp_exponent = fmt.min_subnormal_exponent
    grid.append(grid[-1] + math.ldexp(1.0, ulp_exponent))
    return np.array(grid, dtype=np.float64)


def _stochastic_up(remainder, quantum, random, opts: Options) -> np.ndarray:
    """``T + r >= 2**k`` with ``T`` = ``2**k * remainder / quantum`` rounded to an integer by the variant."""
    k = opts.random_bits
    rand = random_array(random, remainder.shape, k)
    # 2**k * f: scaling by powers of two is exact, and a quotient that underflows is below 1, where
    # the floor is 0 and the fraction is below one half either way.
    scaled = remainder * math.ldexp(1.0, k) / quantum
    floor = np.floor(scaled)
    frac = scaled - floor
    odd = np.fmod(floor, 2.0) == 1.0
    variant = opts.stochastic_variant
    if variant == "floor":
        carry = np.zeros(scaled.shape, bool)
    elif variant == "nearest_away":
        carry = frac >= 0.5
    elif variant == "nearest_even":
        carry = (frac > 0.5) | ((frac == 0.5) & odd)
    else:  # nearest_odd
        carry = (frac > 0.5) | ((frac == 0.5) & ~odd)
    limit = np.uint64((1 << k) - 1) - floor.astype(np.uint64)  # T + r >= 2**k, without overflowing uint64
    return (rand > limit) | (carry & (rand == limit))


def round_vector(x: np.ndarray, fmt: Format, random: Any, opts: Options) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) for a float32-or-narrower array and a format with `vector_exact`."""
    grid = _grid(fmt)
    m = fmt.mantissa_bits
    rounding, saturate = opts.rounding, opts.saturate
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises FE_INVALID; it stays NaN
        x64 = x.astype(np.float64)
    negative = np.signbit(x64)
    a = np.abs(x64)
    is_nan = np.isnan(a)
    is_inf = np.isinf(a)
    is_zero = a == 0
    finite = ~(is_nan | is_inf | is_zero)
    # The largest magnitude code of each element's sign (two's complement: one more below zero).
    max_code = np.where(negative & fmt.twos_complement, fmt.neg_max_code, fmt.max_code)

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
        tie_up = np.True_ if m == 0 and opts.exponent_ties == "away" else odd_lo
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
        up = _stochastic_up(remainder, quantum, random, opts)
    code = code_lo + (up & inexact)
    code = np.where(beyond, max_code + 1, code)
    code = np.where(below, 0, code)

    over = finite & (code > max_code)
    if saturate in (True, "sat_finite", "sat_propagate"):
        over_to_max = over
    elif rounding in ("toward_zero", "to_odd"):
        over_to_max = over if (rounding == "toward_zero" or saturate != "ovf_inf") else np.zeros_like(over)
    elif rounding == "toward_positive":
        over_to_max = over & negative
    elif rounding == "toward_negative":
        over_to_max = over & ~negative
    else:
        over_to_max = np.zeros_like(over)
    over_to_inf = over & ~over_to_max
    code = np.minimum(code, max_code)

    code = np.where(is_zero, 0, code)
    code = np.where(is_inf, max_code, code)  # saturated infinities; the rest are overwritten below
    inf_to_max = saturate in (True, "sat_finite") or (saturate == "sat_propagate" and not fmt.has_inf)
    to_infinity = over_to_inf | (is_inf & ~np.bool_(inf_to_max))
    if not opts.subnormals and fmt.has_zero:
        code = np.where(code < (1 << m), 0, code)

    result_nan = is_nan.copy()
    if not fmt.has_zero:
        result_nan |= is_zero
    if fmt.has_inf:
        result_inf = to_infinity & ~result_nan
    else:
        result_inf = np.zeros_like(to_infinity)
        if fmt.has_nan:
            result_nan |= to_infinity
    # (without inf or NaN, "infinity" is ±max, already in code)
    if not fmt.signed:
        negative_input = negative & ~is_zero & ~is_nan
        if isinstance(saturate, str) and fmt.has_zero:  # IEEE P3109: saturate to 0, the lowest value
            if saturate == "ovf_inf":
                to_zero = (finite & (code == 0)) | (finite & np.bool_(rounding in ("toward_zero", "toward_positive")))
            else:
                to_zero = np.ones_like(negative_input)
            code = np.where(negative_input & to_zero, 0, code)
            result_inf &= ~(negative_input & to_zero)
            result_nan |= negative_input & ~to_zero
        else:
            result_nan |= negative_input

    number = ~(result_nan | result_inf)
    result_negative = negative.copy()
    if not fmt.has_negative_zero:
        result_negative &= ~(number & (code == 0))

    sign = np.where(result_negative, fmt.sign_mask, 0)
    codes = np.where(number, code | sign, 0)
    if fmt.twos_complement:
        codes = np.where(number & result_negative, fmt.num_codes - code, codes)
    if fmt.has_inf:
        codes = np.where(result_inf, fmt.inf_code | sign, codes)
    if fmt.nan_code is None:
        nan_codes = np.where(negative | fmt.twos_complement, 0, fmt.sign_mask)
    elif fmt.specials in ("fnuz", "p3109") or not fmt.signed:
        nan_codes = np.full(x.shape, fmt.nan_code)
    else:
        nan_codes = fmt.nan_code | sign
    codes = np.where(result_nan, nan_codes, codes).astype(fmt.code_dtype)

    magnitude = np.where(number, grid[code], np.inf)
    out = np.where(result_negative, -magnitude, magnitude)
    out = np.where(result_nan, np.nan, out)
    return codes, out.astype(np.float64)
