"""jax-scalify's public scaled ops in its calling form (``scaled_reshape(A, new_sizes, dimensions)``,
``scaled_exp(val)``...), where the rule `scalify` applies takes the equation's form
(``rule(operand, **params)``). Each op also takes the equation's parameters as keywords, and is what
`find_registered_scaled_op` returns for its primitive. Helpers of jax-scalify's ``jax_scalify.lax``
(``promote_types``, ``scaled_op_default_translation``...) are here too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu.scalify._array import ScaledArray, as_scaled_array
from fpemu.scalify._helpers import bind, data_of, promote_scales
from fpemu.scalify._primitives import scaled_set_scaling
from fpemu.scalify._registry import fallback_op, register_public, registered_rule
from fpemu.scalify._rules import scaled_add, scaled_sub
from fpemu.scalify._rules_select import scaled_max, scaled_min, unscale_compute

__all__ = [
    "check_scalar_scales",
    "promote_scale_types",
    "promote_types",
    "scaled_abs",
    "scaled_add_sub",
    "scaled_argmax",
    "scaled_argmin",
    "scaled_boolean_binary_op",
    "scaled_broadcast_in_dim",
    "scaled_cos",
    "scaled_eq",
    "scaled_exp",
    "scaled_ge",
    "scaled_gt",
    "scaled_le",
    "scaled_lt",
    "scaled_minmax",
    "scaled_ne",
    "scaled_neg",
    "scaled_op_default_translation",
    "scaled_reduce_max",
    "scaled_reduce_min",
    "scaled_reduce_precision",
    "scaled_reduce_window_max",
    "scaled_reduce_window_min",
    "scaled_reduce_window_sum",
    "scaled_reshape",
    "scaled_rev",
    "scaled_sin",
    "scaled_slice",
    "scaled_transpose",
]


def _scaled(value: Any) -> ScaledArray:
    return as_scaled_array(value) if not isinstance(value, ScaledArray) else value


def _same_scale(prim: Any, A: Any, params: dict) -> ScaledArray:
    A = _scaled(A)
    return ScaledArray(bind(prim, A.data, **params), A.scale)


# -- jax-scalify's helpers ------------------------------------------------------------------------------


def check_scalar_scales(*args: ScaledArray) -> None:
    """Raise ValueError unless every `ScaledArray` has a scalar scale."""
    for val in args:
        if np.ndim(val.scale) != 0:
            raise ValueError(f"a ScaledArray scale must be a scalar, got shape {np.shape(val.scale)}")


def promote_types(*args: Any) -> np.dtype:
    """The dtype JAX promotes ``args`` (dtypes) to."""
    out = np.dtype(args[0])
    for dtype in args[1:]:
        out = np.dtype(jnp.promote_types(out, dtype))
    return out


def promote_scale_types(*args: ScaledArray) -> Sequence[ScaledArray]:
    """The `ScaledArray`s with their scales cast to one common float dtype (integer scales: float32)."""
    return args if len(args) == 1 else promote_scales(*args)


def scaled_add_sub(A: ScaledArray, B: ScaledArray, binary_op: Callable) -> ScaledArray:
    """`scaled_add` (``binary_op`` ``lax.add``) or `scaled_sub` (``lax.sub``)."""
    if binary_op in (lax.sub, jnp.subtract):
        return scaled_sub(A, B)
    if binary_op in (lax.add, jnp.add):
        return scaled_add(A, B)
    raise ValueError(f"scaled_add_sub takes lax.add or lax.sub, got {binary_op!r}")


def scaled_minmax(prim: Any, lhs: ScaledArray, rhs: ScaledArray) -> ScaledArray:
    """`scaled_max` (``prim`` ``lax.max_p``) or `scaled_min` (``lax.min_p``)."""
    rules = {lax.max_p: scaled_max, lax.min_p: scaled_min}
    if prim not in rules:
        raise ValueError(f"scaled_minmax takes lax.max_p or lax.min_p, got {prim!r}")
    return rules[prim](_scaled(lhs), _scaled(rhs))


def scaled_op_default_translation(prim: Any, args: Sequence[Any], outscale: Any = None) -> Any:
    """The unscale fallback: ``prim`` on the unscaled ``args``, the result with scale 1 (or with
    ``outscale``, by `scaled_set_scaling`)."""
    outs = unscale_compute(prim, [_scaled(a) for a in args], {}, fill=True)
    out = outs if prim.multiple_results else outs[0]
    return out if outscale is None else scaled_set_scaling(out, outscale)


def scaled_boolean_binary_op(lhs: ScaledArray, rhs: ScaledArray, prim: Any) -> Any:
    """``prim`` (a comparison) on the unscaled values, computed in float32 or wider."""
    rule, _ = registered_rule(prim.name)
    if rule is None:
        raise ValueError(f"scaled_boolean_binary_op takes a comparison primitive, got {prim!r}")
    return rule(_scaled(lhs), _scaled(rhs))


# -- jax-scalify's calling forms ------------------------------------------------------------------------


@register_public("reshape")
def scaled_reshape(
    A: ScaledArray, new_sizes: Sequence[int], dimensions: Sequence[int] | None, **params: Any
) -> ScaledArray:
    """``s = sa``, ``data = reshape(da)``."""
    dims = None if dimensions is None else tuple(dimensions)
    return _same_scale(lax.reshape_p, A, {"new_sizes": tuple(new_sizes), "dimensions": dims, **params})


@register_public("broadcast_in_dim")
def scaled_broadcast_in_dim(
    A: ScaledArray, shape: Sequence[int], broadcast_dimensions: Sequence[int], **params: Any
) -> ScaledArray:
    """``s = sa``, ``data = broadcast_in_dim(da)``."""
    named = {"shape": tuple(shape), "broadcast_dimensions": tuple(broadcast_dimensions)}
    return _same_scale(lax.broadcast_in_dim_p, A, {**named, **params})


@register_public("reduce_precision")
def scaled_reduce_precision(A: ScaledArray, exponent_bits: int, mantissa_bits: int, **params: Any) -> ScaledArray:
    """``s = sa``, the data through ``lax.reduce_precision`` (jax-scalify's FP8 "cast": IEEE-like, no
    subnormals; `fpemu.scalify.ops.reduce_precision_on_forward` rounds to the exact formats)."""
    named = {"exponent_bits": int(exponent_bits), "mantissa_bits": int(mantissa_bits)}
    return _same_scale(lax.reduce_precision_p, A, {**named, **params})


@register_public("slice")
def scaled_slice(
    A: ScaledArray,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
    **params: Any,
) -> ScaledArray:
    """``s = sa``, ``data = slice(da)``."""
    named = {
        "start_indices": tuple(start_indices),
        "limit_indices": tuple(limit_indices),
        "strides": None if strides is None else tuple(strides),
    }
    return _same_scale(lax.slice_p, A, {**named, **params})


@register_public("transpose")
def scaled_transpose(A: ScaledArray, permutation: Sequence[int], **params: Any) -> ScaledArray:
    """``s = sa``, ``data = transpose(da)``."""
    return _same_scale(lax.transpose_p, A, {"permutation": tuple(permutation), **params})


@register_public("rev")
def scaled_rev(val: ScaledArray, dimensions: Sequence[int], **params: Any) -> ScaledArray:
    """``s = sa``, ``data = rev(da)``."""
    return _same_scale(lax.rev_p, val, {"dimensions": tuple(dimensions), **params})


@register_public("neg")
def scaled_neg(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa``, ``data = -da``."""
    return _same_scale(lax.neg_p, val, params)


@register_public("abs")
def scaled_abs(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa``, ``data = |da|``."""
    return _same_scale(lax.abs_p, val, params)


def _reduce(prim: Any, val: Any, axes: Sequence[int], params: dict) -> ScaledArray:
    return _same_scale(prim, val, {"axes": tuple(axes), **params})


@register_public("reduce_max")
def scaled_reduce_max(val: ScaledArray, axes: Sequence[int], **params: Any) -> ScaledArray:
    """``s = sa``, ``data = max(da)``."""
    return _reduce(lax.reduce_max_p, val, axes, params)


@register_public("reduce_min")
def scaled_reduce_min(val: ScaledArray, axes: Sequence[int], **params: Any) -> ScaledArray:
    """``s = sa``, ``data = min(da)``."""
    return _reduce(lax.reduce_min_p, val, axes, params)


def _window(prim: Any, val: Any, *window: Any, params: dict) -> ScaledArray:
    names = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
    named = {name: tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in w) for name, w in zip(names, window)}
    return _same_scale(prim, val, {**named, **params})


@register_public("reduce_window_sum")
def scaled_reduce_window_sum(
    val: ScaledArray,
    window_dimensions: Any,
    window_strides: Any,
    padding: Any,
    base_dilation: Any,
    window_dilation: Any,
    **params: Any,
) -> ScaledArray:
    """``s = sa``, ``data = reduce_window_sum(da)`` (the scale ignores the window size, as jax-scalify)."""
    window = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
    return _window(lax.reduce_window_sum_p, val, *window, params=params)


@register_public("reduce_window_min")
def scaled_reduce_window_min(
    val: ScaledArray,
    window_dimensions: Any,
    window_strides: Any,
    padding: Any,
    base_dilation: Any,
    window_dilation: Any,
    **params: Any,
) -> ScaledArray:
    """``s = sa``, ``data = reduce_window_min(da)``."""
    window = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
    return _window(lax.reduce_window_min_p, val, *window, params=params)


@register_public("reduce_window_max")
def scaled_reduce_window_max(
    val: ScaledArray,
    window_dimensions: Any,
    window_strides: Any,
    padding: Any,
    base_dilation: Any,
    window_dilation: Any,
    **params: Any,
) -> ScaledArray:
    """``s = sa``, ``data = reduce_window_max(da)``."""
    window = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
    return _window(lax.reduce_window_max_p, val, *window, params=params)


def _arg(prim: Any, val: Any, axes: Sequence[int], index_dtype: Any, params: dict) -> Any:
    return prim.bind(data_of(val), axes=tuple(axes), index_dtype=np.dtype(index_dtype), **params)


@register_public("argmax")
def scaled_argmax(val: ScaledArray, axes: Sequence[int], index_dtype: Any, **params: Any) -> Any:
    """``argmax(da)``: an unscaled integer array."""
    return _arg(lax.argmax_p, val, axes, index_dtype, params)


@register_public("argmin")
def scaled_argmin(val: ScaledArray, axes: Sequence[int], index_dtype: Any, **params: Any) -> Any:
    """``argmin(da)``: an unscaled integer array."""
    return _arg(lax.argmin_p, val, axes, index_dtype, params)


def _comparison(prim: Any) -> Callable:
    def compare(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> Any:
        return scaled_boolean_binary_op(lhs, rhs, prim)

    compare.__name__ = compare.__qualname__ = f"scaled_{prim.name}"
    compare.__doc__ = f"``{prim.name}`` of the unscaled values: an unscaled bool array."
    return register_public(prim.name)(compare)


scaled_eq = _comparison(lax.eq_p)
scaled_ne = _comparison(lax.ne_p)
scaled_gt = _comparison(lax.gt_p)
scaled_ge = _comparison(lax.ge_p)
scaled_lt = _comparison(lax.lt_p)
scaled_le = _comparison(lax.le_p)

# The unscale fallback as scaled ops: ``s = 1``, ``data = exp(da * sa)``...
_FALLBACKS = {prim.name: fallback_op(prim) for prim in (lax.exp_p, lax.cos_p, lax.sin_p)}


def scaled_exp(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = 1``, ``data = exp(da * sa)`` (``da * sa`` computed in float32 or wider)."""
    return _FALLBACKS["exp"](val, **params)


def scaled_cos(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = 1``, ``data = cos(da * sa)``."""
    return _FALLBACKS["cos"](val, **params)


def scaled_sin(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = 1``, ``data = sin(da * sa)``."""
    return _FALLBACKS["sin"](val, **params)
