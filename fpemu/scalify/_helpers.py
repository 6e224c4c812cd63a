"""Small functions the scale rules share: scale dtypes, safe division, re-scaling to a common scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu.scalify._arith import broadcast_arrays, is_numpy, mul
from fpemu.scalify._array import ScaledArray, all_static_anyscale, wide_dtype
from fpemu.scalify._pow2 import pow2_divide

_FLOAT_ORDER = ("float8", "bfloat16", "float16", "float32", "float64")


def is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


def float_dtype(dtype: Any) -> np.dtype:
    """``dtype`` if floating, else float32: the dtype in which a scale of that dtype computes (an
    integer scale, as jax-scalify's ``scaled_array([1.0], 3)`` makes, with a float32 scale: JAX's promotion)."""
    dtype = np.dtype(dtype)
    return dtype if is_float(dtype) else np.dtype(np.float32)


def common_float_dtype(*dtypes: Any) -> np.dtype | None:
    """The float dtype in which scales of ``dtypes`` compute together: the widest float one (float32 for
    float16 with bfloat16, as JAX promotes them); integer dtypes count as float32 only when no dtype is
    floating (jax-scalify's promotion, without its integer arithmetic)."""
    dtypes_ = {np.dtype(d) for d in dtypes}
    floats = {d for d in dtypes_ if is_float(d)} or {float_dtype(d) for d in dtypes_}
    if not floats:
        return None
    if len(floats) == 1:
        return floats.pop()
    if np.dtype(np.float64) in floats:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def scale_dtype_of(*values: Any) -> np.dtype | None:
    """The dtype computed scales take: `common_float_dtype` of the `ScaledArray` values' scales."""
    return common_float_dtype(*(v.scale.dtype for v in values if isinstance(v, ScaledArray)))


def with_scale_dtype(value: Any, dtype: Any) -> Any:
    if not isinstance(value, ScaledArray) or value.scale.dtype == dtype:
        return value
    return ScaledArray(value.data, value.scale.astype(dtype))


def promote_scales(*values: Any) -> list[Any]:
    """The values with their scales cast to one common float dtype (`scale_dtype_of`)."""
    dtype = scale_dtype_of(*values)
    return [with_scale_dtype(v, dtype) for v in values]


def api(*values: Any) -> Any:
    return np if all(is_numpy(v) for v in values) else jnp


def safe_div(lhs: Any, rhs: Any) -> Any:
    """``lhs / rhs``, and 0 where ``rhs`` is 0 (scales: a zero scale never makes a NaN)."""
    if is_numpy(lhs) and is_numpy(rhs):
        lhs, rhs = np.asarray(lhs), np.asarray(rhs)
        return np.divide(lhs, rhs, out=np.zeros(np.broadcast_shapes(lhs.shape, rhs.shape), rhs.dtype), where=rhs != 0)
    rhs = jnp.asarray(rhs)
    lhs = jnp.asarray(lhs).astype(rhs.dtype)
    lhs, rhs = broadcast_arrays(lhs, rhs)
    zero = lax.eq(rhs, lax.full_like(rhs, 0))
    return lax.select(zero, lax.full_like(rhs, 0), lax.div(lhs, lax.select(zero, lax.full_like(rhs, 1), rhs)))


def safe_reciprocal(val: Any) -> Any:
    """``1 / val``, and 0 where ``val`` is 0 (NumPy in, NumPy out)."""
    if is_numpy(val):
        val = np.asarray(val)
        return np.reciprocal(val, out=np.zeros(val.shape, val.dtype), where=val != 0)
    val = jnp.asarray(val)
    zero = lax.eq(val, lax.full_like(val, 0))
    return lax.select(zero, val, lax.div(lax.full_like(val, 1), lax.select(zero, lax.full_like(val, 1), val)))


def maximum(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if is_numpy(a) and is_numpy(b) else lax.max(jnp.asarray(a), jnp.asarray(b))


def minimum(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if is_numpy(a) and is_numpy(b) else lax.min(jnp.asarray(a), jnp.asarray(b))


def rescaled(value: ScaledArray, scale: Any, dtype: Any = None, *, pow2: bool = False) -> Any:
    """``value``'s data expressed in ``scale``: ``data * (value.scale / scale)`` (0 for a zero
    ``scale``), in ``dtype`` (default: the data's). A static ratio of 1 leaves the data alone.

    The product is computed in float32 (float64 if an operand is) and rounded once to ``dtype``:
    a ratio beyond the data format's range (``2**17`` for float16, the mantissa of a broadcast
    ``1e-5`` scalar) would otherwise become inf or 0 before the multiplication. ``pow2=True``
    says that ``scale`` is 0, +inf or a power of two (`pow2_round`'s result in a power-of-two
    mode): the ratio is then `pow2_divide`'s, the same quotient without a division."""
    dtype = np.dtype(value.dtype if dtype is None else dtype)
    scale = scale if is_float(scale.dtype) else scale.astype(float_dtype(scale.dtype))  # integer scales: in float
    value = with_scale_dtype(value, float_dtype(value.scale.dtype))
    if pow2 and not (is_numpy(value.scale) and is_numpy(scale)):
        ratio = pow2_divide(value.scale, scale)
    else:
        ratio = safe_div(value.scale, scale)
    if is_numpy(ratio) and np.all(ratio == 1):
        return value.data if value.dtype == dtype else value.data.astype(dtype)
    wide = wide_dtype(dtype, value.dtype, ratio.dtype)
    return mul(value.data.astype(wide), api(ratio).asarray(ratio).astype(wide)).astype(dtype)


def max_scale(values: Sequence[ScaledArray]) -> Any:
    """The largest scale of ``values``, ignoring those known to be 0 or ±inf (the ``0`` of
    ``max(x, 0)``: a static zero or infinity has any scale), unless all are."""
    candidates = [v for v in values if not all_static_anyscale(v)] or list(values)
    out = candidates[0].scale
    for v in candidates[1:]:
        out = maximum(out, v.scale)
    return out


def common(values: Sequence[ScaledArray], dtype: Any = None) -> tuple[Any, list[Any]]:
    """``(scale, datas)``: the values re-expressed in their largest scale (`max_scale`)."""
    values = promote_scales(*values)
    scale = max_scale(values)
    return scale, [rescaled(v, scale, dtype) for v in values]


def ones_scale(dtype: Any) -> np.ndarray:
    return np.ones((), float_dtype(dtype))


def unscale(value: Any, dtype: Any = None) -> Any:
    """A `ScaledArray` as a plain array (``data * scale`` computed wide, rounded to ``dtype``,
    default the data's); other values unchanged."""
    return value.to_array(dtype) if isinstance(value, ScaledArray) else value


def static_size(shape: Sequence[int], axes: Sequence[int]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


# Parameters of JAX's primitives that their public functions fill in and jax-scalify's calling forms
# (``scaled_reduce_sum(val, axes)``) leave out, with the functions' defaults (jax 0.10 to 0.12).
_BIND_DEFAULTS: dict[str, dict[str, Any]] = {
    **dict.fromkeys(("reduce_sum", "dot_general", "conv_general_dilated"), {"out_sharding": None}),
    **dict.fromkeys(("reshape", "broadcast_in_dim"), {"sharding": None}),
    "convert_element_type": {"sharding": None, "weak_type": False},
    **dict.fromkeys("exp exp2 log log1p expm1 tanh logistic sin cos tan sqrt rsqrt cbrt".split(), {"accuracy": None}),
}


def bind(prim: Any, *operands: Any, **params: Any) -> Any:
    """``prim.bind`` with the parameters JAX's public function would add when the caller leaves them out."""
    return prim.bind(*operands, **{**_BIND_DEFAULTS.get(prim.name, {}), **params})


def data_of(value: Any) -> Any:
    return value.data if isinstance(value, ScaledArray) else value
