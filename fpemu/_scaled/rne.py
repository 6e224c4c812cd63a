"""Round-to-nearest-even straight onto a block's scaled grid: the fast path of power-of-two block formats.

With a power-of-two scale ``2**k``, ``quantize(x / 2**k) * 2**k`` is the rounding of ``x`` to the grid
``{v * 2**k : v in the element format}``: a float format whose exponent range is the element's shifted
by ``k``. This module rounds float32 bit patterns to that grid directly, with the increment-and-
truncate method of `fpemu._engine.convert.round_narrow` (round at bit ``sh`` by ``(a + half - 1 + lsb) &
~mask``; a carry into the exponent field lands on the next binade), but with the grid's smallest
normal, smallest value and largest value per block instead of per format. One pass, no scaling in
and out. The generic path (`_bits.scale_down`, the core engine through `fpemu._ops.quantize`,
`_bits.scale_up`) computes the same bits for every mode; the tests check both against the reference.

Why a second nearest-even rounding is kept beside the core engine's (issue 11: "fold it, or keep it
with a bench number"): `round_narrow`'s rounding position and limits are static per format, so
folding means scaling down, rounding and scaling up, and that costs, for ``quantize_dequantize`` of
2**24 float32 values on the 2-core CPU (median ns/element, fused here / through the core engine,
interleaved in one run; bench/RESULTS_scaled.md): MXFP8 E4M3 3.21 / 4.44 (1.39x) with a fresh output
buffer and 1.19 / 2.42 (2.03x) donated; MXFP4 3.01 / 4.15 (1.38x) and 1.15 / 2.21 (1.92x); MXFP6
E3M2 3.27 / 4.33 (1.33x) and 1.12 / 2.14 (1.90x). Through the core engine, the MX target (fused
quantize-dequantize within 2x of plain `fpemu.quantize`, recorded at 1.2-1.5x) would come to its
limit (about 1.7-2.1x). bench/test_scaled.py's "scaled via engine" rows measure it again.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import Format
from fpemu._jax.elementwise import clamp, select
from fpemu._scaled import bits as _bits
from fpemu._scaled.bits import ABS, I32, IMPLICIT, INF, NAN, SIGN, U32


class Grid(NamedTuple):
    """Per-group constants of the scaled grid: the biased float32 exponent of its smallest normal, and
    the float32 bit patterns of its largest value, smallest value and half the smallest value."""

    e_min_normal: jnp.ndarray
    max: jnp.ndarray
    smallest: jnp.ndarray
    half_smallest: jnp.ndarray

    @classmethod
    def for_scale(cls, fmt: Format, k: jnp.ndarray, *, k_min: int) -> Grid:
        """The grid ``{v * 2**k : v in fmt}``, for scale exponents ``k >= k_min``."""
        up = lambda value: _bits.scale_up_constant(value, k, k_min)  # exact
        return cls(lax.add(k, I32(fmt.emin + 127)), up(fmt.max), up(fmt.min_subnormal), up(fmt.min_subnormal / 2))


def round_rne(
    b: jnp.ndarray, grid: Grid, fmt: Format, *, saturate: bool, negative_zero: bool, keep_inf: bool = False
) -> jnp.ndarray:
    """float32 bits of ``b`` rounded to nearest even on the scaled grid (``grid`` broadcasts against ``b``).

    Overflow: ``saturate`` gives ±max; otherwise "infinity" as `fpemu.quantize` defines it for ``fmt``
    (inf, else NaN, else ±max). NaN passes through; ±inf overflows, or stays ±inf with ``keep_inf``
    (P3109's ``"sat_propagate"``, for a format with infinity). ``negative_zero=False`` turns -0
    results into +0.
    """
    mb = fmt.mantissa_bits
    sign = lax.bitwise_and(b, U32(SIGN))
    a = lax.bitwise_and(b, U32(ABS))
    field = lax.convert_element_type(lax.shift_right_logical(a, U32(23)), I32)
    # biased exponent of the leading bit, also for subnormals (whose leading bit sits below 2**-126)
    lead = select(lax.eq(field, I32(0)), lax.sub(I32(9), lax.convert_element_type(lax.clz(a), I32)), field)
    # rounding position: (grid quantum exponent) - (input quantum exponent)
    sh = lax.add(lax.sub(lax.sub(lax.max(lead, grid.e_min_normal), I32(mb)), lax.max(lead, I32(1))), I32(23))
    sh = lax.convert_element_type(clamp(sh, 0, 23), U32)
    mask = lax.sub(lax.shift_left(U32(1), sh), U32(1))
    lsb = lax.bitwise_and(
        lax.shift_right_logical(lax.bitwise_or(a, U32(IMPLICIT)), sh), U32(1)
    )  # the implicit bit is the last kept bit at sh == 23
    res = lax.bitwise_and(lax.add(a, lax.shift_right_logical(lax.add(mask, lsb), U32(1))), lax.bitwise_not(mask))
    tiny = lax.lt(a, grid.smallest)  # below the grid's smallest value: 0 or that value (the tie goes to 0)
    res = select(tiny, select(lax.gt(a, grid.half_smallest), grid.smallest, U32(0)), res)
    if saturate or not fmt.has_nan:
        overflow = grid.max
    else:
        overflow = U32(INF) if fmt.has_inf else U32(NAN)
    res = select(lax.gt(res, grid.max), overflow, res)  # infinities land here too
    if keep_inf:
        res = select(lax.eq(a, U32(INF)), U32(INF), res)
    res = lax.bitwise_or(res, sign)
    if not negative_zero:
        res = select(lax.eq(res, U32(SIGN)), U32(0), res)
    return select(lax.gt(a, U32(INF)), b, res)  # NaN inputs come out unchanged


def clamped_applies(fmt: Format) -> bool:
    """Whether `round_clamped` rounds into ``fmt``: a float format with an exponent field and subnormals
    whose normal exponents lie within float32's (so that ``lax.reduce_precision`` with 8 exponent bits
    rounds its normal range) and whose smallest subnormal is at least ``2**-125`` (so that the quantum
    of its subnormal range and every multiple of it up to the smallest normal are normal float32
    constants, and every float32 subnormal lies below half of it)."""
    return (
        fmt.exponent_bits >= 1
        and fmt.has_subnormals
        and 1 <= fmt.mantissa_bits <= 22
        and fmt.min_subnormal_exponent >= -125
        and fmt.emax <= 127
        and fmt.max >= fmt.min_normal
    )


def round_clamped(b: jnp.ndarray, fmt: Format) -> jnp.ndarray:
    """float32 bits of ``b`` rounded to nearest even into ``fmt``, for ``b`` the bits of a float32 in
    ``[+0, fmt.max]`` (finite, non-negative, already clamped), where `clamped_applies`: the bits of
    ``round_rne(b, Grid.for_scale(fmt, 0, k_min=0), fmt, saturate=True, negative_zero=False)`` in a
    few operations (NVFP4's E4M3 block scales).

    Other inputs are outside the contract: NaN, infinities, negative values (-0 included) and values
    above ``fmt.max`` are not handled (no overflow, no sign). A result never exceeds ``fmt.max``,
    which is a value of the format, so nothing overflows; float32 subnormal inputs give +0.

    Why it is exact, on every backend:

    - ``x >= fmt.min_normal``: ``lax.reduce_precision(x, exponent_bits=8, mantissa_bits=m)`` rounds
      the significand to ``m`` bits, nearest even, with integer operations on the bit pattern (a
      carry into the exponent moves to the next binade); with 8 exponent bits it neither flushes
      nor clamps the exponent, and ``fmt``'s normal values are exactly float32's ``m``-bit values
      between ``2**emin`` and ``fmt.max``.
    - ``x < fmt.min_normal``: the grid is the multiples of the quantum ``q = fmt.min_subnormal``.
      ``x * (1 / q)`` is exact (a power of two, the product normal or zero; a float32 subnormal
      ``x`` may be flushed to 0 by XLA:CPU, or not on a GPU, and either way lies below ``q / 2``
      because ``q >= 2**-125``, so it rounds to 0); `lax.round` to nearest even gives the integer
      ``k <= 2**m``, and ``k * q`` is exact (a normal float32 or zero). The tie ``q / 2`` goes to 0,
      as it should; ``k = 2**m`` is the smallest normal, reached from below.

    Both branches are computed and one is selected by a comparison of bit patterns.
    """
    mb = fmt.mantissa_bits
    x = _bits.from_bits(b)
    normal = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=mb)
    quantum = np.float32(fmt.min_subnormal)
    assert float(quantum) == fmt.min_subnormal and float(np.float32(1 / fmt.min_subnormal)) == 1 / fmt.min_subnormal
    k = lax.round(lax.mul(x, np.float32(1 / fmt.min_subnormal)), lax.RoundingMethod.TO_NEAREST_EVEN)
    small = lax.mul(k, quantum)
    return _bits.to_bits(select(lax.ge(b, U32(_bits.constant_bits(fmt.min_normal))), normal, small))
