"""Scale rules of selection, data movement with several operands, casts, comparisons and the
unscale-compute fallback (elementwise functions whose result does not scale with the input)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import fits
from fpemu._core.registry import get_format
from fpemu._jax.compat import lax_primitive
from fpemu._ops.quantize import quantize
from fpemu.scalify._array import ScaledArray, as_scaled_array, wide_dtype
from fpemu.scalify._helpers import (
    bind,
    common,
    data_of,
    is_float,
    ones_scale,
    promote_scales,
    rescaled,
    scale_dtype_of,
    unscale,
)
from fpemu.scalify._registry import primitive_name, register_fallback_op, register_public, register_rule

# -- the max of the scales -------------------------------------------------------------------------


def _minmax(prim, lhs: ScaledArray, rhs: ScaledArray, params: dict) -> ScaledArray:
    scale, (a, b) = common((lhs, rhs))
    return ScaledArray(prim.bind(a, b, **params), scale)


@register_rule("max", kind="rule")
def scaled_max(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> ScaledArray:
    """``s = max(sa, sb)`` (a static 0 or ±inf operand takes the other's scale: ``relu``),
    ``data = max(da * sa/s, db * sb/s)``."""
    return _minmax(lax.max_p, lhs, rhs, params)


@register_rule("min", kind="rule")
def scaled_min(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> ScaledArray:
    """As `scaled_max`, with ``min``."""
    return _minmax(lax.min_p, lhs, rhs, params)


@register_rule("clamp", kind="rule")
def scaled_clamp(lo: ScaledArray, x: ScaledArray, hi: ScaledArray, **params: Any) -> ScaledArray:
    """``clamp(lo, x, hi) = min(max(x, lo), hi)``: the max of the scales (static 0/±inf ignored)."""
    scale, (a, b, c) = common((lo, x, hi))
    return ScaledArray(lax.clamp_p.bind(a, b, c, **params), scale)


@register_rule("select_n", kind="rule")
def scaled_select_n(which: Any, *cases: ScaledArray, **params: Any) -> ScaledArray:
    """``s = max(case scales)`` (static 0/±inf cases ignored), the cases' data re-scaled to it;
    the predicate is used as it is."""
    scale, datas = common(cases)
    return ScaledArray(lax.select_n_p.bind(data_of(which), *datas, **params), scale)


@register_rule("concatenate", kind="rule")
def concatenate_rule(*operands: ScaledArray, **params: Any) -> ScaledArray:
    """``s = max(operand scales)``, the operands' data re-scaled to it."""
    scale, datas = common(operands)
    return ScaledArray(lax.concatenate_p.bind(*datas, **params), scale)


@register_public("concatenate")
def scaled_concatenate(operands: Sequence[ScaledArray], dimension: int, **params: Any) -> ScaledArray:
    """``s = max(operand scales)``, the operands' data re-scaled to it (jax-scalify's calling form:
    a sequence of operands)."""
    return concatenate_rule(*(as_scaled_array(v) for v in operands), dimension=dimension, **params)


@register_rule("stack", kind="rule")
def scaled_stack(*operands: ScaledArray, **params: Any) -> ScaledArray:
    """``s = max(operand scales)``, the operands' data re-scaled to it (as `scaled_concatenate`)."""
    scale, datas = common(operands)
    return ScaledArray(lax.stack_p.bind(*datas, **params), scale)


@register_rule("unstack", kind="same scale")
def scaled_unstack(operand: ScaledArray, **params: Any) -> list:
    """``s = sa`` for every piece."""
    return [ScaledArray(piece, operand.scale) for piece in lax.unstack_p.bind(operand.data, **params)]


@register_rule("pad", kind="rule")
def scaled_pad(val: ScaledArray, padding_value: Any, padding_config: Any, **params: Any) -> ScaledArray:
    """``s = sa``; the padding value (a `ScaledArray`, an array or a Python number) is expressed in
    ``sa`` (jax-scalify takes only a zero)."""
    if not isinstance(padding_value, ScaledArray):
        padding_value = as_scaled_array(np.asarray(padding_value, np.dtype(val.dtype)))
    val, padding_value = promote_scales(as_scaled_array(val), padding_value)
    value = rescaled(padding_value, val.scale, val.dtype)
    config = tuple(tuple(int(n) for n in dim) for dim in padding_config)
    return ScaledArray(lax.pad_p.bind(val.data, value, padding_config=config, **params), val.scale)


def _indexing(prim):
    def rule(operand: ScaledArray, *indices: Any, **params: Any) -> ScaledArray:
        return ScaledArray(prim.bind(operand.data, *map(data_of, indices), **params), operand.scale)

    rule.__name__ = f"scaled_{prim.name}"
    rule.__doc__ = f"``s = sa``, ``data = {prim.name}(da, indices)`` (indices are not scaled)."
    return rule


def _update(prim):
    """``dynamic_update_slice`` and every ``scatter``: the max of the operand's and the update's
    scales (a static-zero operand, as in the transpose of a gather, takes the update's)."""

    def rule(operand: ScaledArray, *rest: Any, **params: Any) -> ScaledArray:
        if prim.name == "dynamic_update_slice":
            update, indices = rest[0], rest[1:]
            scale, (a, u) = common((operand, update))
            return ScaledArray(prim.bind(a, u, *map(data_of, indices), **params), scale)
        indices, update = rest[0], rest[1]
        scale, (a, u) = common((operand, update))
        return ScaledArray(prim.bind(a, data_of(indices), u, **params), scale)

    rule.__name__ = f"scaled_{prim.name.replace('-', '_')}"
    return rule


for _prim in (lax.dynamic_slice_p, lax.gather_p):
    register_rule(_prim.name, kind="same scale")(_indexing(_prim))
for _prim in (lax.dynamic_update_slice_p, lax.scatter_p, lax.scatter_add_p, lax.scatter_sub_p, lax.scatter_min_p,
              lax.scatter_max_p):  # fmt: skip
    register_rule(_prim.name, kind="max scale")(_update(_prim))


@register_rule("split", kind="same scale")
def scaled_split(operand: ScaledArray, **params: Any) -> list:
    """``s = sa`` for every piece."""
    return [ScaledArray(piece, operand.scale) for piece in lax.split_p.bind(operand.data, **params)]


@register_rule("sort", kind="same scale")
def scaled_sort(*operands: Any, **params: Any) -> list:
    """Each operand keeps its scale; keys compare data (a positive scale changes no order)."""
    outs = lax.sort_p.bind(*map(data_of, operands), **params)
    return [ScaledArray(o, v.scale) if isinstance(v, ScaledArray) else o for o, v in zip(outs, operands)]


@register_rule("top_k", kind="same scale")
def scaled_top_k(operand: ScaledArray, *rest: Any, **params: Any) -> list:
    """Values keep ``sa``; indices are unscaled."""
    values, indices = lax.top_k_p.bind(operand.data, *map(data_of, rest), **params)
    return [ScaledArray(values, operand.scale), indices]


@register_rule("optimization_barrier", kind="same scale")
def scaled_optimization_barrier(*operands: Any, **params: Any) -> list:
    """Every operand (data and scale) through the barrier."""
    return list(lax.optimization_barrier(list(operands)))


# -- casts -------------------------------------------------------------------------------------------

# Dtypes `fpemu.quantize` rounds in (it returns values of the format in the input's dtype).
_QUANTIZE_INPUTS = ("float16", "bfloat16", "float32", "float64")


def cast_data(data: Any, new_dtype: Any) -> Any:
    """``data`` cast to ``new_dtype``; a narrowing cast to an ml_dtypes format (FP8, FP6, FP4)
    rounds once with `fpemu.quantize` (OCP formats, subnormals kept), then casts exactly; casts to
    float16, bfloat16 and float32 are XLA's (IEEE nearest even, subnormals kept)."""
    new_dtype = np.dtype(new_dtype)
    src = np.dtype(data.dtype)
    if src == new_dtype or not (is_float(src) and is_float(new_dtype)):
        return data.astype(new_dtype)
    source, target = get_format(src), get_format(new_dtype)
    ieee = new_dtype.name in _QUANTIZE_INPUTS  # XLA's float16/bfloat16/float32 casts: IEEE nearest even
    if not ieee and src.name in _QUANTIZE_INPUTS and fits(target, source) and not fits(source, target):
        data = quantize(jnp.asarray(data), target)
    return data.astype(new_dtype)


@register_rule("convert_element_type", kind="rule")
def scaled_convert_element_type(
    A: ScaledArray, new_dtype: Any, weak_type: bool = False, sharding: Any = None, **params: Any
) -> Any:
    """Float to float: ``s = sa``, the data cast (narrowing through `fpemu.quantize`); to an
    integer or bool type: the unscaled value cast (an unscaled result)."""
    if not is_float(new_dtype):
        return lax.convert_element_type(A.to_array(wide_dtype(A.dtype, A.scale.dtype)), new_dtype)
    return ScaledArray(cast_data(A.data, new_dtype), A.scale)


# -- unscaled results --------------------------------------------------------------------------------


@register_rule("sign", kind="rule")
def scaled_sign(val: ScaledArray, **params: Any) -> ScaledArray:
    """``data = sign(da)``, ``s = 1``."""
    return ScaledArray(lax.sign(val.data), ones_scale(val.scale.dtype))


@register_rule("is_finite", kind="data")
def scaled_is_finite(val: ScaledArray, **params: Any) -> Any:
    """``is_finite(da) & is_finite(sa)``: an unscaled bool array."""
    return lax.bitwise_and(lax.is_finite(val.data), lax.is_finite(jnp.asarray(val.scale)))


def _compare(prim):
    def rule(lhs: Any, rhs: Any, **params: Any) -> Any:
        dtype = wide_dtype(
            *(np.dtype(v.dtype) for v in (lhs, rhs)),
            *(np.dtype(v.scale.dtype) for v in (lhs, rhs) if isinstance(v, ScaledArray)),
        )
        return prim.bind(unscale(lhs, dtype), unscale(rhs, dtype), **params)

    rule.__name__ = f"scaled_{prim.name}"
    rule.__doc__ = f"``{prim.name}`` of the unscaled values (computed in float32 or wider): an unscaled bool array."
    return rule


for _prim in (lax.eq_p, lax.ne_p, lax.lt_p, lax.le_p, lax.gt_p, lax.ge_p):
    register_rule(_prim.name, kind="unscaled values")(_compare(_prim))


@register_rule("log", kind="rule")
def scaled_log(val: ScaledArray, **params: Any) -> ScaledArray:
    """``data = log(da) + log(sa)``, ``s = 1``."""
    log_scale = lax.log(jnp.asarray(val.scale)).astype(val.dtype)
    return ScaledArray(lax.add(bind(lax.log_p, val.data, **params), log_scale), ones_scale(val.scale.dtype))


def unscale_compute(prim, operands: list, params: dict, *, fill: bool = False) -> list:
    """The fallback: unscale the operands (``data * scale`` computed in float32 or wider, rounded
    to the data dtype), compute the primitive, return float results with scale 1 (in the
    operands' scale dtype) and other results unscaled."""
    dtype = scale_dtype_of(*operands)
    values = [unscale(v) for v in operands]
    outs = bind(prim, *values, **params) if fill else prim.bind(*values, **params)
    outs = list(outs) if prim.multiple_results else [outs]
    one = ones_scale(dtype) if dtype is not None else None
    return [ScaledArray(o, one) if one is not None and is_float(o.dtype) else o for o in outs]


@register_fallback_op
def fallback_op(prim: Any) -> Callable:
    """The unscale fallback of ``prim`` (a primitive, or the name of one of ``jax.lax``) as a scaled
    op in jax-scalify's calling form (``scaled_exp(val)``): `unscale_compute` of the operands."""
    name = primitive_name(prim)

    def scaled_op(*args: Any, **params: Any) -> Any:
        primitive = lax_primitive(name) if isinstance(prim, str) else prim
        if primitive is None:
            raise NotImplementedError(f"jax.lax has no primitive {name!r} in this JAX release")
        operands = [a if isinstance(a, ScaledArray) else jnp.asarray(a) for a in args]
        outs = unscale_compute(primitive, operands, params, fill=True)
        return outs if primitive.multiple_results else outs[0]

    scaled_op.__name__ = scaled_op.__qualname__ = f"scaled_{name}"
    scaled_op.__doc__ = f"``{name}`` of the unscaled operands; float results with scale 1 (the unscale fallback)."
    return scaled_op
