"""User operations: dynamic rescaling, casts and precision reduction on the forward or the backward
pass, and debug callbacks that see `ScaledArray`s."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import format_arg
from fpemu.scalify._array import ScaledArray, is_scaled_leaf
from fpemu.scalify._helpers import float_dtype
from fpemu.scalify._pow2 import pow2_round_down
from fpemu.scalify._primitives import get_data_scale, quantize_data, rebalance
from fpemu.scalify._rules_select import cast_data

__all__ = [
    "cast_on_backward",
    "cast_on_forward",
    "debug_callback",
    "debug_callback_grad",
    "debug_print",
    "debug_print_grad",
    "dynamic_rescale_l1",
    "dynamic_rescale_l1_grad",
    "dynamic_rescale_l2",
    "dynamic_rescale_l2_grad",
    "dynamic_rescale_max",
    "dynamic_rescale_max_grad",
    "map_on_backward",
    "map_on_forward",
    "reduce_precision_on_backward",
    "reduce_precision_on_forward",
]


# -- forward-only and backward-only maps --------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def map_on_forward(f: Callable, arg: Any) -> Any:
    """``f(arg)`` on the forward pass; the gradient passes through unchanged."""
    return f(arg)


map_on_forward.defvjp(lambda f, arg: (f(arg), None), lambda f, _, grad: (grad,))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def map_on_backward(f: Callable, arg: Any) -> Any:
    """``arg`` unchanged on the forward pass; ``f`` applied to its gradient."""
    return arg


map_on_backward.defvjp(lambda f, arg: (arg, None), lambda f, _, grad: (f(grad),))


def _leafwise(fn: Callable) -> Callable:
    """``fn`` on every float leaf (array or `ScaledArray`) of a pytree; other leaves unchanged."""

    def apply(tree: Any) -> Any:
        def leaf(value):
            dtype = getattr(value, "dtype", None)
            return fn(value) if dtype is not None and jnp.issubdtype(dtype, jnp.floating) else value

        return jax.tree_util.tree_map(leaf, tree, is_leaf=is_scaled_leaf)

    apply.__name__ = fn.__name__
    return apply


# -- dynamic rescaling ---------------------------------------------------------------------------------

_EPS = pow2_round_down(np.float32(1e-4))  # 2**-14: the smallest norm a rescale divides by


def _rebalanced(arr: Any, norm: Any, scale: Any) -> Any:
    norm = lax.max(pow2_round_down(norm.astype(jnp.float32)), jnp.asarray(_EPS)).astype(float_dtype(scale.dtype))
    return rebalance(arr, norm)


def _rescale_max(arr: Any) -> Any:
    data, scale = get_data_scale(arr)
    data = jnp.asarray(data)
    return _rebalanced(arr, lax.reduce_max(lax.abs(data), tuple(range(data.ndim))), scale)


def _rescale_l1(arr: Any) -> Any:
    data, scale = get_data_scale(arr)
    wide = lax.abs(jnp.asarray(data).astype(jnp.float32))
    return _rebalanced(arr, lax.div(_sum(wide), np.float32(max(wide.size, 1))), scale)


def _rescale_l2(arr: Any) -> Any:
    data, scale = get_data_scale(arr)
    wide = jnp.asarray(data).astype(jnp.float32)
    return _rebalanced(arr, lax.sqrt(lax.div(_sum(lax.mul(wide, wide)), np.float32(max(wide.size, 1)))), scale)


def _sum(wide: Any) -> Any:
    """The sum of every element of a float32 array (what ``jnp.sum`` records for it)."""
    return lax.reduce_sum(wide, tuple(range(wide.ndim)))


def _is_live(tree: Any) -> bool:
    """Whether a pytree has a `ScaledArray` or a traced leaf (else a rescale is the identity)."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_scaled_leaf)
    return any(isinstance(leaf, (ScaledArray, jax.core.Tracer)) for leaf in leaves)


def _doc(inner: Callable, norm: str, where: str) -> Callable:
    def fn(arg: Any) -> Any:
        return inner(arg) if _is_live(arg) else arg

    fn.__doc__ = (
        f"Rescale every float leaf of a pytree by its {norm}, rounded down to a power of two (at "
        f"least 2**-14): the data is divided by it, the scale multiplied (the value is unchanged), "
        f"{where}. Plain arrays outside `scalify` are returned unchanged (the same object)."
    )
    return fn


dynamic_rescale_max = _doc(
    lambda arr: map_on_forward(_leafwise(_rescale_max), arr), "max |data|", "on the forward pass"
)
dynamic_rescale_l1 = _doc(lambda arr: map_on_forward(_leafwise(_rescale_l1), arr), "mean |data|", "on the forward pass")
dynamic_rescale_l2 = _doc(
    lambda arr: map_on_forward(_leafwise(_rescale_l2), arr), "RMS of the data", "on the forward pass"
)
dynamic_rescale_max_grad = _doc(
    lambda arr: map_on_backward(_leafwise(_rescale_max), arr), "max |data|", "on the gradient (backward pass only)"
)
dynamic_rescale_l1_grad = _doc(
    lambda arr: map_on_backward(_leafwise(_rescale_l1), arr), "mean |data|", "on the gradient (backward pass only)"
)
dynamic_rescale_l2_grad = _doc(
    lambda arr: map_on_backward(_leafwise(_rescale_l2), arr), "RMS of the data", "on the gradient (backward pass only)"
)
for _name in __all__:
    if _name.startswith("dynamic_rescale") and _name in globals():
        globals()[_name].__name__ = globals()[_name].__qualname__ = _name


# -- casts ----------------------------------------------------------------------------------------------


def _cast(dtype: Any) -> Callable:
    dtype = np.dtype(dtype)

    def cast(value):
        if isinstance(value, ScaledArray):
            return ScaledArray(cast_data(value.data, dtype), value.scale)
        return lax.convert_element_type(value, dtype)

    return _leafwise(cast)


def cast_on_forward(arr: Any, dtype: Any) -> Any:
    """Cast (the data of) every float leaf to ``dtype`` on the forward pass; the gradient is
    unchanged. Narrowing casts round once with `fpemu.quantize` (``float8_e4m3fn`` is OCP E4M3:
    max 448, subnormals kept)."""
    return map_on_forward(_cast(dtype), arr)


def cast_on_backward(arr: Any, dtype: Any) -> Any:
    """Cast the gradient of every float leaf to ``dtype`` (forward pass unchanged)."""
    return map_on_backward(_cast(dtype), arr)


def _reduce_precision(dtype: Any) -> Callable:
    fmt = format_arg(dtype, "dtype")
    return _leafwise(lambda value: quantize_data(value, fmt))


def reduce_precision_on_forward(arr: Any, dtype: Any) -> Any:
    """Round (the data of) every float leaf to the format ``dtype`` (an ml_dtypes dtype or any
    fpemu format name) on the forward pass, keeping the dtype; the gradient is unchanged. The
    rounding is `fpemu.quantize`'s (nearest even; OCP ``e4m3fn``: max 448, subnormals kept), not
    ``lax.reduce_precision``'s (jax-scalify's: IEEE-like e4m3, max 240, subnormals flushed)."""
    return map_on_forward(_reduce_precision(dtype), arr)


def reduce_precision_on_backward(arr: Any, dtype: Any) -> Any:
    """As `reduce_precision_on_forward`, on the gradient (forward pass unchanged)."""
    return map_on_backward(_reduce_precision(dtype), arr)


# -- debugging ----------------------------------------------------------------------------------------


def debug_callback(callback: Callable[..., Any], *args: Any, ordered: bool = False, **kwargs: Any) -> None:
    """``jax.debug.callback`` that passes `ScaledArray`s (with NumPy data and scale) to ``callback``,
    eagerly, under ``jit`` and inside `scalify`."""
    jax.debug.callback(callback, *args, ordered=ordered, **kwargs)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def debug_callback_grad(f: Callable, *args: Any) -> tuple:
    """The identity on ``args``; ``f`` is called (`debug_callback`) on their gradients."""
    return args


def _callback_grad_bwd(f, _, grads):
    debug_callback(f, *grads)
    return grads


debug_callback_grad.defvjp(lambda f, *args: (args, None), _callback_grad_bwd)


def debug_print(fmt: str, *args: Any) -> Sequence[Any]:
    """Print ``fmt.format(*args)`` (`debug_callback`); returns ``args``."""
    debug_callback(lambda *values: print(fmt.format(*values)), *args)
    return args


def debug_print_grad(fmt: str, *args: Any) -> Sequence[Any]:
    """Print the gradients of ``args`` with ``fmt``; returns ``args``."""
    return debug_callback_grad(lambda *values: print(fmt.format(*values)), *args)
