"""The conversion engine: exact format-to-format conversion on bit patterns, in integer arithmetic only.

Two directions, chosen statically:

- `round_narrow`: from an input format ``src`` to a format ``dst`` whose values all lie in ``src``
  (quantize and encode). One correctly rounded result in any mode, returned either as ``src`` bits
  (the exact value of the rounded result, for quantize) or as ``dst`` codes (for encode).
- `widen`: from ``src`` to a format ``dst`` that holds every ``src`` value (decode). Exact.

Why integers: XLA on CPU runs float arithmetic with flush-to-zero and denormals-are-zero, and its
simplifier may delete cast round trips, so a value-domain implementation silently loses subnormals.
Bit patterns do not care.

How `round_narrow` works. For a finite input ``x`` with leading-bit exponent ``ex``, the input's
quantum is ``2**u_in`` with ``u_in = max(ex, src.emin) - src.mantissa_bits`` and the target's is
``2**u_t`` with ``u_t = max(ex, dst.emin) - dst.mantissa_bits``. Rounding to the target is rounding the
input's magnitude bits ``a`` at bit ``sh = u_t - u_in``: add a per-mode increment ``inc < 2**sh``
(``half - 1 + lsb`` for nearest-even, ``mask`` for the outward directed mode, k random bits for
stochastic rounding, ...) and clear the low ``sh`` bits. The carry out of the discarded bits is the
round-up. IEEE encodings are linear within a binade and a carry into the exponent field lands exactly
on the next binade, so no renormalisation is needed. Inputs below the target's smallest value
(``tiny``) round to 0 or that value by comparison with static thresholds. Overflow is one
comparison with the largest finite value, after rounding (infinite inputs land there too).

The stochastic variants other than the default compare the k random bits ``r`` with ``T``, the
discarded fraction of the step scaled to k bits and rounded to an integer (floor, nearest-even,
nearest-odd or half-up): up iff ``T + r >= 2**k``. ``T`` is the top k discarded bits plus a carry
``c`` from the bits below them, so ``up = r > 2**k - 1 - floor_part or (c and r == 2**k - 1 - floor_part)``,
without a wider integer type.
"""

from __future__ import annotations

from typing import Literal

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import DEFAULT_RANDOM_BITS
from fpemu._core.format import Format, fits
from fpemu._core.modes import EXPONENT_TIES, P3109_SATURATIONS, ROUNDING_MODES, STOCHASTIC_VARIANTS
from fpemu._jax.elementwise import clamp, select

# Modes in which a result beyond the largest finite value overflows to infinity (for positive and
# negative results respectively); in the other cases it clamps to the largest finite value.
_OVERFLOWS = {
    "nearest_even": (True, True),
    "nearest_away": (True, True),
    "stochastic": (True, True),
    "toward_zero": (False, False),
    "to_odd": (False, False),
    "toward_positive": (True, False),
    "toward_negative": (False, True),
}


def _work_dtype(src: Format, dst: Format) -> np.dtype:
    """The unsigned type that holds the codes of both formats."""
    return max(src.code_dtype, dst.code_dtype, key=lambda dtype: dtype.itemsize)


def value_bits(value: float, fmt: Format) -> int:
    """The code of an exactly representable, non-negative finite value (host-side, for constants)."""
    if value == 0:
        return 0
    mantissa, exponent = np.frexp(value)  # value = mantissa * 2**exponent, 0.5 <= mantissa < 1
    ex = int(exponent) - 1
    if ex >= fmt.emin:
        significand = int(np.ldexp(mantissa, fmt.mantissa_bits + 1))
        return ((ex - fmt.emin + (1 if fmt.has_zero else 0)) << fmt.mantissa_bits) | (
            significand & ((1 << fmt.mantissa_bits) - 1)
        )
    return int(np.ldexp(value, -fmt.min_subnormal_exponent))


class _Src:
    """Field extraction for codes of ``fmt`` held in a uint array of the working dtype."""

    def __init__(self, fmt: Format, b: jnp.ndarray, uw: np.dtype):
        self.fmt = fmt
        magnitude_bits = fmt.exponent_bits + fmt.mantissa_bits
        self.s = lax.bitwise_and(b, uw.type(fmt.sign_mask))
        self.a = lax.bitwise_and(b, uw.type((1 << magnitude_bits) - 1))
        if fmt.twos_complement:  # the magnitude of a negative code is 2**K - code (2**(K-1) for 0x80)
            negative = lax.ne(self.s, uw.type(0))
            self.a = select(
                negative, lax.bitwise_and(lax.sub(uw.type(fmt.num_codes), b), uw.type(fmt.num_codes - 1)), self.a
            )
        all_ones = (1 << magnitude_bits) - 1
        false = jnp.zeros(b.shape, bool)
        if fmt.specials == "ieee":
            self.is_inf = lax.eq(self.a, uw.type(fmt.inf_code))
            self.is_nan = lax.gt(self.a, uw.type(fmt.inf_code))
        elif fmt.specials == "fn":
            self.is_inf, self.is_nan = false, lax.eq(self.a, uw.type(all_ones))
        elif fmt.specials == "fnuz":
            self.is_inf, self.is_nan = false, lax.eq(b, uw.type(fmt.sign_mask))
        elif fmt.specials == "p3109":
            self.is_inf = lax.eq(self.a, uw.type(fmt.inf_code))
            self.is_nan = lax.eq(b if fmt.signed else self.a, uw.type(fmt.nan_code))
        else:
            self.is_inf, self.is_nan = false, false
        self.e_field = lax.shift_right_logical(self.a, uw.type(fmt.mantissa_bits)).astype(jnp.int32)
        implicit = uw.type(1 << fmt.mantissa_bits)
        mantissa = lax.bitwise_and(self.a, uw.type((1 << fmt.mantissa_bits) - 1))
        if fmt.has_zero:
            self.is_sub = lax.eq(self.e_field, np.int32(0))
            self.sig = select(self.is_sub, self.a, lax.bitwise_or(mantissa, implicit))
        else:
            self.sig = lax.bitwise_or(mantissa, implicit)

    def exponent(self, precise: bool, width: int) -> jnp.ndarray:
        """Exponent of the leading bit. If not ``precise``, subnormals report ``fmt.emin``."""
        fmt = self.fmt
        normal = lax.sub(self.e_field, np.int32(fmt.bias))
        if not fmt.has_zero:
            return normal
        if not precise:
            return lax.max(normal, np.int32(fmt.emin))
        bit_length = lax.sub(np.int32(width), _clz(self.a))
        subnormal = lax.add(lax.sub(lax.sub(bit_length, np.int32(1)), np.int32(fmt.mantissa_bits)), np.int32(fmt.emin))
        return select(self.is_sub, subnormal, normal)


def _clz(x: jnp.ndarray) -> jnp.ndarray:
    """Leading zeros of unsigned ``x`` as int32, counted on the signed type of its width: Triton lowers
    ``clz`` of int32/int64 (libdevice's ``__nv_clz``) but cannot legalize it for unsigned types."""
    signed = {1: jnp.int8, 2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
    if x.dtype.itemsize < 4:  # widen: 32-bit leading zeros minus the extra width
        return lax.sub(lax.clz(x.astype(jnp.int32)), np.int32(32 - 8 * x.dtype.itemsize))
    return lax.clz(lax.bitcast_convert_type(x, signed)).astype(jnp.int32)


def _shift(x: jnp.ndarray, amount: jnp.ndarray, width: int) -> jnp.ndarray:
    """``floor(x * 2**amount)`` for a per-element signed shift (left shifts must not overflow)."""
    left = clamp(amount, 0, width - 1).astype(x.dtype)
    right = clamp(lax.neg(amount), 0, width - 1).astype(x.dtype)
    zero = amount.dtype.type(0)
    shifted = select(lax.ge(amount, zero), lax.shift_left(x, left), lax.shift_right_logical(x, right))
    return select(lax.le(amount, amount.dtype.type(-width)), jnp.zeros_like(x), shifted)  # every bit shifted out


def _stochastic_up(x, shift, draw, k: int, variant: str, wide: np.dtype) -> jnp.ndarray:
    """Whether the fraction ``f = x / 2**shift`` (``x < 2**shift``) rounds up with the k random bits
    ``draw``: ``T + draw >= 2**k`` with ``T`` = ``2**k * f`` rounded to an integer by ``variant``."""
    width = wide.itemsize * 8
    d = lax.sub(shift.astype(jnp.int32), np.int32(k))  # bits of x below the k that T keeps
    floor_part = _shift(x, lax.neg(d), width)  # floor(2**k f) < 2**k
    one, zero = wide.type(1), wide.type(0)
    # the first bit below them (0 when d <= 0: none)
    guard = lax.bitwise_and(_shift(x, lax.sub(np.int32(1), d), width), one)
    # any bit below the guard bit
    sticky = lax.ne(_shift(_shift(x, lax.sub(np.int32(1), d), width), lax.sub(d, np.int32(1)), width), x)
    guard = lax.ne(select(lax.ge(d, np.int32(1)), guard, zero), zero)
    sticky = lax.bitwise_and(lax.ge(d, np.int32(2)), sticky)
    odd = lax.ne(lax.bitwise_and(floor_part, one), zero)
    if variant == "nearest_even":
        carry = lax.bitwise_and(guard, lax.bitwise_or(sticky, odd))
    elif variant == "nearest_odd":
        carry = lax.bitwise_and(guard, lax.bitwise_or(sticky, lax.bitwise_not(odd)))
    elif variant == "nearest_away":
        carry = guard
    else:  # pragma: no cover - validated by round_narrow
        raise AssertionError(variant)
    limit = lax.sub(wide.type((1 << k) - 1), floor_part)  # T + draw >= 2**k, without overflow
    return lax.bitwise_or(lax.gt(draw, limit), lax.bitwise_and(carry, lax.eq(draw, limit)))


def round_narrow(
    bits: jnp.ndarray,
    *,
    src: Format,
    dst: Format,
    rounding: str,
    saturate: bool | str,
    subnormals: bool,
    output: Literal["src_bits", "dst_code"],
    random: jnp.ndarray | None = None,
    random_bits: int = DEFAULT_RANDOM_BITS,
    stochastic_variant: str = "floor",
    exponent_ties: str = "away",
) -> jnp.ndarray:
    """Round codes of the IEEE input format ``src`` to ``dst`` (which must fit in ``src``).

    ``random`` (uint32, same shape) supplies the random bits for ``rounding="stochastic"``: its
    ``random_bits`` most significant bits are used, compared with the discarded fraction as
    ``stochastic_variant`` says. ``saturate`` is ``False``, ``True`` or one of IEEE P3109's saturation
    modes; ``exponent_ties`` applies to ``nearest_even`` in formats without mantissa bits. See the
    module docstring for the method.
    """
    assert fits(dst, src), (src.name, dst.name)
    assert src.specials == "ieee" and src.signed and src.has_zero, src.name
    if rounding not in _OVERFLOWS:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
    if not isinstance(saturate, (bool, np.bool_)) and saturate not in P3109_SATURATIONS:
        raise ValueError(f"saturate must be a bool or one of {P3109_SATURATIONS}, got {saturate!r}")
    if stochastic_variant not in STOCHASTIC_VARIANTS or exponent_ties not in EXPONENT_TIES:
        raise ValueError(f"stochastic_variant must be one of {STOCHASTIC_VARIANTS} and exponent_ties one of "
                         f"{EXPONENT_TIES}, got {stochastic_variant!r}, {exponent_ties!r}")  # fmt: skip
    p3109 = saturate if isinstance(saturate, str) else None
    clamp = bool(saturate) if p3109 is None else p3109 in ("sat_finite", "sat_propagate")  # finite overflow: ±max
    uw = _work_dtype(src, dst)
    width = uw.itemsize * 8
    m_in, m_t = src.mantissa_bits, dst.mantissa_bits
    u = uw.type
    one = u(1)

    b = bits.astype(uw)
    a = lax.bitwise_and(b, u(src.sign_mask - 1))
    s = lax.bitwise_xor(b, a)
    negative = lax.ne(s, u(0))
    e = lax.max(lax.shift_right_logical(a, u(m_in)), one)  # biased exponent field; subnormals read as 1 (same quantum)
    # Per element, the rounding position sh = (target quantum exponent) - (input quantum exponent).
    if dst.emin >= src.emin:
        # Below the target's normal range the target quantum is fixed: sh grows as the exponent falls.
        e_min_normal = dst.emin + src.bias  # input exponent field of the target's smallest normal
        sh = lax.sub(u(e_min_normal + m_in - m_t), lax.min(e, u(e_min_normal)))
        ex = None
        if m_t == 0 or output == "dst_code":
            ex = lax.sub(e.astype(jnp.int32), np.int32(src.bias))
    else:
        # The target has normal binades below the input's smallest normal (E8M0 in float32): the
        # quantum of an input subnormal depends on its leading bit.
        i32 = np.int32
        bit_length = lax.sub(i32(width), _clz(a))
        ex = select(
            lax.lt(a, u(1 << m_in)),
            lax.add(lax.sub(lax.sub(bit_length, i32(1)), i32(m_in)), i32(src.emin)),
            lax.sub(e.astype(jnp.int32), i32(src.bias)),
        )
        sh = lax.sub(
            lax.sub(lax.max(ex, i32(dst.emin)), i32(m_t)), lax.sub(lax.max(ex, i32(src.emin)), i32(m_in))
        ).astype(uw)
    sh_c = lax.min(sh, u(m_in + 1))  # inputs beyond this are below the smallest value (`tiny`)
    mask = lax.sub(lax.shift_left(one, sh_c), one)
    if m_t == 0:
        # No stored mantissa: the code's parity is the exponent's.
        assert ex is not None  # set on every path that reaches here (m_t == 0 implies an exponent)
        lsb = lax.bitwise_and(lax.add(ex, np.int32(dst.bias)), np.int32(1)).astype(uw)
    else:
        # the implicit bit is the code's last bit at sh == m_in
        lsb = lax.bitwise_and(lax.shift_right_logical(lax.bitwise_or(a, u(1 << m_in)), sh_c), one)

    # Rounding adds `inc` (< 2**sh) and truncates: the carry out of the discarded bits rounds up.
    # Inputs below the smallest positive value (`tiny`) instead go to 0 or that value (`tiny_up`).
    smallest = value_bits(dst.min_subnormal, src)
    tiny = lax.lt(a, u(smallest))
    half_smallest = (
        value_bits(dst.min_subnormal / 2, src) if dst.min_subnormal_exponent > src.min_subnormal_exponent else smallest
    )
    # Without mantissa bits, ties go away from zero unless asked for the even exponent.
    mode = "nearest_away" if rounding == "nearest_even" and m_t == 0 and exponent_ties == "away" else rounding
    zero = jnp.zeros(a.shape, uw)
    if mode == "nearest_even":
        inc = lax.shift_right_logical(lax.add(mask, lsb), one)  # half - 1 + lsb, and 0 when sh == 0
        tiny_up = lax.gt(a, u(half_smallest))  # the tie goes to 0, the even code
    elif mode == "nearest_away":
        inc = lax.shift_right_logical(lax.add(mask, one), one)
        tiny_up = lax.ge(a, u(half_smallest))
    elif mode == "toward_zero":
        inc = zero
        tiny_up = jnp.zeros(a.shape, bool)
    elif mode in ("toward_positive", "toward_negative"):
        outward = lax.bitwise_not(negative) if mode == "toward_positive" else negative
        inc = select(outward, mask, zero)
        tiny_up = lax.bitwise_and(outward, lax.ne(a, u(0)))
    elif mode == "to_odd":
        inc = select(lax.eq(lsb, u(0)), mask, zero)  # inexact and even: up to the odd neighbour
        tiny_up = lax.ne(a, u(0))
    else:  # stochastic
        if random is None:
            raise ValueError("stochastic rounding needs random bits")
        k = random_bits
        wide = np.dtype(np.uint64) if width > 32 else np.dtype(np.uint32)
        wide_bits = wide.itemsize * 8
        draw = lax.shift_right_logical(random.astype(jnp.uint32), np.uint32(32 - k)).astype(wide)
        if stochastic_variant == "floor":
            # k random bits added at the k leading discarded bits (below them when fewer are discarded)
            inc = _shift(draw, lax.sub(sh_c.astype(jnp.int32), np.int32(k)), wide_bits).astype(uw)
            # below the smallest value: up with probability floor(2**k * x / smallest) / 2**k
            subnormal = lax.lt(a, u(1 << m_in))
            significand = lax.bitwise_or(lax.bitwise_and(a, u((1 << m_in) - 1)), u(1 << m_in))
            sig = select(subnormal, a, significand).astype(wide)
            top = _shift(sig, lax.sub(np.int32(k), sh.astype(jnp.int32)), wide_bits)
            tiny_up = lax.gt(draw, lax.sub(wide.type((1 << k) - 1), top))  # draw + top >= 2**k, without overflow
        else:
            subnormal = lax.lt(a, u(1 << m_in))
            significand = lax.bitwise_or(lax.bitwise_and(a, u((1 << m_in) - 1)), u(1 << m_in))
            sig = select(subnormal, a, significand).astype(wide)
            up = _stochastic_up(lax.bitwise_and(a, mask).astype(wide), sh_c, draw, k, stochastic_variant, wide)
            inc = select(up, mask, zero)
            tiny_up = _stochastic_up(sig, sh, draw, k, stochastic_variant, wide)

    ovf_pos, ovf_neg = _OVERFLOWS[rounding]
    if p3109 == "ovf_inf" and rounding == "to_odd":  # P3109: round-to-odd overflows like the nearest modes
        ovf_pos, ovf_neg = True, True
    if output == "src_bits":
        res = lax.bitwise_and(lax.add(a, inc), lax.bitwise_not(mask))
        res = select(tiny, select(lax.bitwise_or(tiny_up, np.bool_(not dst.has_zero)), u(smallest), u(0)), res)
        v_max = u(value_bits(dst.max, src))
        v_max_neg = u(value_bits(-dst.min, src)) if dst.twos_complement else v_max
        v_min_normal = u(value_bits(dst.min_normal, src))
        v_nan, v_inf = u(src.nan_code), u(src.inf_code)
        sign = s
    elif output == "dst_code":
        sig = select(lax.lt(a, u(1 << m_in)), a, lax.bitwise_or(lax.bitwise_and(a, u((1 << m_in) - 1)), u(1 << m_in)))
        # binades above the smallest normal (ex is set above on this branch)
        base = lax.sub(lax.max(ex, np.int32(dst.emin)), np.int32(dst.emin)).astype(uw)  # type: ignore[arg-type]
        res = lax.add(lax.shift_right_logical(lax.add(sig, inc), sh_c), lax.shift_left(base, u(m_t)))
        if dst.has_zero:
            res = select(tiny, tiny_up.astype(uw), res)
        else:
            res = select(tiny, u(0), lax.sub(res, u(1 << m_t)))
        v_max = u(dst.max_code)
        v_max_neg = u(dst.neg_max_code) if dst.twos_complement else v_max
        v_min_normal = u(1 << m_t if dst.has_zero else 0)
        v_nan = u(dst.nan_code if dst.has_nan else 0)
        v_inf = u(dst.inf_code if dst.has_inf else 0)
        sign = select(negative, u(dst.sign_mask), u(0))
    else:
        raise ValueError(f"output must be 'src_bits' or 'dst_code', got {output!r}")
    if dst.twos_complement:  # one more value on the negative side
        v_max = select(negative, v_max_neg, v_max)

    # The value standing for "infinity": the format's infinity, else its NaN, else its largest value.
    v_overflow = v_inf if dst.has_inf else (v_nan if dst.has_nan else v_max)
    if clamp or (not ovf_pos and not ovf_neg):
        ovf_value = v_max
    elif ovf_pos and ovf_neg:
        ovf_value = v_overflow
    else:
        ovf_value = select(lax.eq(negative, np.bool_(ovf_neg)), v_overflow, v_max)
    res = select(lax.gt(res, v_max), ovf_value, res)  # infinite inputs land here too
    # Flush subnormal results: ±max (what infinity may become below) is normal, except in a format
    # without exponent bits, where it is flushed too, so the flush comes after.
    flush = not subnormals and dst.has_subnormals
    if flush and dst.exponent_bits > 0:
        res = select(lax.lt(res, v_min_normal), u(0), res)
    if p3109 == "sat_propagate":  # finite overflow clamps, infinities stay infinite where they can
        res = select(lax.eq(a, u(src.inf_code)), v_inf if dst.has_inf else v_max, res)
    elif not clamp and not (ovf_pos and ovf_neg):  # where overflow clamps, infinity still maps to infinity
        res = select(lax.eq(a, u(src.inf_code)), v_overflow, res)
    if flush and dst.exponent_bits == 0:  # finite values only: the infinity and NaN codes stay
        res = select((res < v_min_normal) & (res <= v_max), u(0), res)

    if dst.has_negative_zero:
        res = lax.bitwise_or(res, sign)
    elif dst.signed and not (dst.twos_complement and output == "dst_code"):
        res = lax.bitwise_or(res, select(lax.ne(res, u(0)), sign, u(0)))  # no -0 (fnuz, p3109): zero results are +0
    elif dst.signed:  # two's complement codes: 2**K - magnitude for negative results
        nonzero_negative = lax.bitwise_and(negative, lax.ne(res, u(0)))
        res = select(nonzero_negative, lax.bitwise_and(lax.sub(u(dst.num_codes), res), u(dst.num_codes - 1)), res)

    is_nan = lax.gt(a, u(src.inf_code))
    if output == "src_bits":
        res = select(is_nan, b, res)  # NaN inputs come out unchanged (payload and sign kept)
    elif dst.has_nan:
        signed_nan = dst.nan_code | (dst.sign_mask if dst.specials in ("ieee", "fn") else 0)  # type: ignore[operator]  # dst.has_nan: nan_code is an int
        res = select(is_nan, select(negative, u(signed_nan), u(dst.nan_code)), res)
    elif dst.twos_complement:
        res = select(is_nan, u(0), res)  # no NaN and no -0 to invert into: the zero code
    else:
        # ml_dtypes' conversion of NaN into a NaN-less format: the zero code with the sign inverted.
        res = select(is_nan, select(negative, u(0), u(dst.sign_mask)), res)
    if not dst.signed:  # negative numbers and infinities (and zero, for E8M0) have no code
        below = lax.bitwise_and(negative, lax.ne(a, u(0)))
        if p3109 is not None and dst.has_zero:
            # P3109: negative values saturate to 0, the lowest value, except that OvfInf gives NaN
            # where the result is not zero, save toward_zero and toward_positive of finite values.
            to_zero = jnp.ones(a.shape, bool) if p3109 != "ovf_inf" else lax.eq(res, u(0))
            if p3109 == "ovf_inf" and rounding in ("toward_zero", "toward_positive"):
                to_zero = lax.bitwise_or(to_zero, lax.ne(a, u(src.inf_code)))
            res = select(lax.bitwise_and(below, lax.bitwise_not(is_nan)), select(to_zero, u(0), v_nan), res)
        else:
            res = select(below, v_nan, res)
        if not dst.has_zero:
            res = select(lax.eq(a, u(0)), v_nan, res)
    return res


def widen(bits: jnp.ndarray, *, src: Format, dst: Format) -> jnp.ndarray:
    """Exact conversion of ``src`` codes to ``dst`` codes, ``src`` fitting in ``dst`` (decode).

    NaN codes give ``dst``'s quiet NaN with the code's sign (``fnuz`` and unsigned NaNs are positive),
    infinities give infinities.
    """
    assert fits(src, dst), (src.name, dst.name)
    assert dst.has_nan or not src.has_nan, dst.name
    uw = _work_dtype(src, dst)
    width = uw.itemsize * 8
    u = uw.type
    b = bits.astype(uw)
    x = _Src(src, b, uw)
    ex = x.exponent(precise=dst.emin < src.emin, width=width)
    i32 = np.int32
    sh = lax.sub(
        lax.sub(lax.max(ex, i32(dst.emin)), i32(dst.mantissa_bits)),
        lax.sub(lax.max(ex, i32(src.emin)), i32(src.mantissa_bits)),
    )
    q = lax.shift_left(x.sig, lax.neg(sh).astype(uw))  # sh <= 0: exact
    base = lax.sub(lax.max(ex, i32(dst.emin)), i32(dst.emin)).astype(uw)
    res = lax.add(q, lax.shift_left(base, u(dst.mantissa_bits)))
    if not dst.has_zero:
        res = lax.sub(res, u(1 << dst.mantissa_bits))
    if src.has_zero:
        res = select(lax.eq(x.a, u(0)), u(0), res)
    if dst.has_inf:
        res = select(x.is_inf, u(dst.inf_code), res)
    negative = lax.ne(x.s, u(0))
    res = lax.bitwise_or(res, select(negative, u(dst.sign_mask), u(0)))
    if dst.has_nan:
        signed_nan = u(dst.nan_code | dst.sign_mask) if dst.specials in ("ieee", "fn") else u(dst.nan_code)  # type: ignore[operator]  # dst.has_nan: nan_code is an int
        nan = select(negative, signed_nan, u(dst.nan_code))
        res = select(x.is_nan, nan, res)
    return res
