"""Accumulator models of hardware matrix units: what a GPU's tensor core computes, bit for bit.

``accumulate="hopper_fp8"`` (`fpemu.matmul` and the other emulated dots) sums FP8 products the way
an NVIDIA Hopper GPU's FP8 tensor core does (the ``wgmma`` / QGMMA instructions behind cuBLAS's FP8
GEMMs). The model was measured on an H200 with designed and random dot products and matches every
recorded result (bench/RESULTS_gpu.md, tests/ops/test_hopper_fp8.py). docs/matmul.md states it:

- the products are exact;
- the contraction is taken in **groups of 32** consecutive products (one instruction's K), each
  added to the running sum ``acc`` (which starts at +0) in one fused step;
- the step aligns every term to ``emax``, the largest of the products' **exponent sums** ``e_a +
  e_b`` (each operand's exponent field: a subnormal counts as its format's ``emin``, and a product
  ``>= 2`` in significand does not raise it) and of ``acc``'s exponent; each term, and ``acc``, is
  **truncated toward zero** to a multiple of ``2**(emax - 13)``, and the truncated terms are added
  exactly;
- the sum is normalized and **truncated toward zero to 14 significant bits** (an e8m13 value):
  the new ``acc``.

With ``accumulate_every=P`` (a multiple of 32) the tensor-core sum restarts from +0 every P
products and is added to a float32 running sum with a float32 addition (round to nearest even):
cuBLAS's FP8 GEMM with ``precision=HIGHEST`` promotes every 128 products, DeepSeek-V3 does the
same by hand; ``accumulate_every=None`` never promotes, as cuBLAS's fast accumulation
(``precision=DEFAULT``) does.

NaN and infinities follow IEEE float32 arithmetic (a NaN product, or +inf and -inf, give NaN);
an exact zero sum is +0. Products of FP8 values never overflow or underflow float32, and neither
does any intermediate value here. Not yet settled by measurement: whether a zero operand takes
part in the alignment (here it does not) and whether a subnormal operand counts as its format's
``emin`` (here it does); tests/hopper_fp8_cases.py holds the dot products that decide both, for
the next GPU run.

Cost: every product is formed and aligned on its own, as a vectorized elementwise computation of
size M x N x K (no matrix unit does it), so this path is an emulator, not a fast one.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import Format
from fpemu._core.registry import get_format
from fpemu._jax.elementwise import pad_zeros, select

__all__ = ["ACCUMULATOR_MODELS", "GROUP", "TensorCore", "tensor_core", "tensor_core_sum"]

ACCUMULATOR_MODELS = ("hopper_fp8",)  # the names `accumulate=` takes besides formats
GROUP = 32  # products per fused step (one wgmma's K for FP8)
_FRACTION_BITS = 13  # bits kept below the alignment exponent, and below the sum's leading bit
_OPERAND_FORMATS = ("e4m3fn", "e5m2")  # the FP8 formats the hardware multiplies
_U32, _I32, _F32 = np.uint32, np.int32, np.float32  # constants: NumPy scalars of the operand's dtype
# float32's fields, read from the registry: the exponent field's shift, width mask and bias, the magnitude bits
_FP32 = get_format("fp32")
_FIELD_SHIFT, _FIELD_MAX, _BIAS = _FP32.mantissa_bits, (1 << _FP32.exponent_bits) - 1, _FP32.bias
_ABS = _FP32.sign_mask - 1
_NONE = -(1 << 20)  # the exponent of a term that takes no part in the alignment


@dataclasses.dataclass(frozen=True, kw_only=True)
class TensorCore:
    """A checked accumulator model (static: a jit argument): its name and the ``emin`` of each
    operand's format (the exponent a subnormal operand counts as)."""

    name: str
    lhs_emin: int
    rhs_emin: int


def tensor_core(name: str, lhs: Format, rhs: Format, every: int | None, work: Format) -> TensorCore:
    """The model ``name`` for operands holding ``lhs`` and ``rhs`` values, checked: FP8 operands,
    a float32 working dtype, and promotion on whole groups of 32 products."""
    operands = [(side, fmt) for side, fmt in (("lhs", lhs), ("rhs", rhs)) if fmt.name not in _OPERAND_FORMATS]
    if operands:
        side, fmt = operands[0]
        raise ValueError(
            f"accumulate={name!r} models the FP8 tensor core, which multiplies {' and '.join(_OPERAND_FORMATS)} "
            f"values; the {side} operand holds {fmt.name} values: pass {side}='e4m3fn' or {side}='e5m2'"
        )
    if work.name != "fp32":
        raise ValueError(f"accumulate={name!r} computes in float32; got {work.name} operands with x64 on")
    if every is not None and every % GROUP:
        raise ValueError(
            f"accumulate_every={every} with accumulate={name!r}: the tensor core adds {GROUP} products per "
            f"instruction, so its sum can be promoted every multiple of {GROUP} products (cuBLAS: 128), or "
            "never (None)"
        )
    return TensorCore(name=name, lhs_emin=lhs.emin, rhs_emin=rhs.emin)


def _exponent(x: jax.Array, emin: int) -> jax.Array:
    """The exponent field's value of each FP8 value held in float32 (a subnormal counts as ``emin``)."""
    return lax.max(_unbiased_exponent(x), _I32(emin))


def _unbiased_exponent(x: jax.Array) -> jax.Array:
    """The float32 exponent field of ``x`` less the bias (int32)."""
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    field = lax.bitwise_and(lax.shift_right_logical(bits, _U32(_FIELD_SHIFT)), _U32(_FIELD_MAX))
    return lax.sub(field.astype(jnp.int32), _I32(_BIAS))


def _pow2_field(biased: jax.Array) -> jax.Array:
    """The float32 bits of ``2**(biased - bias)`` for a biased exponent in [1, 254] (int32 in, uint32 out)."""
    return lax.shift_left(biased, _I32(_FIELD_SHIFT)).astype(jnp.uint32)


def _trunc(x: jax.Array) -> jax.Array:
    """``jnp.trunc`` of float32 ``x``: toward zero."""
    return select(lax.lt(x, _F32(0)), lax.ceil(x), lax.floor(x))


def _truncate_14_bits(x: jax.Array) -> jax.Array:
    """``x`` (float32, normal or zero) truncated toward zero to 14 significant bits; a zero is +0."""
    kept = ~((1 << (_FIELD_SHIFT - _FRACTION_BITS)) - 1) & 0xFFFFFFFF  # sign, exponent, 13 fraction bits
    bits = lax.bitwise_and(lax.bitcast_convert_type(x, jnp.uint32), _U32(kept))
    bits = select(lax.eq(lax.bitwise_and(bits, _U32(_ABS)), _U32(0)), _U32(0), bits)
    return lax.bitcast_convert_type(bits, jnp.float32)


def _group_step(acc: jax.Array, a: jax.Array, b: jax.Array, model: TensorCore) -> jax.Array:
    """``acc`` (B, M, N) after one fused step over the products of ``a`` (B, M, g) and ``b`` (B, g, N).

    Bound as `lax` calls, as the quantizers are (`fpemu._jax.elementwise`); size-1 axes broadcast."""
    p = lax.mul(lax.expand_dims(a, (3,)), lax.expand_dims(b, (1,)))  # (B, M, g, N): exact (FP8 products)
    finite = lax.is_finite(p)
    live = lax.bitwise_and(finite, lax.ne(p, _F32(0)))
    e = lax.add(
        lax.expand_dims(_exponent(a, model.lhs_emin), (3,)), lax.expand_dims(_exponent(b, model.rhs_emin), (1,))
    )
    emax = lax.reduce_max(select(live, e, _I32(_NONE)), (2,))
    acc_live = lax.bitwise_and(lax.is_finite(acc), lax.ne(acc, _F32(0)))
    emax = lax.max(emax, select(acc_live, _unbiased_exponent(acc), _I32(_NONE)))
    # The terms in units of 2**(emax - 13); emax lies in [-28, 127], so both powers of two are normal.
    shift = select(lax.eq(emax, _I32(_NONE)), _I32(0), lax.sub(_I32(_FRACTION_BITS), emax))
    up = lax.bitcast_convert_type(_pow2_field(lax.add(shift, _I32(_BIAS))), jnp.float32)
    down = lax.bitcast_convert_type(_pow2_field(lax.sub(_I32(_BIAS), shift)), jnp.float32)
    units = _trunc(lax.mul(select(live, p, _F32(0)), lax.expand_dims(up, (2,))))
    acc_units = _trunc(lax.mul(select(acc_live, acc, _F32(0)), up))
    total = lax.add(lax.reduce_sum(units, (2,)), acc_units)  # integers below 2**21: exact in any order
    finite_sum = _truncate_14_bits(lax.mul(total, down))
    # NaN and infinities: the IEEE float32 sum of the non-finite terms (0 when there are none).
    special = lax.add(lax.reduce_sum(select(finite, _F32(0), p), (2,)), select(lax.is_finite(acc), _F32(0), acc))
    return select(lax.eq(special, _F32(0)), finite_sum, special)


def tensor_core_sum(a3: jax.Array, b3: jax.Array, model: TensorCore) -> jax.Array:
    """The tensor core's sum of (B, M, k) @ (B, k, N), float32 operands holding FP8 values, from +0:
    a loop over groups of 32 products (the last one shorter)."""
    batch, m, k = a3.shape
    n = b3.shape[2]
    acc = jnp.zeros((batch, m, n), jnp.float32)
    groups = -(-k // GROUP)
    if groups == 0:
        return acc
    pad = groups * GROUP - k  # zero products take no part
    a4 = pad_zeros(a3.astype(jnp.float32), ((0, 0), (0, 0), (0, pad))).reshape(batch, m, groups, GROUP)
    b4 = pad_zeros(b3.astype(jnp.float32), ((0, 0), (0, pad), (0, 0))).reshape(batch, groups, GROUP, n)

    def step(acc, xs):
        a, b = xs
        return _group_step(acc, a, b, model), None

    acc, _ = lax.scan(step, acc, (a4.transpose(2, 0, 1, 3), b4.transpose(1, 0, 2, 3)))
    return acc
