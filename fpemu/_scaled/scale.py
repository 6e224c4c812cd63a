"""Scale rules: from a group's amax (as float32 bits) to its scale, exactly.

Every rule reads the amax's bit pattern: its exponent and significand come from the bits (also for
float32 subnormals), so no logarithm and no flushed float arithmetic is involved.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.registry import get_format
from fpemu._jax.elementwise import clamp, select
from fpemu._ops.fusion import computed_together
from fpemu._scaled import bits as _bits
from fpemu._scaled import rne as _rne
from fpemu._scaled.bits import BIAS, F32, FIELD_MAX, FLT_MAX, I32, IMPLICIT, INF, U32
from fpemu._scaled.block_format import BlockFormat, pow2_constants

_FP32 = get_format("fp32")
ENCODE_CAP = 2.0**126  # float encode scales are capped here so that 1 / scale is a normal float32
ENCODE_FLOOR = 2.0**-126


def pow2_range(block_format: BlockFormat) -> tuple[int, int]:
    """The exponents a power-of-two scale may take: the scale format's normal range."""
    s = block_format.scale_format
    return s.emin, s.emax


def smallest_exponent(block_format: BlockFormat) -> int:
    """A lower bound on the exponent ``k`` of every power-of-two scale of ``block_format``: `pow2_range`'s
    (computed scales), and float32's ``-bias`` (-127) for given scales, read from the exponent field."""
    return min(pow2_range(block_format)[0], -_FP32.bias)


def zero_exponent(block_format: BlockFormat) -> int:
    """The scale exponent of an all-zero group: E8M0's smallest (code 0, as the OCP reference code,
    torchao and jax.nn do), or 0 (scale 1) for float32 scales."""
    return pow2_range(block_format)[0] if block_format.scale_kind == "pow2" else 0


def pow2_exponent(amax: jnp.ndarray, block_format: BlockFormat) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(k, nonfinite): the power-of-two scale ``2**k`` of each group, and which groups hold NaN or inf.

    ``amax`` is the uint32 bit pattern of the group's largest magnitude (NaN patterns are above
    infinity's, so a group with NaN has a NaN-pattern amax). ``k`` is clamped to the scale format's
    range after adding the margin; all-zero groups get `zero_exponent`.
    """
    emax, sig_max, mantissa_bits, _ = pow2_constants(block_format)
    nonfinite = lax.ge(amax, U32(INF))
    zero = lax.eq(amax, U32(0))
    ex, sig = _bits.unpack(amax)
    k = lax.sub(ex, I32(emax))
    rule = block_format.scale_rule
    if rule == "ceil":  # amax > M * 2**(ex - emax): one more
        k = lax.add(k, lax.gt(sig, U32(sig_max)).astype(I32))
    elif rule == "even":  # amax rounded half-up to the element's precision reaches the next binade
        k = lax.add(k, lax.ge(lax.add(sig, U32(1 << (22 - mantissa_bits))), U32(1 << 24)).astype(I32))
    elif rule == "ceil_log2":  # amax is not a power of two
        k = lax.add(k, lax.ne(sig, U32(IMPLICIT)).astype(I32))
    elif rule != "ocp":
        raise AssertionError(rule)
    lo, hi = pow2_range(block_format)
    k = clamp(lax.add(k, I32(block_format.margin)), lo, hi)
    return select(zero, I32(zero_exponent(block_format)), k), nonfinite


def exponent_field_applies(block_format: BlockFormat) -> bool:
    """Whether `pow2_exponent` depends on the amax's exponent field alone, so that a group's maximum of the
    fields can stand for its amax (`pow2_exponent_of_field`): the ``"ocp"`` rule (``k`` is the amax's binade
    less the element's ``emax``), E8M0-like scales (an all-zero group gets the smallest exponent), and a
    margin small enough that every float32 subnormal amax is clamped to that smallest exponent too."""
    lo, _ = pow2_range(block_format)
    emax = pow2_constants(block_format)[0]
    return (
        block_format.scale_rule == "ocp"
        and block_format.scale_kind == "pow2"
        and zero_exponent(block_format) == lo
        and -BIAS - emax + block_format.margin <= lo  # a field of 0 read as the binade -127
    )


def pow2_exponent_of_field(field: jnp.ndarray, block_format: BlockFormat) -> tuple[jnp.ndarray, jnp.ndarray]:
    """`pow2_exponent` from the group's largest exponent field (uint32, ``amax bits >> FIELD_SHIFT``), the same
    ``(k, nonfinite)`` where `exponent_field_applies`: a field of 0 (zero or subnormal amax) gives the
    smallest exponent, 255 (NaN or inf) is non-finite. A few integer operations, which the elements' loop
    recomputes more cheaply than XLA compiles a loop of their own."""
    emax = pow2_constants(block_format)[0]
    lo, hi = pow2_range(block_format)
    k = clamp(lax.sub(lax.convert_element_type(field, I32), I32(BIAS + emax - block_format.margin)), lo, hi)
    return k, lax.eq(field, U32(FIELD_MAX))


def _const_over(numerator: float, amax: jnp.ndarray) -> jnp.ndarray:
    """float32 ``numerator / amax`` for amax bits (finite, nonzero), rounded once, subnormal amax included."""
    sub = lax.bitwise_and(lax.lt(amax, U32(IMPLICIT)), lax.ne(amax, U32(0)))
    fa = _bits.to_bits(select(sub, amax, U32(1)).astype(F32))  # amax * 2**149
    scaled = _bits.from_bits(lax.sub(fa, U32(125 << 23)))  # amax * 2**24, normal
    num = F32(numerator)
    safe = select(lax.ge(amax, U32(INF)), U32(IMPLICIT), amax)
    if numerator * 2.0**24 > float(np.finfo(np.float32).max):  # (num * 2**24 is no float32): two divisions
        return select(sub, lax.mul(lax.div(num, scaled), F32(2.0**24)), lax.div(num, _bits.from_bits(safe)))
    # one division, as in `_bits.reciprocal`: num / amax, or (num * 2**24) / (amax * 2**24) (an exact
    # constant), the same as (num / (amax * 2**24)) * 2**24 where the quotient is normal or overflows
    # (for a subnormal amax it exceeds num * 2**126, normal for every positive float32 num)
    return lax.div(select(sub, F32(numerator * 2.0**24), num), select(sub, scaled, _bits.from_bits(safe)))


def float_encode_scale(amax: jnp.ndarray, block_format: BlockFormat) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(enc, nonfinite) for the ``"float"`` rule with float32 scales (Transformer Engine's current scaling).

    ``enc = clip(fl(M / amax) * 2**-margin, 2**-126, 2**126)``, 1 for an all-zero group; the decode
    scale is ``fl(1 / enc)``. ``fl`` rounds to float32 (nearest even, overflow to inf).
    """
    nonfinite = lax.ge(amax, U32(INF))
    zero = lax.eq(amax, U32(0))
    enc = _const_over(float(np.float32(block_format.element.max)), amax)
    # No product with 1: XLA drops it anyway, and the clip below raises a subnormal enc to ENCODE_FLOOR,
    # flushed or not.
    if block_format.margin:
        enc = lax.mul(enc, F32(2.0**-block_format.margin))
    enc = lax.min(F32(ENCODE_CAP), lax.max(F32(ENCODE_FLOOR), enc))  # jnp.clip's operations
    return select(zero, F32(1), enc), nonfinite


def global_scale_is_normal(block_format: BlockFormat) -> bool:
    """Whether every tensor scale ``g`` `two_level_scales` computes for ``block_format`` is a normal float32:
    ``S <= 2**126``, and ``S >= M_s * M_e / FLT_MAX >= 2**-126`` where ``M_s * M_e >= 4`` (NVFP4: 2688)."""
    return not block_format.global_scale or block_format.scale_format.max * block_format.element.max >= 4


def two_level_scales(
    amax_tensor: jnp.ndarray,
    amax_block: jnp.ndarray,
    block_format: BlockFormat,
    once: Callable[..., tuple[jnp.ndarray, ...]] = lambda *arrays: arrays,
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(d, g, enc_b, nonfinite) for a narrow block scale format (NVFP4 and friends): ``d`` the block
    decode scales (float32 values of the scale format, whose codes `fpemu.encode` gives exactly).

    ``once`` takes ``d`` and returns it computed once (`fpemu._ops.fusion.materialize`), so that its consumers
    (``enc_b``, the caller's table or codes) do not each repeat the chain that rounds it.

    ``amax_tensor``: bits of the largest magnitude in the tensor's finite blocks (one per tensor);
    ``amax_block``: bits of each block's amax. The float32 sequence, after Transformer Engine's
    NVFP4 reference (``M_s``, ``M_e``: the scale and element formats' largest values):

    - ``S = min(fl(fl(M_s * M_e) / amax_tensor), 2**126)`` (``2**126`` for an all-zero tensor), or
      ``S = 1`` without ``global_scale``; ``g = fl(1 / S)`` (the float32 per-tensor decode scale);
    - ``d = round_sat(min(fl(amax_block * fl(S * fl(1 / M_e))), M_s))`` in the scale format, nearest
      even (the block decode scale, stored as a code). The value rounded is finite, non-negative
      and at most ``M_s``, so no sign, NaN, infinity or overflow reaches the rounding: where
      `_rne.clamped_applies` (E4M3, E5M2 and the other narrow formats with subnormals down to at
      least ``2**-125``) it is `_rne.round_clamped`, a dozen operations, else the general
      `_rne.round_rne` onto the scale format's grid (the same bits). A float32 subnormal product
      (flushed to 0 by XLA:CPU, or not) rounds to ``d = 0``; so does an all-zero or non-finite block;
    - ``enc_b = min(fl(1 / fl(d * g)), FLT_MAX)`` (the block's encode scale; ``FLT_MAX`` for
      ``d = 0``), by `_bits.reciprocal_of_product` where ``d`` and ``g`` are normal or zero (the
      product rounded once, at float32's subnormal quantum where it is below ``2**-126``, then one
      division), else `_bits.mul_normal` or `_bits.mul_exact` and `_bits.reciprocal` (the same bits).
    """
    s_fmt, e_fmt = block_format.scale_format, block_format.element
    nonfinite = lax.ge(amax_block, U32(INF))
    if block_format.global_scale:
        m_prod = float(np.float32(s_fmt.max) * np.float32(e_fmt.max))
        cap = F32(ENCODE_CAP)
        s = select(lax.eq(amax_tensor, U32(0)), cap, lax.min(_const_over(m_prod, amax_tensor), cap))
        s, g = computed_together(s, lax.div(F32(1), s))  # one kernel for the two scalars, not two
    else:
        s = jnp.ones(amax_tensor.shape, F32)
        g = s
    mult = lax.mul(s, F32(np.float32(1) / np.float32(e_fmt.max)))
    block = select(nonfinite, U32(0), amax_block)
    wanted = _bits.to_bits(lax.min(_bits.mul_flushing(block, mult, nonnegative=True), F32(s_fmt.max)))
    if _rne.clamped_applies(s_fmt):  # wanted: finite, >= +0, <= M_s
        rounded = _rne.round_clamped(wanted, s_fmt)
    else:
        grid = _rne.Grid.for_scale(s_fmt, jnp.zeros((), I32), k_min=0)  # the scale format's own values
        rounded = _rne.round_rne(wanted, grid, s_fmt, saturate=True, negative_zero=False)
    (d,) = once(rounded)
    # d is normal or zero where every value of the scale format is
    normal = s_fmt.min_subnormal >= 2.0**-126 and global_scale_is_normal(block_format)
    if normal and s_fmt.precision <= 6:
        recip = _bits.reciprocal_of_product(d, _bits.to_bits(g), s_fmt.precision)
    else:
        mul = _bits.mul_normal if normal else _bits.mul_exact
        recip = _bits.reciprocal(mul(d, _bits.to_bits(g)))
    enc = lax.min(recip, _bits.from_bits(U32(FLT_MAX)))
    return _bits.from_bits(d), g, enc, nonfinite
