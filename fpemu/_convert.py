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
significand ``sig`` (implicit bit included) at bit ``sh = u_t - u_in``: keep ``q = sig >> sh``, decide
from the discarded ``rem`` and the mode whether to add one quantum. In ``src`` bits this is
``(a & ~mask) + (up << sh)``: IEEE encodings are linear within a binade and a carry into the exponent
field lands exactly on the next binade, so no renormalisation is needed. Inputs below the target's
smallest value (``tiny``) round to 0 or that value. Overflow is a comparison with the largest finite
value, after rounding.
"""

from __future__ import annotations

from typing import Literal

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._format import Format
from fpemu._modes import ROUNDING_MODES, Rounding  # noqa: F401  (re-exported)


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
DEFAULT_RANDOM_BITS = 32


def fits(inner: Format, outer: Format) -> bool:
    """Whether every finite value of ``inner`` is exactly representable in ``outer``."""
    return (
        inner.mantissa_bits <= outer.mantissa_bits
        and inner.min_subnormal_exponent >= outer.min_subnormal_exponent
        and inner.max <= outer.max
    )


def _uint(bits: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= np.iinfo(dtype).bits:
            return np.dtype(dtype)
    raise AssertionError(bits)


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
        self.s = b & uw.type(fmt.sign_mask)
        self.a = b & uw.type((1 << magnitude_bits) - 1)
        all_ones = (1 << magnitude_bits) - 1
        false = jnp.zeros(b.shape, bool)
        if fmt.specials == "ieee":
            self.is_inf = self.a == uw.type(fmt.inf_code)
            self.is_nan = self.a > uw.type(fmt.inf_code)
        elif fmt.specials == "fn":
            self.is_inf, self.is_nan = false, self.a == uw.type(all_ones)
        elif fmt.specials == "fnuz":
            self.is_inf, self.is_nan = false, b == uw.type(fmt.sign_mask)
        else:
            self.is_inf, self.is_nan = false, false
        self.e_field = (self.a >> fmt.mantissa_bits).astype(jnp.int32)
        implicit = uw.type(1 << fmt.mantissa_bits)
        mantissa = self.a & uw.type((1 << fmt.mantissa_bits) - 1)
        if fmt.has_zero:
            self.is_sub = self.e_field == 0
            self.sig = jnp.where(self.is_sub, self.a, mantissa | implicit)
        else:
            self.sig = mantissa | implicit

    def exponent(self, precise: bool, width: int) -> jnp.ndarray:
        """Exponent of the leading bit. If not ``precise``, subnormals report ``fmt.emin``."""
        fmt = self.fmt
        if not fmt.has_zero:
            return self.e_field - fmt.bias
        normal = self.e_field - fmt.bias
        if not precise:
            return jnp.maximum(normal, fmt.emin)
        bit_length = width - lax.clz(self.a).astype(jnp.int32)
        return jnp.where(self.is_sub, bit_length - 1 - fmt.mantissa_bits + fmt.emin, normal)


def _shift(x: jnp.ndarray, amount: jnp.ndarray, width: int) -> jnp.ndarray:
    """``x * 2**amount`` for a per-element signed shift, truncating; shifts are clamped to the width."""
    left = jnp.clip(amount, 0, width - 1).astype(x.dtype)
    right = jnp.clip(-amount, 0, width - 1).astype(x.dtype)
    return jnp.where(amount >= 0, x << left, x >> right)


def round_narrow(
    bits: jnp.ndarray,
    *,
    src: Format,
    dst: Format,
    rounding: str,
    saturate: bool,
    subnormals: bool,
    output: Literal["src_bits", "dst_code"],
    random: jnp.ndarray | None = None,
    random_bits: int = DEFAULT_RANDOM_BITS,
) -> jnp.ndarray:
    """Round ``src`` codes to ``dst`` (which must fit in ``src``); see the module docstring.

    ``random`` (uint32, same shape) supplies the random bits for ``rounding="stochastic"``: its
    ``random_bits`` most significant bits are used.
    """
    assert fits(dst, src), (src.name, dst.name)
    uw = _uint(max(src.code_dtype.itemsize, dst.code_dtype.itemsize) * 8)
    width = uw.itemsize * 8
    m_in, m_t = src.mantissa_bits, dst.mantissa_bits
    u = uw.type

    x = _Src(src, bits.astype(uw), uw)
    a, s, sig = x.a, x.s, x.sig
    ex = x.exponent(precise=dst.emin < src.emin, width=width)
    sh = (jnp.maximum(ex, dst.emin) - m_t) - (jnp.maximum(ex, src.emin) - m_in)
    # A guard bit keeps the shift >= 1, so that `half` exists, wherever the shift can be 0: where the
    # precisions are equal, or the smallest quanta (reached through the subnormal ranges) are.
    guard = 1 if min(m_in - m_t, dst.min_subnormal_exponent - src.min_subnormal_exponent) == 0 else 0
    sh_c = jnp.clip(sh, 0, m_in + 2)  # beyond m_in + 1 every decision is the same: q = 0, rem < half
    shg_i = sh_c + guard
    shg = shg_i.astype(uw)
    sig_g = sig << u(guard) if guard else sig
    one = u(1)
    rem = sig_g & ((one << shg) - one)
    half = one << (shg - one)
    smallest = value_bits(dst.min_subnormal, src)
    tiny = a < u(smallest)  # below the smallest positive value: the result is 0 or that value
    if m_t == 0:
        # No stored mantissa: the code's parity is the exponent's (ties-to-even is replaced by ties-away);
        # below the smallest value the truncated code is 0.
        lsb = jnp.where(tiny, u(0), ((ex + dst.bias) & 1).astype(uw))
    else:
        lsb = (sig_g >> shg) & one
    negative = s != 0

    mode = rounding
    if mode == "nearest_even" and m_t == 0:
        mode = "nearest_away"
    if mode == "nearest_even":
        up = (rem > half) | ((rem == half) & (lsb == one))
    elif mode == "nearest_away":
        up = rem >= half
    elif mode == "toward_zero":
        up = jnp.zeros(rem.shape, bool)
    elif mode == "toward_positive":
        up = (rem != 0) & ~negative
    elif mode == "toward_negative":
        up = (rem != 0) & negative
    elif mode == "to_odd":
        up = (rem != 0) & (lsb == 0)
    elif mode == "stochastic":
        if random is None:
            raise ValueError("stochastic rounding needs random bits")
        k = random_bits
        wide = np.dtype(np.uint64) if width > 32 else np.dtype(np.uint32)
        # The k most significant discarded bits, floor(2**k * rem / 2**sh), from the unclamped shift.
        top = _shift(rem.astype(wide), k - (sh + guard), wide.itemsize * 8).astype(jnp.uint32)
        draw = random.astype(jnp.uint32) >> jnp.uint32(32 - k)
        up = draw > (jnp.uint32((1 << k) - 1) - top)  # draw + top >= 2**k, without overflow
    else:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
    up_u = up.astype(uw)

    ovf_pos, ovf_neg = _OVERFLOWS[rounding]

    if output == "src_bits":
        sh_u = sh_c.astype(uw)
        mask = (one << sh_u) - one
        res = (a & ~mask) + (up_u << sh_u)
        res = jnp.where(tiny, jnp.where(up | (not dst.has_zero), u(smallest), u(0)), res)
        v_max = u(value_bits(dst.max, src))
        v_min_normal = u(value_bits(dst.min_normal, src))
        v_nan = u(src.nan_code)
        v_inf = u(src.inf_code)
        sign = s
    elif output == "dst_code":
        q = sig_g >> shg
        base = (jnp.maximum(ex, dst.emin) - dst.emin).astype(uw)
        res = q + up_u + (base << u(m_t))
        if not dst.has_zero:
            res = jnp.where(tiny, u(0), res - u(1 << m_t))
        v_max = u(dst.max_code)
        v_min_normal = u((1 if dst.has_zero else 0) << m_t)
        v_nan = u(dst.nan_code if dst.has_nan else 0)
        v_inf = u(dst.inf_code if dst.has_inf else 0)
        sign = jnp.where(negative, u(dst.sign_mask), u(0))
    else:
        raise ValueError(f"output must be 'src_bits' or 'dst_code', got {output!r}")

    # The value standing for "infinity": the format's infinity, else its NaN, else its largest value.
    v_overflow = v_inf if dst.has_inf else (v_nan if dst.has_nan else v_max)
    if saturate or (not ovf_pos and not ovf_neg):
        ovf_value = v_max
    elif ovf_pos and ovf_neg:
        ovf_value = v_overflow
    else:
        ovf_value = jnp.where(negative == ovf_neg, v_overflow, v_max)
    res = jnp.where(res > v_max, ovf_value, res)
    if not subnormals and dst.has_subnormals:
        res = jnp.where(res < v_min_normal, u(0), res)
    res = jnp.where(x.is_inf, v_max if saturate else v_overflow, res)

    if dst.has_negative_zero:
        res = res | sign
    elif dst.signed:
        res = res | jnp.where(res != 0, sign, u(0))  # no -0 (fnuz): zero results are +0

    if output == "src_bits":
        nan_out = bits.astype(uw)  # NaN inputs come out unchanged (payload and sign kept)
        res = jnp.where(x.is_nan, nan_out, res)
        if not dst.signed:  # negative numbers and infinities (and zero, for E8M0) have no code: NaN
            res = jnp.where(negative & (a != 0), v_nan, res)
            res = jnp.where(a == 0, v_nan if not dst.has_zero else u(0), res)
    else:
        if dst.has_nan:
            nan_code = dst.nan_code | (dst.sign_mask if dst.specials in ("ieee", "fn") else 0)
            res = jnp.where(x.is_nan, jnp.where(negative, u(nan_code), u(dst.nan_code)), res)
        else:
            # ml_dtypes' conversion of NaN into a NaN-less format: the zero code with the sign inverted.
            res = jnp.where(x.is_nan, jnp.where(negative, u(0), u(dst.sign_mask)), res)
        if not dst.signed:
            res = jnp.where(negative & (a != 0), v_nan, res)
            res = jnp.where(a == 0, v_nan if not dst.has_zero else u(0), res)
    return res


def widen(bits: jnp.ndarray, *, src: Format, dst: Format) -> jnp.ndarray:
    """Exact conversion of ``src`` codes to ``dst`` codes, ``src`` fitting in ``dst`` (decode).

    NaN codes give ``dst``'s quiet NaN with the code's sign (``fnuz`` and unsigned NaNs are positive),
    infinities give infinities.
    """
    assert fits(src, dst), (src.name, dst.name)
    assert dst.has_nan or not src.has_nan, dst.name
    uw = _uint(max(src.code_dtype.itemsize, dst.code_dtype.itemsize) * 8)
    width = uw.itemsize * 8
    u = uw.type
    b = bits.astype(uw)
    x = _Src(src, b, uw)
    ex = x.exponent(precise=dst.emin < src.emin, width=width)
    sh = (jnp.maximum(ex, dst.emin) - dst.mantissa_bits) - (jnp.maximum(ex, src.emin) - src.mantissa_bits)
    q = x.sig << (-sh).astype(uw)  # sh <= 0: exact
    base = (jnp.maximum(ex, dst.emin) - dst.emin).astype(uw)
    res = q + (base << u(dst.mantissa_bits))
    if not dst.has_zero:
        res = res - u(1 << dst.mantissa_bits)
    if src.has_zero:
        res = jnp.where(x.a == 0, u(0), res)
    if dst.has_inf:
        res = jnp.where(x.is_inf, u(dst.inf_code), res)
    negative = x.s != 0
    res = res | jnp.where(negative, u(dst.sign_mask), u(0))
    if dst.has_nan:
        signed_nan = u(dst.nan_code | dst.sign_mask) if dst.specials in ("ieee", "fn") else u(dst.nan_code)
        nan = jnp.where(negative, signed_nan, u(dst.nan_code))
        res = jnp.where(x.is_nan, nan, res)
    return res
