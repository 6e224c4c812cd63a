"""Arithmetic on values that are NumPy (static) or JAX arrays, without jax.numpy's jitted operators.

`scalify`'s scales are NumPy values where they are known while a function is traced (they fold on
the host and stay static) and JAX arrays otherwise; the rules compute on both. Written as operators
(``a * b``), the JAX case goes through jax.numpy's operators, which are jitted functions: under a
trace each call enters jit's Python path, and each new combination of shapes and dtypes traces a
small jaxpr of its own (the bench transformer block's scalified step made 469 such calls). The
functions here give:

- for NumPy operands only (or Python scalars: no JAX array): NumPy's result, as the operator gives
  it (NaN, ±inf, -0 and overflow as NumPy computes them);
- for JAX operands (or a mix) of one dtype, of equal shapes or one of them of rank 0: the `lax`
  operation, the one equation jax.numpy's operator records for them (the same program and bits);
- for anything else (two dtypes, another broadcast): jax.numpy's operator, whose promotion and
  broadcasting apply as they always did.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["add", "bitwise_and", "broadcast_arrays", "div", "is_numpy", "mul", "sqrt", "sub"]


def is_numpy(value: Any) -> bool:
    """Whether ``value`` is a NumPy array or scalar (a static value: JAX arrays never are)."""
    return isinstance(value, (np.ndarray, np.generic))


def _binary(numpy_op: Callable[[Any, Any], Any], lax_op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        if not isinstance(a, jax.Array) and not isinstance(b, jax.Array):  # static: NumPy (or Python) values
            return numpy_op(a, b)
        x, y = jnp.asarray(a), jnp.asarray(b)
        if x.dtype == y.dtype and (x.shape == y.shape or x.ndim == 0 or y.ndim == 0):
            return lax_op(x, y)
        return numpy_op(x, y)  # jax.numpy's operator: its promotion and broadcasting

    return apply


#: ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``a & b`` (see the module's docstring).
add = _binary(operator.add, lax.add)
sub = _binary(operator.sub, lax.sub)
mul = _binary(operator.mul, lax.mul)
div = _binary(operator.truediv, lax.div)
bitwise_and = _binary(operator.and_, lax.bitwise_and)


def broadcast_arrays(*arrays: Any) -> list[Any]:
    """JAX arrays broadcast to their common shape by NumPy's rules (``jnp.broadcast_arrays``, by
    ``lax.broadcast_in_dim``); an array of that shape is returned as it is."""
    arrays_ = [jnp.asarray(a) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape for a in arrays_))
    return [
        a if a.shape == shape else lax.broadcast_in_dim(a, shape, tuple(range(len(shape) - a.ndim, len(shape))))
        for a in arrays_
    ]


def sqrt(a: Any) -> Any:
    """``np.sqrt(a)`` for a NumPy value (or a Python scalar), ``lax.sqrt`` for a floating JAX array (what
    ``jnp.sqrt`` records for it), else ``jnp.sqrt`` (which converts integers to float first)."""
    if not isinstance(a, jax.Array):
        return np.sqrt(a)
    x = jnp.asarray(a)
    return lax.sqrt(x) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.sqrt(x)
