"""Exact float32 arithmetic on bit patterns, for the handful of operations XLA:CPU would get wrong.

XLA:CPU runs float arithmetic with flush-to-zero and denormals-are-zero, and rewrites a division by
a broadcast or a constant into a multiplication by the reciprocal. The scaled formats need exact
powers-of-two scaling (into and out of the float32 subnormal range), exact products of a short
significand with a float32, and reciprocals of subnormals, so those are done here with uint32/int32
operations, or with float operations only where every operand and result is normal.

All functions take and return uint32 float32 bit patterns unless they say otherwise, and work
elementwise (arguments broadcast).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.registry import get_format
from fpemu._jax.elementwise import clamp, select

# The constructors of constants, NumPy scalar types (typed Any: the constants they make are operands of
# JAX arrays): a constant made with them costs a fraction of a JAX scalar's under a trace, and gives the
# same program (bench/RESULTS_training.md, 2026-11-29, "eighth session"). `_scaled`'s modules import them.
U32: Any = np.uint32
I32: Any = np.int32
F32: Any = np.float32

# float32's bit patterns, read from the registry's format
_FP32 = get_format("fp32")
SIGN = _FP32.sign_mask  # 0x80000000
ABS = SIGN - 1  # 0x7FFFFFFF: the magnitude bits
INF = _FP32.inf_code  # 0x7F800000
NAN = _FP32.nan_code  # 0x7FC00000: the quiet NaN the scaled formats return
IMPLICIT = 1 << _FP32.mantissa_bits  # 0x00800000: the implicit bit, and the smallest normal
MANT = IMPLICIT - 1  # 0x007FFFFF
FIELD_SHIFT = _FP32.mantissa_bits  # 23: ``bits >> FIELD_SHIFT`` is a magnitude's biased exponent field
BIAS = _FP32.bias  # 127
FIELD_MAX = ABS >> FIELD_SHIFT  # 255: the exponent field of inf and NaN
FLT_MAX = _FP32.max_code  # 0x7F7FFFFF


def to_bits(x: jnp.ndarray) -> jnp.ndarray:
    return lax.bitcast_convert_type(x, U32)


def from_bits(b: jnp.ndarray) -> jnp.ndarray:
    return lax.bitcast_convert_type(b, jnp.float32)


def constant_bits(value: float) -> int:
    """The bit pattern of the float32 nearest to the Python float ``value`` (host-side, for constants)."""
    return int(np.float32(value).view(np.uint32))


def pow2_bits(k: jnp.ndarray) -> jnp.ndarray:
    """Bits of the normal float32 ``2**k`` (k in [-126, 127])."""
    return lax.shift_left(lax.add(k, I32(127)).astype(U32), U32(23))


def scale_pow2_bits(k: jnp.ndarray) -> jnp.ndarray:
    """Bits of the float32 ``2**k`` for k in [-127, 127]: E8M0's range, whose ``2**-127`` is subnormal."""
    return select(lax.ge(k, I32(-126)), pow2_bits(lax.max(k, I32(-126))), U32(IMPLICIT >> 1))


def unpack(a: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``(ex, sig)`` of a nonzero finite magnitude: value ``sig * 2**(ex - 23)``, ``2**23 <= sig < 2**24``.

    ``ex`` (int32) is the exponent of the leading bit, also for subnormals, which are normalised
    through the exact uint32 -> float32 conversion of their mantissa (below 2**23, so exact).
    Zero gives meaningless values: mask it.
    """
    e = lax.shift_right_logical(a, U32(23)).astype(I32)
    sub = lax.eq(e, I32(0))
    fa = to_bits(select(sub, a, U32(0)).astype(jnp.float32))  # a * 2**149 as a normal float
    ex = select(
        sub,
        lax.sub(lax.sub(lax.shift_right_logical(fa, U32(23)).astype(I32), I32(127)), I32(149)),
        lax.sub(e, I32(127)),
    )
    mant = lax.bitwise_and(select(sub, fa, a), U32(MANT))
    return ex, lax.bitwise_or(mant, U32(IMPLICIT))


def rne_shift(v: jnp.ndarray, sh: jnp.ndarray, *, max_shift: int = 255) -> jnp.ndarray:
    """``v / 2**sh`` rounded to nearest, ties to even, for uint32 ``v`` and int32 ``sh >= 0``.

    ``max_shift``: a static bound on ``sh`` the caller guarantees; at most 31, the shifts of 32 and
    more are not handled (fewer operations)."""
    shc = (sh if max_shift <= 31 else clamp(sh, 0, 31)).astype(U32)
    q = lax.shift_right_logical(v, shc)
    rem = lax.bitwise_and(v, lax.sub(lax.shift_left(U32(1), shc), U32(1)))
    half = lax.shift_right_logical(lax.shift_left(U32(1), shc), U32(1))
    # shc > 0 and (rem > half or (rem == half and q is odd))
    up = lax.bitwise_and(
        lax.gt(shc, U32(0)),
        lax.bitwise_or(
            lax.gt(rem, half), lax.bitwise_and(lax.eq(rem, half), lax.eq(lax.bitwise_and(q, U32(1)), U32(1)))
        ),
    )
    res = lax.add(q, up.astype(U32))
    if max_shift <= 31:
        return res
    res = select(lax.eq(sh, I32(32)), lax.gt(v, U32(1 << 31)).astype(U32), res)  # v / 2**32 < 1: the tie 1/2 goes to 0
    return select(lax.gt(sh, I32(32)), U32(0), res)


def scale_down(b: jnp.ndarray, k: jnp.ndarray) -> jnp.ndarray:
    """``x * 2**-k`` for rounding into an element format whose smallest value is at least 2**-92.

    Exact where the result is a normal float32. A nonzero result below 2**-126 becomes ±2**-126 and
    one beyond float32's range ±FLT_MAX: every rounding mode (stochastic with at most 32 random bits
    included) rounds those exactly as it rounds the true product, since the element format's
    smallest value is at least 2**34 times larger and its largest far smaller. Zeros, infinities and
    NaN pass through. Subnormal inputs are normalised first, so nothing is flushed.
    """
    sign = lax.bitwise_and(b, U32(SIGN))
    a = lax.bitwise_and(b, U32(ABS))
    ex, sig = unpack(a)
    field = lax.add(lax.sub(ex, k), I32(127))
    normal = lax.bitwise_or(
        lax.bitwise_or(sign, lax.shift_left(clamp(field, 1, 254).astype(U32), U32(23))), lax.bitwise_and(sig, U32(MANT))
    )
    res = select(lax.lt(field, I32(1)), lax.bitwise_or(sign, U32(IMPLICIT)), normal)
    res = select(lax.gt(field, I32(254)), lax.bitwise_or(sign, U32(FLT_MAX)), res)
    return select(lax.bitwise_or(lax.eq(a, U32(0)), lax.ge(a, U32(INF))), b, res)


def scale_up(q: jnp.ndarray, k: jnp.ndarray) -> jnp.ndarray:
    """``q * 2**k`` rounded to float32 (nearest even; overflow gives ±inf), for normal or zero ``q``.

    Exact whenever the product is representable, which every block format guarantees for element values.
    Zeros, infinities and NaN pass through.
    """
    sign = lax.bitwise_and(q, U32(SIGN))
    a = lax.bitwise_and(q, U32(ABS))
    field = lax.add(lax.shift_right_logical(a, U32(23)).astype(I32), k)
    mant = lax.bitwise_and(a, U32(MANT))
    normal = lax.bitwise_or(lax.bitwise_or(sign, lax.shift_left(clamp(field, 1, 254).astype(U32), U32(23))), mant)
    sub = lax.bitwise_or(sign, rne_shift(lax.bitwise_or(mant, U32(IMPLICIT)), lax.sub(I32(1), field)))
    res = select(lax.lt(field, I32(1)), sub, normal)
    res = select(lax.gt(field, I32(254)), lax.bitwise_or(sign, U32(INF)), res)
    return select(lax.bitwise_or(lax.eq(a, U32(0)), lax.ge(a, U32(INF))), q, res)


def scale_up_constant(value: float, k: jnp.ndarray, k_min: int) -> jnp.ndarray:
    """`scale_up` (the same bits) of the positive normal float32 constant ``value`` times ``2**k``, for
    int32 ``k >= k_min`` (static), in a few operations where every such product is exact.

    Where ``value * 2**k_min`` keeps every significant bit of ``value`` (its significand shifted into
    float32's subnormal range loses only zeros), no product rounds: a normal result is the exponent
    field ``e + k`` beside ``value``'s mantissa, a subnormal one its significand shifted right, and a
    field above 254 overflows to inf, as `scale_up` gives them. Any other constant takes `scale_up`.
    """
    q = constant_bits(value)
    field, mant = q >> 23, q & MANT
    assert 1 <= field <= 254, value  # a positive normal float32
    sig = mant | IMPLICIT
    widest_shift = 1 - (field + k_min)  # the right shift of the significand at k = k_min
    trailing_zeros = (sig & -sig).bit_length() - 1
    if widest_shift > trailing_zeros:
        return scale_up(U32(q), k)
    f = lax.add(k, I32(field))
    res = lax.shift_left(lax.convert_element_type(f, U32), U32(23))
    if mant:  # a power of two has none
        res = lax.bitwise_or(res, U32(mant))
    if widest_shift > 0:  # exact: only zero bits are shifted out
        subnormal = lax.lt(f, I32(1))
        shift = lax.convert_element_type(clamp(lax.sub(I32(1), f), 0, 31), U32)
        res = select(subnormal, lax.shift_right_logical(U32(sig), shift), res)
    return select(lax.gt(f, I32(254)), U32(INF), res)


def mul_exact(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """The float32 product ``a * b`` rounded to nearest even, subnormals and overflow included.

    ``a`` must have at most 8 significant bits (so the exact product fits 32 bits); both finite.
    """
    sign = lax.bitwise_and(lax.bitwise_xor(a, b), U32(SIGN))
    aa, ab = lax.bitwise_and(a, U32(ABS)), lax.bitwise_and(b, U32(ABS))
    exa, siga = unpack(aa)
    exb, sigb = unpack(ab)
    p = lax.mul(lax.shift_right_logical(siga, U32(16)), sigb)  # exact: 8 x 24 bits, in [2**30, 2**32)
    base = lax.sub(lax.add(exa, exb), I32(30))  # p * 2**base is the product
    lead = select(lax.ge(p, U32(1 << 31)), I32(31), I32(30))
    qe = lax.max(lax.sub(lax.add(base, lead), I32(23)), I32(-149))  # exponent of the result's last bit
    r = rne_shift(p, lax.sub(qe, base))
    field = lax.add(qe, I32(149))
    res = lax.add(lax.shift_left(clamp(field, 0, 255).astype(U32), U32(23)), r)  # a carry out of r bumps the exponent
    # the biased exponent of the result
    overflow = lax.ge(lax.add(field, lax.shift_right_logical(r, U32(23)).astype(I32)), I32(255))
    res = select(overflow, U32(INF), res)
    zero = lax.bitwise_or(lax.eq(aa, U32(0)), lax.eq(ab, U32(0)))
    return lax.bitwise_or(select(zero, U32(0), res), sign)


def mul_normal(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """`mul_exact` (the same bits) for a normal or zero ``a`` of at most 8 significant bits and a
    positive normal ``b`` (a per-tensor scale), at about half its cost.

    Where the product is normal or overflows, the float multiplication is exact (rounded once,
    nearest even, on every backend; XLA:CPU's flushing only touches results below 2**-126). Products
    up to 2**-126 take the integer product of the significands, rounded at float32's subnormal
    quantum 2**-149 (which is also the quantum of [2**-126, 2**-125), so a carry to 2**-126 is
    exact too). An infinite or NaN ``a`` gives the float product.

    The float product is taken of ``|a|`` (a bit operation, the sign put back after): XLA rewrites
    ``(x * c) * s`` for a constant ``c`` and a broadcast scalar ``s`` into ``x * (c * s)``, which
    rounds ``c * s`` first; the mask keeps such an ``a`` whole.
    """
    fast, tiny = _products(a, b, 0)
    small = lax.bitwise_and(lax.le(fast, U32(IMPLICIT)), lax.ne(lax.bitwise_and(a, U32(ABS)), U32(0)))
    return lax.bitwise_or(select(small, tiny, fast), lax.bitwise_and(a, U32(SIGN)))


def mul_scale(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """`mul_exact` (the same bits) for a normal or zero ``a`` of at most 8 significant bits and a
    non-negative finite ``b`` (a scale), subnormal ``b`` included: `mul_normal` and a few operations
    more.

    A subnormal ``b`` is taken as ``b' * 2**-23`` with ``b'`` normal (the float value of its bit
    pattern is ``b * 2**149``, exact): the float product of ``|a|`` and ``b'``, its exponent then
    lowered by 23, is the product where that is above ``2**-126`` (scaling by a power of two
    commutes with rounding in the normal range), and the integer product of the significands,
    rounded at ``2**-149``, below it. A zero ``b`` gives zeros of ``a``'s sign.
    """
    sub = lax.lt(b, U32(IMPLICIT))
    bn = select(sub, lax.sub(to_bits(b.astype(jnp.float32)), U32(126 << 23)), b)  # b * 2**23 where b is subnormal
    shift = select(sub, I32(23), I32(0))
    fast, tiny = _products(a, bn, shift)  # fast: the product times 2**shift
    lowered = lax.shift_left(shift.astype(U32), U32(23))
    # at most 2**-126: the integer product
    res = select(lax.le(fast, lax.add(U32(IMPLICIT), lowered)), tiny, lax.sub(fast, lowered))
    zero = lax.bitwise_or(lax.eq(lax.bitwise_and(a, U32(ABS)), U32(0)), lax.eq(b, U32(0)))
    return lax.bitwise_or(select(zero, U32(0), res), lax.bitwise_and(a, U32(SIGN)))


def _products(a: jnp.ndarray, b: jnp.ndarray, shift: Any) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The two candidate magnitudes of `mul_normal` and `mul_scale` for a normal ``b`` that stands for
    ``b * 2**-shift``: the float product of ``|a|`` and ``b`` (bits, not shifted), and the integer
    product of the significands rounded at float32's subnormal quantum 2**-149 (shifted)."""
    fast = to_bits(lax.mul(from_bits(lax.bitwise_and(a, U32(ABS))), from_bits(b)))
    # biased: a = (a's top 8 significand bits) * 2**(ea - 134)
    ea = lax.bitwise_and(lax.shift_right_logical(a, U32(23)), U32(0xFF)).astype(I32)
    # b * 2**-shift = sig_b * 2**(eb - 150)
    eb = lax.sub(
        lax.bitwise_and(lax.shift_right_logical(b, U32(23)), U32(0xFF)).astype(I32),
        I32(shift) if isinstance(shift, int) else shift,
    )
    sig_a = lax.shift_right_logical(lax.bitwise_or(lax.bitwise_and(a, U32(MANT)), U32(IMPLICIT)), U32(16))
    p = lax.mul(sig_a, lax.bitwise_or(lax.bitwise_and(b, U32(MANT)), U32(IMPLICIT)))  # exact: 8 x 24 bits
    return fast, rne_shift(p, lax.sub(lax.sub(I32(135), ea), eb))  # p * 2**(ea + eb - 284) in units of 2**-149


def reciprocal(p: jnp.ndarray) -> jnp.ndarray:
    """``1 / p`` rounded to float32 for a non-negative finite ``p`` whose reciprocal is normal or
    overflows (``p <= 2**126``), subnormal ``p`` included; ``1 / 0`` is inf. Returns a float32 array."""
    sub = lax.bitwise_and(lax.lt(p, U32(IMPLICIT)), lax.ne(p, U32(0)))
    fa = to_bits(select(sub, p, U32(1)).astype(jnp.float32))  # p * 2**149, normal
    scaled = from_bits(lax.sub(fa, U32(117 << 23)))  # p * 2**32: normal, exactly
    # one division, the last operation (XLA copies the chain before a division into each division's
    # loop, and the operations after it into each consumer's): 1 / p, or 2**32 / (p * 2**32) for
    # subnormal p, the same as (1 / (p * 2**32)) * 2**32: scaling by a power of two commutes with
    # rounding where the result is normal or overflows (1 / p >= 2**126 here)
    return lax.div(select(sub, np.float32(2.0**32), np.float32(1)), select(sub, scaled, from_bits(p)))


def mul_flushing(x: jnp.ndarray, m: jnp.ndarray, *, nonnegative: bool = False) -> jnp.ndarray:
    """The float32 product ``x * m`` (x as bits, m a positive normal float32 <= 2**128, returns float32).

    Exact (nearest even) wherever the product is a normal float32 or overflows, subnormal ``x``
    included. A product below 2**-126 may come back as a zero of the right sign (XLA:CPU flushes it):
    callers round it into an element format whose smallest value is far above 2**-126, where the
    modes they allow give zero for both. ``nonnegative``: the caller guarantees ``x``'s sign bit is
    clear (a group's amax), and the sign is not carried.
    """
    a = x if nonnegative else lax.bitwise_and(x, U32(ABS))
    sub = lax.lt(lax.sub(a, U32(1)), U32(IMPLICIT - 1))  # a nonzero subnormal (0 wraps around to the top)
    fa = to_bits(a.astype(jnp.float32))  # |x| * 2**149 where sub (exact, below 2**23); unused elsewhere
    scaled = lax.sub(fa, U32(125 << 23))  # |x| * 2**24, normal
    xs = from_bits(scaled if nonnegative else lax.bitwise_or(scaled, lax.bitwise_and(x, U32(SIGN))))
    small = lax.mul(lax.mul(xs, m), np.float32(2.0**-24))
    return select(sub, small, lax.mul(from_bits(x), m))


def reciprocal_of_product(d: jnp.ndarray, g: jnp.ndarray, precision: int) -> jnp.ndarray:
    """``fl(1 / fl(d * g))`` as `reciprocal` of `mul_normal` gives it (the same bits), for ``d`` the bits
    of a non-negative float32, normal or zero, of at most ``precision`` significant bits (``1 <=
    precision <= 6``: a narrow block scale), and ``g`` the bits of a positive normal float32 (the
    per-tensor scale), with ``d * g <= 2**126``. Returns a float32 array.

    ``d = 0`` gives inf (``1 / 0``). Where the product is a normal float32 (or overflows) it is the
    float product, exact on every backend, and the result its float reciprocal. Products up to
    ``2**-126`` (XLA:CPU would flush them) are rounded once at float32's subnormal quantum with
    integer operations: ``r = round_even(d * g / 2**-149)`` from the exact integer product of the
    significands (below ``2**30``: ``precision + 24`` bits), by `rne_shift`. Then ``1 / (r * 2**-149)`` is
    ``2**126 / (r * 2**-23)``, the same quotient rounded once (``r * 2**-23`` is exact, ``r <=
    2**23``): inf for ``r = 0``, and overflowing to inf exactly where the true reciprocal rounds to
    inf. One division, the last operation, as in `reciprocal`.
    """
    assert 1 <= precision <= 6, precision
    fast = to_bits(lax.mul(from_bits(d), from_bits(g)))
    tiny = lax.bitwise_and(lax.le(fast, U32(IMPLICIT)), lax.ne(d, U32(0)))
    ed = lax.shift_right_logical(d, U32(23)).astype(I32)  # biased: d = sig_d * 2**(ed - 127 - (precision - 1)), d >= 0
    eg = lax.shift_right_logical(g, U32(23)).astype(I32)  # g = sig_g * 2**(eg - 150)
    # exact: d has <= precision bits
    sig_d = lax.shift_right_logical(lax.bitwise_or(lax.bitwise_and(d, U32(MANT)), U32(IMPLICIT)), U32(24 - precision))
    p = lax.mul(
        sig_d, lax.bitwise_or(lax.bitwise_and(g, U32(MANT)), U32(IMPLICIT))
    )  # exact: below 2**(precision + 24) <= 2**30
    # d * g = p * 2**(ed + eg - 276 - precision) = (p / 2**sh) * 2**-149, sh >= 0 where tiny
    sh = clamp(lax.sub(lax.sub(I32(127 + precision), ed), eg), 0, 31)
    r = rne_shift(p, sh, max_shift=31)  # past 30 bits: 0 anyway
    scaled = lax.mul(r.astype(jnp.float32), np.float32(2.0**-23))  # exact: r < 2**24
    return lax.div(select(tiny, np.float32(2.0**126), np.float32(1)), select(tiny, scaled, from_bits(fast)))
