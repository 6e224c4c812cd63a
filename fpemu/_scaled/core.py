"""The fast path: group layout, encode (scale, then round the elements) and decode, as pure JAX.

Nothing here validates arguments or defines gradients: `_quantize` and `_array` do that. Inputs are
float32; the element rounding is `fpemu.quantize` on the scaled values.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.modes import Rounding, StochasticVariant
from fpemu._core.registry import get_format
from fpemu._engine import stochastic
from fpemu._jax.elementwise import clamp, select
from fpemu._jax.reduce import magnitude_max
from fpemu._ops import codec
from fpemu._ops import quantize as element_quantize
from fpemu._ops import rounding_spec as element_spec
from fpemu._ops.fusion import computed_together, materialize
from fpemu._scaled import bits as _bits
from fpemu._scaled import rne as _rne
from fpemu._scaled import table as _table
from fpemu._scaled.bits import ABS, BIAS, F32, FIELD_MAX, FIELD_SHIFT, I32, IMPLICIT, INF, NAN, SIGN, U32
from fpemu._scaled.block_format import BlockFormat
from fpemu._scaled.layout import Layout, Work, group_max
from fpemu._scaled.scale import (
    exponent_field_applies,
    float_encode_scale,
    global_scale_is_normal,
    pow2_exponent,
    pow2_exponent_of_field,
    smallest_exponent,
    two_level_scales,
)

_FP32 = get_format("fp32")


def _is_nan_bits(b: jnp.ndarray) -> jnp.ndarray:
    return lax.gt(lax.bitwise_and(b, U32(ABS)), U32(INF))


def _exponent_of_scale_bits(sb: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(k, NaN mask) of float32 power-of-two scales given as bits: ``k`` the unbiased exponent field."""
    field = lax.bitwise_and(lax.shift_right_logical(sb, U32(FIELD_SHIFT)), U32(FIELD_MAX)).astype(I32)
    return lax.sub(field, I32(BIAS)), _is_nan_bits(sb)


def encode(
    x: jnp.ndarray,
    block_format: BlockFormat,
    layout: Layout,
    *,
    rounding: Rounding,
    key: jax.Array | None,
    random_bits: int | None,
    scale: jnp.ndarray | None = None,
    stochastic_variant: StochasticVariant = "floor",
    random: jnp.ndarray | None = None,
    probe: jnp.ndarray | None = None,
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray | None]:
    """(element values, scale leaf, global scale leaf or None) for a float32 array ``x``.

    Stochastic rounding of the elements draws its bits from ``key``, or takes ``random`` (explicit
    bits, broadcastable to ``x``): `fpemu.quantize` of the scaled values, in ``x``'s shape, so the
    key's bits are ``fpemu.stochastic_bits(key, x.shape, random_bits)`` whatever the layout.

    Without ``scale`` (decode scales), the scales come from each group's amax ("current scaling"), and a group holding NaN or inf gets the
    NaN scale and zero elements. Given scales are used as they are, and non-finite elements are
    rounded one by one.
    """
    bits = _bits.to_bits(x)
    w = Work(x.shape, layout, probe)
    xb = bits
    current = scale is None
    s_fmt = block_format.scale_format
    global_leaf = None
    nan = None
    if block_format.is_pow2:
        k, nan = _pow2_scales(bits, block_format, layout, scale)
        y = _bits.from_bits(_bits.scale_down(xb, w.per_element(k)))
        if block_format.scale_kind == "pow2":
            scale_leaf = select(nan, jnp.uint8(s_fmt.nan_code), lax.add(k, I32(s_fmt.bias)).astype(jnp.uint8))
        else:
            scale_leaf = _bits.from_bits(select(nan, U32(NAN), _bits.pow2_bits(k)))
    elif block_format.scale_kind == "fp32":
        if scale is None:
            enc, nan = float_encode_scale(group_max(lax.bitwise_and(bits, U32(ABS)), layout), block_format)
            # the encode scale and the decode scale (NaN for a non-finite group) in one kernel, not three
            enc, scale_leaf = computed_together(enc, select(nan, F32(jnp.nan), lax.div(F32(1), enc)))
        else:
            scale_leaf, enc = computed_together(
                scale, _bits.reciprocal(lax.bitwise_and(_bits.to_bits(scale), U32(ABS)))
            )
        y = _bits.mul_flushing(xb, w.per_element(enc))
    else:
        d, g, enc_b, nan = _narrow_scales(bits, block_format, layout, probe)
        y = _bits.mul_flushing(xb, w.per_element(enc_b))
        codes = codec.encode(d, s_fmt)  # exact: d is a value of the scale format
        scale_leaf = select(nan, jnp.asarray(s_fmt.nan_code, codes.dtype), codes)
        global_leaf = g if block_format.global_scale else None
    spec = element_spec.rounding_spec(
        block_format.element, rounding, block_format.saturate, True, key, random_bits, random=random,
        stochastic_variant=stochastic_variant,
    )  # fmt: skip
    values = element_quantize.round_checked(y, spec, key, random)
    if block_format.element.twos_complement:  # symmetric saturation: the most negative code (-2.0) is never produced
        values = lax.max(values, F32(-block_format.element.max))
    if current and nan is not None:  # every branch sets nan under current scaling
        values = select(w.per_element(nan), F32(0), values)
    return values, scale_leaf, global_leaf


def _narrow_scales(bits: jnp.ndarray, block_format: BlockFormat, layout: Layout, probe: jnp.ndarray | None = None):
    """`two_level_scales` (d, g, enc_b, NaN mask) from the blocks' and the tensor's amax.

    ``d`` is materialized whatever the array's size: its rounding into the scale format (dozens of
    operations per block) would otherwise be copied into each of its consumers' loops (the encode
    scale, the table or the codes, the elements' loop), which costs more compile time than the
    materialization's conditional, also on arrays below `fpemu._ops.fusion.MATERIALIZE_MIN_SIZE`."""
    amax_block = group_max(lax.bitwise_and(bits, U32(ABS)), layout)
    finite = select(lax.lt(amax_block, U32(INF)), amax_block, U32(0))  # blocks with NaN/inf do not count
    amax_tensor = magnitude_max(finite, tuple(range(bits.ndim)))
    # a predicate that repeats no chain: the GEMM's shared probe, else the tensor amax
    once = lambda *arrays: materialize(arrays, probe=amax_tensor if probe is None else probe)
    return two_level_scales(amax_tensor, amax_block, block_format, once=once)


def _by_table(block_format: BlockFormat, scale: jnp.ndarray | None, rounding: Rounding) -> bool:
    """Whether `quantize_dequantize` takes `_table`'s path: nearest even under current scaling, a
    narrow-scale block format (NVFP4) whose element has few values and whose products with the computed
    tensor scale `mul_normal` gives."""
    return (
        scale is None
        and rounding == "nearest_even"
        and _table.applies(block_format.element)
        and _tensor_products_are_normal(block_format)
    )


def _qdq_by_table(
    x: jnp.ndarray, block_format: BlockFormat, layout: Layout, *, split: bool = False, probe: jnp.ndarray | None = None
):
    """`quantize_dequantize` for `_by_table` block formats: the same bits, rounded by thresholds and with each
    block's ``fl(v * d * g)`` computed once per value (`fpemu._scaled.table`). ``split``: the pair of
    `quantize_dequantize_split` instead, each element's ``v * d`` (exact: a normal float32 of at most 8
    significant bits, or zero) and ``g``, with ``v`` rounded by `_round_element` (no table: the product
    is one float multiplication per element). NaN wherever a block holds NaN or ±inf; a float32
    subnormal ``x`` is scaled exactly (`_bits.mul_flushing`); the sign of zero is kept."""
    bits = _bits.to_bits(x)
    w = Work(x.shape, layout, probe)
    d, g, enc_b, nan = _narrow_scales(bits, block_format, layout, probe)  # d computed once: the table repeats no chain
    if split:  # each element's value times its block's d: exact (normal), as the table's entries are
        nan, enc_b, d = w.broadcast(nan, enc_b, d)  # d is materialized; enc_b and nan in the elements' loop
        y = _bits.to_bits(_bits.mul_flushing(bits, enc_b))
        v = _round_element(lax.bitwise_and(y, U32(ABS)), block_format.element)
        out = lax.bitwise_or(
            _bits.to_bits(lax.mul(_bits.from_bits(v), _bits.from_bits(d))), lax.bitwise_and(y, U32(SIGN))
        )
        return _bits.from_bits(select(nan, U32(NAN), out)), g
    nan, enc_b = w.materialized(nan, enc_b)
    values = np.array(_table.positive_values(block_format.element), np.float32)
    products = lax.mul(d[None], values.reshape((-1,) + (1,) * d.ndim))  # exact, normal
    products = _bits.mul_normal(_bits.to_bits(products), _bits.to_bits(g)[None])
    (table,) = w.materialized(products)
    *entries, nan, enc_b = w.broadcast(*(table[i] for i in range(len(values))), nan, enc_b)
    y = _bits.to_bits(_bits.mul_flushing(bits, enc_b))
    out = lax.bitwise_or(
        _table.round_to_table(lax.bitwise_and(y, U32(ABS)), entries, block_format.element),
        lax.bitwise_and(y, U32(SIGN)),
    )
    return _bits.from_bits(select(nan, U32(NAN), out))


def _round_element(magnitude: jnp.ndarray, fmt) -> jnp.ndarray:
    """float32 bits of `_table.round_to_table`'s nearest-even value of each magnitude (uint32 bits of a
    non-negative float32, or of NaN, which masks follow) in a `_table.applies` format: saturated to
    ``fmt.max`` (beyond it, inf and NaN patterns included: an integer minimum of the bits), then
    `_rne.round_clamped` where it applies (a dozen operations instead of a comparison and a selection
    per value), else the table of ``fmt``'s values."""
    if _rne.clamped_applies(fmt):
        return _rne.round_clamped(lax.min(magnitude, U32(_bits.constant_bits(fmt.max))), fmt)
    constants = np.array(_table.positive_values(fmt), np.float32).view(np.uint32)
    return _table.round_to_table(magnitude, [U32(c) for c in constants.tolist()], fmt)


def _by_stochastic(
    block_format: BlockFormat, scale: jnp.ndarray | None, rounding: Rounding, variant: StochasticVariant
) -> bool:
    """Whether `quantize_dequantize` takes `_qdq_stochastic`'s path: stochastic rounding of a narrow-scale
    block format (NVFP4) under current scaling, whose products `mul_normal` gives, with an element format and
    variant `fpemu._engine.stochastic` rounds."""
    return (
        scale is None
        and rounding == "stochastic"
        and _tensor_products_are_normal(block_format)
        and stochastic.applies(
            _FP32, block_format.element, saturate=block_format.saturate, subnormals=True, stochastic_variant=variant
        )
    )


def _qdq_stochastic(
    x: jnp.ndarray, block_format: BlockFormat, layout: Layout, *, key, random, random_bits, variant, split: bool = False,
    probe: jnp.ndarray | None = None,
):  # fmt: skip
    """`quantize_dequantize` (or, with ``split``, `quantize_dequantize_split`'s pair) for `_by_stochastic`
    block formats: `encode`'s scaled values and random bits, rounded by `fpemu._engine.stochastic`, times the
    block scale as `decode` multiplies them, without the scale codes' round trip."""
    bits = _bits.to_bits(x)
    w = Work(x.shape, layout, probe)
    d, g, enc_b, nan = _narrow_scales(bits, block_format, layout, probe)
    nan, enc_b, d = w.broadcast(nan, enc_b, d)  # d is materialized; enc_b and nan in the elements' loop
    spec = element_spec.rounding_spec(
        block_format.element,
        "stochastic",
        block_format.saturate,
        True,
        key,
        random_bits,
        random=random,
        stochastic_variant=variant,
    )  # `encode`'s rounding of the elements: the same random bits
    words = element_spec.random_words(element_spec.seeds_for(spec, key, random, x.shape), spec, x.shape)
    y = _bits.to_bits(_bits.mul_flushing(bits, enc_b))
    vb = stochastic.round_stochastic(
        y, block_format.element, saturate=bool(spec.saturate), random=words, k=spec.random_bits
    )
    out = _bits.to_bits(lax.mul(_bits.from_bits(vb), d))  # exact: `_products_are_normal`
    if not split:
        out = _bits.mul_normal(out, _bits.to_bits(g))
    # inf and NaN elements pass through, as in `decode`
    out = select(lax.ge(lax.bitwise_and(vb, U32(ABS)), U32(INF)), vb, out)
    out = _bits.from_bits(select(nan, U32(NAN), out))
    return (out, g) if split else out


def quantize_dequantize_split(
    x: jnp.ndarray, block_format: BlockFormat, layout: Layout, **kw: Any
) -> tuple[jnp.ndarray, jnp.ndarray | None]:
    """(blocks, t): float32 `quantize_dequantize` (``kw``: its keyword arguments) with the per-tensor
    scale ``t`` (shape ``(1,) * ndim``) taken out where `BlockFormat.has_tensor_scale`, so that
    ``quantize_dequantize == fl(blocks * t)``; blocks are NaN wherever it is NaN. Otherwise
    ``(quantize_dequantize, None)``."""
    if not block_format.has_tensor_scale(layout.axis):
        return quantize_dequantize(x, block_format, layout, **kw), None
    probe = kw.get("probe")
    if _by_table(block_format, kw.get("scale"), kw["rounding"]):
        return _qdq_by_table(x, block_format, layout, split=True, probe=probe)
    variant = kw.get("stochastic_variant", "floor")
    if _by_stochastic(block_format, kw.get("scale"), kw["rounding"], variant):
        random = {name: kw.get(name) for name in ("key", "random", "random_bits")}
        return _qdq_stochastic(x, block_format, layout, **random, variant=variant, split=True, probe=probe)
    values, scale_leaf, global_leaf = encode(x, block_format, layout, **kw)
    if global_leaf is not None:
        return decode(values, scale_leaf, None, block_format, layout), global_leaf
    t = scale_leaf.astype(F32).reshape((1,) * x.ndim)  # the one float32 scale, NaN for a NaN group
    return select(lax.ne(t, t), F32(np.nan), values), t


def _from_field(block_format: BlockFormat, scale) -> bool:
    """Whether `_pow2_scales` computes ``k`` from the groups' largest exponent fields: a few operations,
    recomputed in the elements' loop rather than materialized."""
    return scale is None and exponent_field_applies(block_format)


def _pow2_scales(
    bits: jnp.ndarray, block_format: BlockFormat, layout: Layout, scale
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(k, NaN mask) per group: from the amax (current scaling; the largest exponent field where
    `_from_field`) or from given power-of-two scales."""
    if _from_field(block_format, scale):
        return pow2_exponent_of_field(
            group_max(lax.shift_right_logical(lax.bitwise_and(bits, U32(ABS)), U32(FIELD_SHIFT)), layout), block_format
        )
    if scale is None:
        return pow2_exponent(group_max(lax.bitwise_and(bits, U32(ABS)), layout), block_format)
    sb = _bits.to_bits(scale)
    return _exponent_of_scale_bits(sb)


def _rne_on_grid(xb: jnp.ndarray, k: jnp.ndarray, block_format: BlockFormat, w: Work) -> jnp.ndarray:
    """float32 bits of round_nearest_even(x / 2**k) * 2**k (the element values times their scale)."""
    fmt = block_format.element
    grid = _rne.Grid(*w.broadcast(*_rne.Grid.for_scale(fmt, k, k_min=smallest_exponent(block_format))))
    saturate = block_format.saturate  # nearest even on a signed element: "sat_finite" is True, "ovf_inf" False
    clamp = saturate in (True, "sat_finite", "sat_propagate")
    keep_inf = saturate == "sat_propagate" and fmt.has_inf
    return _rne.round_rne(xb, grid, fmt, saturate=clamp, negative_zero=fmt.has_negative_zero, keep_inf=keep_inf)


def quantize_dequantize(
    x: jnp.ndarray,
    block_format: BlockFormat,
    layout: Layout,
    *,
    rounding: Rounding,
    key: jax.Array | None,
    random_bits: int | None,
    scale: jnp.ndarray | None = None,
    stochastic_variant: StochasticVariant = "floor",
    random: jnp.ndarray | None = None,
    probe: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """float32 ``decode(encode(x))``; for power-of-two block formats and nearest even, in one rounding pass
    (`_rne`: the same bits as encode and decode, 1.3-2x faster; its docstring has the numbers); for
    NVFP4-like block formats, by thresholds and per-block tables (`_qdq_by_table`, nearest even) or with the
    engine's fast stochastic rounding and no scale codes (`_qdq_stochastic`)."""
    if _by_table(block_format, scale, rounding):
        return _qdq_by_table(x, block_format, layout, probe=probe)
    if _by_stochastic(block_format, scale, rounding, stochastic_variant):
        return _qdq_stochastic(
            x, block_format, layout, key=key, random=random, random_bits=random_bits, variant=stochastic_variant,
            probe=probe,
        )  # fmt: skip
    if not (block_format.is_pow2 and rounding == "nearest_even"):
        values, scale_leaf, global_leaf = encode(
            x,
            block_format,
            layout,
            rounding=rounding,
            key=key,
            random_bits=random_bits,
            scale=scale,
            stochastic_variant=stochastic_variant,
            random=random,
            probe=probe,
        )
        return decode(values, scale_leaf, global_leaf, block_format, layout, computed_global=True)
    bits = _bits.to_bits(x)
    w = Work(x.shape, layout, probe)
    k, nan = _pow2_scales(bits, block_format, layout, scale)
    if not _from_field(block_format, scale):
        (k,) = w.materialized(k)  # the exponent's chain once; the grid's limits and the NaN mask in the elements' loop
    out = _rne_on_grid(bits, k, block_format, w)
    out = select(w.broadcast(nan), U32(NAN), out)
    return _bits.from_bits(out)


def _scale_nan_code(block_format: BlockFormat) -> int:
    """The NaN code of the block format's scale format (E8M0-like and narrow scale formats have one: `BlockFormat`
    checks it)."""
    code = block_format.scale_format.nan_code
    assert code is not None, block_format.scale_format.name
    return code


def scale_bits(scale_leaf: jnp.ndarray, block_format: BlockFormat) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(float32 bits of the decode scale, NaN mask) of each group, from the scale leaf."""
    kind = block_format.scale_kind
    if kind == "fp32":
        sb = _bits.to_bits(scale_leaf.astype(F32))
        return sb, _is_nan_bits(sb)
    if kind == "pow2":
        s_fmt = block_format.scale_format
        codes = scale_leaf.astype(I32)
        nan = lax.eq(codes, I32(_scale_nan_code(block_format)))
        # E8M0 codes are biased exponents; 2**-127 (code 0) is a float32 subnormal
        k = lax.sub(codes, I32(s_fmt.bias))
        sb = _bits.scale_pow2_bits(k)
        return sb, nan
    sb = _bits.to_bits(codec.decode(scale_leaf, block_format.scale_format))
    return sb, _is_nan_bits(sb)


def nan_scale_leaf(block_format: BlockFormat, shape: tuple[int, ...], dtype) -> jnp.ndarray:
    """A scale leaf of ``shape`` holding the NaN scale: the scale format's NaN code, or float32 NaN."""
    if block_format.scale_kind == "fp32":
        return jnp.full(shape, jnp.nan, F32)
    return jnp.full(shape, _scale_nan_code(block_format), dtype)


def mark_nan_groups(
    values: jnp.ndarray, scale_leaf: jnp.ndarray, block_format: BlockFormat, layout: Layout
) -> jnp.ndarray:
    """The scale leaf with the NaN scale in every group whose element values hold a NaN.

    For element formats without a NaN code (FP4, FP6, INT8), this is how a NaN element survives
    storage: OCP MX's NaN scale makes every element of its block NaN.
    """
    nan = lax.gt(group_max(lax.bitwise_and(_bits.to_bits(values.astype(F32)), U32(ABS)), layout), U32(INF))
    return select(nan, nan_scale_leaf(block_format, (), scale_leaf.dtype), scale_leaf)


def exponents(scale_leaf: jnp.ndarray, block_format: BlockFormat) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(k, NaN mask) of power-of-two scales."""
    if block_format.scale_kind == "pow2":
        codes = scale_leaf.astype(I32)
        return lax.sub(codes, I32(block_format.scale_format.bias)), lax.eq(codes, I32(_scale_nan_code(block_format)))
    sb = _bits.to_bits(scale_leaf.astype(F32))
    return _exponent_of_scale_bits(sb)


def decode(
    values: jnp.ndarray,
    scale_leaf: jnp.ndarray,
    global_leaf: jnp.ndarray | None,
    block_format: BlockFormat,
    layout: Layout,
    *,
    computed_global: bool = False,
) -> jnp.ndarray:
    """float32 ``values * scale`` (and ``* global``), each product rounded once; NaN-scale groups give NaN.

    ``computed_global``: ``global_leaf`` is `encode`'s (a normal float32 where
    `global_scale_is_normal`), not a stored one, which may be any positive float32.
    """
    w = Work(values.shape, layout)
    vb = _bits.to_bits(values.astype(F32))
    if block_format.is_pow2:
        k, nan = exponents(scale_leaf, block_format)
        out = _bits.scale_up(vb, w.per_element(k))
    else:
        sb, nan = scale_bits(scale_leaf, block_format)
        if block_format.scale_kind == "narrow" and _products_are_normal(block_format):  # exact in float32
            out = _bits.to_bits(lax.mul(_bits.from_bits(vb), _bits.from_bits(w.per_element(sb))))
        elif _elements_are_normal(block_format):  # float32 scales: mul_exact's bits, at about half the cost
            out = _bits.mul_scale(vb, w.per_element(sb))
        else:
            out = _bits.mul_exact(vb, w.per_element(sb))
        if block_format.scale_kind == "narrow" and global_leaf is not None:
            by_float = computed_global and _tensor_products_are_normal(block_format)
            mul = _bits.mul_normal if by_float else _bits.mul_exact
            out = mul(out, _bits.to_bits(global_leaf.astype(F32)))  # (1,) * ndim: broadcasts
        out = select(lax.ge(lax.bitwise_and(vb, U32(ABS)), U32(INF)), vb, out)  # inf and NaN elements pass through
    out = select(w.per_element(nan), U32(NAN), out)
    return _bits.from_bits(out)


def _elements_are_normal(block_format: BlockFormat) -> bool:
    """Whether every nonzero element value is a normal float32 of at most 8 significant bits, as
    `_bits.mul_scale` takes them."""
    element = block_format.element
    return element.min_subnormal >= 2.0**-126 and element.precision <= 8


def _products_are_normal(block_format: BlockFormat) -> bool:
    """Whether every nonzero element value times every nonzero narrow scale is a normal float32
    (then the product, of at most 8 significant bits, is exact in float arithmetic)."""
    return block_format.element.min_subnormal * block_format.scale_format.min_subnormal >= 2.0**-126


def _tensor_products_are_normal(block_format: BlockFormat) -> bool:
    """Whether `mul_normal` gives every ``fl(v * d * g)`` of a narrow-scale block format: ``v * d`` is a
    normal float32 or zero, and the tensor scale ``g`` `two_level_scales` computes is normal."""
    return (
        block_format.scale_kind == "narrow"
        and _products_are_normal(block_format)
        and global_scale_is_normal(block_format)
    )


def grad_scale(scale_leaf: jnp.ndarray, global_leaf: jnp.ndarray | None, block_format: BlockFormat) -> jnp.ndarray:
    """The per-group scale the straight-through gradient divides by (float32, normal, positive).

    The decode scale, except: NaN or zero scales count as 1 and scales below 2**-126 as 2**-126
    (so that no subnormal reaches XLA's float arithmetic).
    """
    if block_format.is_pow2:
        k, nan = exponents(scale_leaf, block_format)
        sb = _bits.pow2_bits(clamp(k, -126, 127))
    else:
        sb, nan = scale_bits(scale_leaf, block_format)
        if block_format.scale_kind == "narrow" and global_leaf is not None:
            sb = _bits.mul_exact(sb, _bits.to_bits(global_leaf.astype(F32)))
        sb = lax.bitwise_and(sb, U32(ABS))
        nan = lax.bitwise_or(lax.bitwise_or(nan, lax.eq(sb, U32(0))), lax.ge(sb, U32(INF)))
        sb = lax.max(sb, U32(IMPLICIT))
    return _bits.from_bits(select(nan, _bits.to_bits(F32(1)), sb))


def resolve_axis(axis: int | None, ndim: int) -> int | None:
    if axis is None:
        return None
    return axis % ndim if ndim else axis


def zeros_tangent(leaf):
    """A zero tangent for a leaf: float0 for integer leaves, None for None."""
    if leaf is None:
        return None
    if jnp.issubdtype(leaf.dtype, jnp.integer):
        return np.zeros(leaf.shape, dtype=jax.dtypes.float0)
    return jnp.zeros(leaf.shape, leaf.dtype)
