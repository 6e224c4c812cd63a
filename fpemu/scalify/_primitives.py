"""The scale primitives: ``set_scaling``, ``stop_scaling``, ``get_data_scale`` (identities outside
`scalify`), with their abstract evaluation, lowering, JVP, transpose and batching rules, their
scaled rules, and the public functions, which act directly on `ScaledArray` operands (a primitive
cannot bind a `ScaledArray`: the dispatch happens before binding)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from fpemu._args import format_arg
from fpemu._ops.quantize import quantize
from fpemu.scalify._arith import mul
from fpemu.scalify._array import ScaledArray, asarray, is_static_one_scalar
from fpemu.scalify._config import get_scalify_config
from fpemu.scalify._helpers import common_float_dtype, float_dtype, is_float, rescaled
from fpemu.scalify._registry import ScaledPrimitiveType, register_rule

__all__ = ["get_data_scale", "quantize_data", "rebalance", "set_scaling", "stop_scaling"]


def _scale_value(scale: Any) -> Any:
    """A scale as an array: a `ScaledArray`'s value; Python numbers in JAX's 32-bit dtypes (as jax-scalify)."""
    if isinstance(scale, ScaledArray):
        return asarray(scale)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        return scale
    return np.asarray(scale, np.float32 if isinstance(scale, float) else np.int32)


def _is_plain(values: Any) -> bool:
    """Whether ``values`` is a concrete array outside any trace (where the scale primitives are identities)."""
    return not isinstance(values, (ScaledArray, jax.core.Tracer))


# -- set_scaling ------------------------------------------------------------------------------------

set_scaling_p = Primitive("set_scaling")
set_scaling_p.def_impl(lambda values, scale: values)
set_scaling_p.def_abstract_eval(lambda values, scale: values)
mlir.register_lowering(set_scaling_p, lambda ctx, values, scale: [values])
ad.deflinear2(set_scaling_p, lambda ct, values, scale: [ct, None])  # linear in values; scale a parameter
ad.primitive_jvps[set_scaling_p] = lambda primals, tangents: (
    set_scaling_p.bind(*primals),
    ad.instantiate_zeros(tangents[0]),
)


def _set_scaling_batch(args, dims):
    values, scale = args
    value_dim, scale_dim = dims
    if scale_dim is not None:  # one scale per batch element: not a scalar scale
        return values, value_dim
    return set_scaling_p.bind(values, scale), value_dim


batching.primitive_batchers[set_scaling_p] = _set_scaling_batch


def scaled_set_scaling(values: Any, scale: Any) -> ScaledArray:
    """``values`` as a `ScaledArray` with scale ``scale``: ``data = values / scale`` (re-scaled from
    its own scale if ``values`` is scaled; 0 for a zero scale)."""
    scale = _scale_value(scale)
    if np.ndim(scale) != 0:
        raise ValueError(f"set_scaling needs a scalar scale, got shape {np.shape(scale)}")
    if is_static_one_scalar(scale) and isinstance(values, ScaledArray):
        return values
    if not isinstance(values, ScaledArray):
        values = ScaledArray(values, np.ones((), float_dtype(scale.dtype)))
    return ScaledArray(rescaled(values, scale.astype(float_dtype(values.scale.dtype))), scale)


register_rule("set_scaling", kind="scale primitive", scaled_type=ScaledPrimitiveType.ALWAYS_SCALE)(
    lambda values, scale, **params: scaled_set_scaling(values, scale)
)


def set_scaling(values: Any, scale: Any) -> Any:
    """Set the scale of ``values`` to the scalar ``scale`` (the value is unchanged).

    Inside `scalify` (and on a `ScaledArray`): a `ScaledArray` with that scale, ``data = values /
    scale`` (the ratio of the scales computed in floating point, also for integer scales). Outside,
    on a plain array: the identity (the same array).
    """
    if isinstance(values, ScaledArray) or isinstance(scale, ScaledArray):
        return scaled_set_scaling(values, scale)
    if _is_plain(values):
        return values
    return set_scaling_p.bind(values, _scale_value(scale))


# -- stop_scaling -----------------------------------------------------------------------------------

stop_scaling_p = Primitive("stop_scaling")


def _stop_impl(values, *, dtype):
    return values if dtype is None else values.astype(dtype)


stop_scaling_p.def_impl(_stop_impl)
stop_scaling_p.def_abstract_eval(lambda values, *, dtype: values if dtype is None else values.update(dtype=dtype))
mlir.register_lowering(stop_scaling_p, mlir.lower_fun(_stop_impl, multiple_results=False))
ad.deflinear2(stop_scaling_p, lambda ct, values, *, dtype: [ct.astype(values.aval.dtype)])
batching.defvectorized(stop_scaling_p)


def scaled_stop_scaling(values: Any, dtype: Any = None, **params: Any) -> Any:
    """The plain array ``data * scale`` (in ``dtype``, default the data's)."""
    if isinstance(values, ScaledArray):
        return values.to_array(dtype)
    return values if dtype is None else values.astype(dtype)


register_rule("stop_scaling", kind="scale primitive")(scaled_stop_scaling)


def stop_scaling(values: Any, dtype: Any = None) -> Any:
    """The unscaled value of ``values`` (a plain array, cast to ``dtype`` if given): inside
    `scalify`, the end of scale propagation; outside, the identity (or a cast)."""
    dtype = None if dtype is None else np.dtype(dtype)
    if isinstance(values, ScaledArray):
        return scaled_stop_scaling(values, dtype)
    if _is_plain(values):
        return values if dtype is None else values.astype(dtype)
    return stop_scaling_p.bind(values, dtype=dtype)


# -- get_data_scale ---------------------------------------------------------------------------------

get_data_scale_p = Primitive("get_data_scale")
get_data_scale_p.multiple_results = True


def _get_impl(values, *, scale_dtype):
    return values, jnp.ones((), scale_dtype)


get_data_scale_p.def_impl(_get_impl)
get_data_scale_p.def_abstract_eval(lambda values, *, scale_dtype: (values, jax.core.ShapedArray((), scale_dtype)))
mlir.register_lowering(get_data_scale_p, mlir.lower_fun(_get_impl, multiple_results=True))


def _get_jvp(primals, tangents, *, scale_dtype):
    (values,), (tangent,) = primals, tangents
    outs = get_data_scale_p.bind(values, scale_dtype=scale_dtype)
    return outs, [ad.instantiate_zeros(tangent), ad.Zero(jax.core.ShapedArray((), scale_dtype))]


ad.primitive_jvps[get_data_scale_p] = _get_jvp


def _get_batch(args, dims, *, scale_dtype):
    data, scale = get_data_scale_p.bind(args[0], scale_dtype=scale_dtype)
    return (data, scale), (dims[0], None)


batching.primitive_batchers[get_data_scale_p] = _get_batch


def scaled_get_data_scale(values: Any, scale_dtype: Any = None, **params: Any) -> list:
    """``[data, scale]`` of a `ScaledArray`."""
    if isinstance(values, ScaledArray):
        scale = values.scale
        if scale_dtype is not None and not is_float(scale.dtype):  # an integer scale, traced as float
            scale = scale.astype(scale_dtype)
        return [values.data, scale]
    return [values, np.ones((), scale_dtype or values.dtype)]


register_rule("get_data_scale", kind="scale primitive")(scaled_get_data_scale)


def get_data_scale(values: Any) -> tuple[Any, Any]:
    """``(data, scale)``: of a `ScaledArray` (inside `scalify`, of the scaled value); of a plain
    array, ``(values, 1)`` with the scale in `ScalifyConfig.scale_dtype` (default: the array's dtype)."""
    if isinstance(values, ScaledArray):
        return values.data, values.scale
    scale_dtype = np.dtype(get_scalify_config().scale_dtype or values.dtype)
    if _is_plain(values):
        return values, np.ones((), scale_dtype)
    data, scale = get_data_scale_p.bind(values, scale_dtype=scale_dtype)
    return data, scale


def rebalance(values: Any, rebalance_scale: Any) -> Any:
    """Multiply the scale of ``values`` by ``rebalance_scale`` and divide the data by it (the value
    is unchanged; outside `scalify`, the identity on plain arrays: the same array).

    The new scale is computed in floating point: the two dtypes promoted as JAX does, an integer
    result made float32 (jax-scalify requires equal dtypes and multiplies integers as integers)."""
    if _is_plain(values):
        return values
    _, scale = get_data_scale(values)
    rebalance_scale = _scale_value(rebalance_scale)
    dtype = common_float_dtype(scale.dtype, rebalance_scale.dtype)
    return set_scaling(values, mul(scale.astype(dtype), rebalance_scale.astype(dtype)))


# -- quantize_data: round the data (not the value) to a format ----------------------------------------

quantize_data_p = Primitive("quantize_data")


def _quantize_impl(values, *, fmt):
    return quantize(values, fmt)


quantize_data_p.def_impl(_quantize_impl)
quantize_data_p.def_abstract_eval(lambda values, *, fmt: values)
mlir.register_lowering(quantize_data_p, mlir.lower_fun(_quantize_impl, multiple_results=False))
ad.primitive_jvps[quantize_data_p] = lambda primals, tangents, *, fmt: (
    quantize_data_p.bind(*primals, fmt=fmt),
    ad.instantiate_zeros(tangents[0]),
)  # straight through, as fpemu.quantize
batching.defvectorized(quantize_data_p)


def scaled_quantize_data(values: Any, *, fmt: Any) -> Any:
    """``s = sa``, ``data = quantize(da, fmt)``: the data rounded (the scale is not)."""
    if isinstance(values, ScaledArray):
        return ScaledArray(quantize(values.data, fmt), values.scale)
    return quantize(values, fmt)


register_rule("quantize_data", kind="scale primitive")(scaled_quantize_data)


def quantize_data(values: Any, fmt: Any) -> Any:
    """``values`` rounded to the format ``fmt`` with `fpemu.quantize` (nearest even): a
    `ScaledArray`'s data, or a plain array. The gradient is the identity."""
    fmt = format_arg(fmt, "dtype")
    if isinstance(values, ScaledArray):
        return scaled_quantize_data(values, fmt=fmt)
    return quantize_data_p.bind(values, fmt=fmt)
