"""Scale rules of arithmetic, matmuls and reductions (the unit-scaling rules of jax-scalify).

Each rule is written once against its formula (docs/scalify.md lists them); ``round_scale`` rounds
a computed scale as the current `ScalifyConfig` says, ``round_static`` a static factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import lax

from fpemu._jax.compat import lax_primitive
from fpemu.scalify._arith import add, div, is_numpy, mul, sqrt
from fpemu.scalify._array import ScaledArray
from fpemu.scalify._config import get_scalify_config
from fpemu.scalify._helpers import (
    bind,
    maximum,
    minimum,
    promote_scales,
    rescaled,
    safe_div,
    static_size,
)
from fpemu.scalify._pow2 import Pow2RoundMode, pow2_round_down
from fpemu.scalify._registry import register_rule, round_scale, round_static

# -- add, sub: sqrt(sa**2 + sb**2), rounded -----------------------------------------------------------


def add_scale(sa: Any, sb: Any) -> Any:
    """``sqrt(sa**2 + sb**2)`` computed as ``max * sqrt(1 + (min/max)**2)`` (no overflow), rounded.

    A traced result is then divided by a 1 computed at run time (``pow2_round_down(1 +
    (min/max)**2)``, at most 1; NaN gives inf, so 1 too): the quotient is the scale itself, bit for
    bit, but XLA sees a division, computes the scale once in the kernel of the square root and
    passes it to the fusions that use it. Without it, XLA copies the scale's whole chain of cheap
    scalar ops (every product, maximum and power-of-two rounding of the scales before it, back to
    the previous such kernel) into every fusion that uses it: a scalified transformer training
    step compiled to an XLA program of 14 times the plain one's instructions (bench/RESULTS_scalify.md)."""
    high, low = maximum(sa, sb), minimum(sa, sb)
    ratio = safe_div(low, high)
    square = add(mul(ratio, ratio), ratio.dtype.type(1))  # in [1, 2], or NaN
    scale = round_scale(mul(high, sqrt(square)))
    if is_numpy(scale):
        return scale
    one = lax.min(pow2_round_down(square), lax.full_like(square, 1))
    return lax.div(scale, one.astype(scale.dtype))


def _add_sub(op, a: ScaledArray, b: ScaledArray) -> ScaledArray:
    a, b = promote_scales(a, b)
    scale = add_scale(a.scale, b.scale)
    pow2 = get_scalify_config().rounding_mode != Pow2RoundMode.NONE  # the scale is 0, +inf or a power of two
    return ScaledArray(op(rescaled(a, scale, pow2=pow2), rescaled(b, scale, pow2=pow2)), scale)


@register_rule("add", "add_any", kind="rule")
def scaled_add(A: ScaledArray, B: ScaledArray, **params: Any) -> ScaledArray:
    """``s = pow2(sqrt(sa**2 + sb**2))``, ``data = da * sa/s + db * sb/s``."""
    return _add_sub(lax.add, A, B)


@register_rule("sub", kind="rule")
def scaled_sub(A: ScaledArray, B: ScaledArray, **params: Any) -> ScaledArray:
    """As `scaled_add`, with ``-``."""
    return _add_sub(lax.sub, A, B)


# -- products -----------------------------------------------------------------------------------------


@register_rule("mul", kind="rule")
def scaled_mul(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa * sb``, ``data = da * db``."""
    lhs, rhs = promote_scales(lhs, rhs)
    return ScaledArray(lax.mul(lhs.data, rhs.data), mul(lhs.scale, rhs.scale))


@register_rule("div", kind="rule")
def scaled_div(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa / sb``, ``data = da / db``."""
    lhs, rhs = promote_scales(lhs, rhs)
    return ScaledArray(lax.div(lhs.data, rhs.data), div(lhs.scale, rhs.scale))


def _power(scale: Any, y: int) -> Any:
    if isinstance(scale, (np.ndarray, np.generic)):
        return np.asarray(np.power(scale, y, dtype=scale.dtype))
    return lax.integer_pow(scale, y)


@register_rule("integer_pow", kind="rule")
def scaled_integer_pow(A: ScaledArray, y: int, **params: Any) -> ScaledArray:
    """``s = sa ** y``, ``data = da ** y``."""
    (A,) = promote_scales(A)
    return ScaledArray(lax.integer_pow(A.data, y), _power(A.scale, y))


@register_rule("square", kind="rule")
def scaled_square(A: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa ** 2``, ``data = da ** 2``."""
    (A,) = promote_scales(A)
    return ScaledArray(lax.square(A.data), _power(A.scale, 2))


@register_rule("sqrt", kind="rule")
def scaled_sqrt(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sqrt(sa)``, ``data = sqrt(da)``."""
    (val,) = promote_scales(val)
    return ScaledArray(lax.sqrt(val.data), sqrt(val.scale))


@register_rule("rsqrt", kind="rule")
def scaled_rsqrt(A: ScaledArray, **params: Any) -> ScaledArray:
    """``s = 1 / sqrt(sa)``, ``data = rsqrt(da)``."""
    (A,) = promote_scales(A)
    return ScaledArray(lax.rsqrt(A.data), div(A.scale.dtype.type(1), sqrt(A.scale)))


# -- matmuls: s = sa * sb * pow2(sqrt(K)), data divided by the same factor ------------------------------


def _unit_factor(size: int, dtype: Any) -> np.ndarray:
    """``pow2(sqrt(size))`` as a static scalar of ``dtype``."""
    return np.asarray(round_static(np.asarray(np.sqrt(np.float64(size)), np.float32))).astype(dtype)


def _matmul(lhs: ScaledArray, rhs: ScaledArray, size: int, compute) -> ScaledArray:
    lhs, rhs = promote_scales(lhs, rhs)
    factor = _unit_factor(size, lhs.scale.dtype)
    data = compute(lhs.data, rhs.data)
    if factor != 1:
        data = div(data, factor.astype(data.dtype))
    return ScaledArray(data, mul(mul(lhs.scale, rhs.scale), factor))


@register_rule("dot_general", kind="rule")
def scaled_dot_general(
    lhs: ScaledArray,
    rhs: ScaledArray,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
    **params: Any,
) -> ScaledArray:
    """``s = sa * sb * pow2(sqrt(K))`` with ``K`` the product of the contracting dimensions (any
    number of them, batch dimensions allowed), ``data = dot(da, db) / pow2(sqrt(K))``. Every other
    parameter (``out_sharding``...) is passed on."""
    (contract, rcontract), (batch, rbatch) = dimension_numbers
    dimension_numbers = ((tuple(contract), tuple(rcontract)), (tuple(batch), tuple(rbatch)))
    size = static_size(lhs.shape, contract)
    params = {"precision": precision, "preferred_element_type": preferred_element_type, **params}

    def compute(a, b):
        return bind(lax.dot_general_p, a, b, dimension_numbers=dimension_numbers, **params)

    return _matmul(lhs, rhs, size, compute)


@register_rule("conv_general_dilated", kind="rule")
def scaled_conv_general_dilated(lhs: ScaledArray, rhs: ScaledArray, **params: Any) -> ScaledArray:
    """As `scaled_dot_general`, with ``K`` the kernel's size per output feature (input features
    per group times the window) (jax-scalify keeps ``sa * sb``)."""
    out_feature = params["dimension_numbers"].rhs_spec[0]
    size = rhs.size // max(rhs.shape[out_feature], 1)

    def compute(a, b):
        return bind(lax.conv_general_dilated_p, a, b, **params)

    return _matmul(lhs, rhs, size, compute)


# -- reductions -----------------------------------------------------------------------------------


@register_rule("reduce_sum", kind="rule")
def scaled_reduce_sum(val: ScaledArray, axes: Any, **params: Any) -> ScaledArray:
    """``s = sa * pow2(sqrt(N))`` with ``N`` the number of elements summed, ``data = sum(da) / pow2(sqrt(N))``."""
    (val,) = promote_scales(val)
    factor = _unit_factor(static_size(val.shape, axes), val.scale.dtype)
    axes = tuple(axes)
    data = bind(lax.reduce_sum_p, val.data, axes=axes, **params)
    if factor != 1:
        data = div(data, factor.astype(data.dtype))
    return ScaledArray(data, mul(val.scale, factor))


@register_rule("cumsum", kind="rule")
def scaled_cumsum(val: ScaledArray, axis: int, **params: Any) -> ScaledArray:
    """As `scaled_reduce_sum` along ``axis`` (the last partial sum is the whole sum)."""
    (val,) = promote_scales(val)
    factor = _unit_factor(val.shape[axis], val.scale.dtype)
    data = lax.cumsum_p.bind(val.data, axis=axis, **params)
    if factor != 1:
        data = div(data, factor.astype(data.dtype))
    return ScaledArray(data, mul(val.scale, factor))


@register_rule("reduce_prod", kind="rule")
def scaled_reduce_prod(val: ScaledArray, axes: Any, **params: Any) -> ScaledArray:
    """``s = sa ** N``, ``data = prod(da)``."""
    (val,) = promote_scales(val)
    axes = tuple(axes)
    data = bind(lax.reduce_prod_p, val.data, axes=axes, **params)
    return ScaledArray(data, _power(val.scale, static_size(val.shape, axes)))


def _same_scale(prim):
    def rule(val: ScaledArray, **params: Any) -> ScaledArray:
        return ScaledArray(prim.bind(val.data, **params), val.scale)

    rule.__name__ = f"scaled_{prim.name}"
    rule.__doc__ = f"``s = sa``, ``data = {prim.name}(da)``."
    return rule


for _name in (
    "reduce_max", "reduce_min", "reduce_window_max", "reduce_window_min", "reduce_window_sum", "cummax", "cummin",
    "neg", "abs", "reduce_precision", "reshape", "broadcast_in_dim", "transpose", "squeeze", "slice", "rev", "copy",
    "sharding_constraint", "tile", "stage",
):  # fmt: skip
    _prim = lax_primitive(_name)
    if _prim is not None:  # tile and stage: jax >= 0.12
        register_rule(_name, kind="same scale")(_same_scale(_prim))


def _data_only(prim):
    def rule(val: ScaledArray, **params: Any) -> Any:
        return prim.bind(val.data, **params)

    rule.__name__ = f"scaled_{prim.name}"
    rule.__doc__ = f"``{prim.name}(da)``, an unscaled result (the scale is positive: it changes no order)."
    return rule


for _prim in (lax.argmax_p, lax.argmin_p):
    register_rule(_prim.name, kind="data")(_data_only(_prim))


@register_rule("stop_gradient", kind="same scale")
def scaled_stop_gradient(val: ScaledArray, **params: Any) -> ScaledArray:
    """``s = sa``; no gradient through the data or the scale."""
    return ScaledArray(lax.stop_gradient(val.data), lax.stop_gradient(val.scale))
