"""A GEMM operand as the training layer takes it (`operand_arg`), and its amax (`amax_of`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import INPUT_DTYPES
from fpemu._jax.reduce import magnitude_max

__all__ = ["amax_of", "operand_arg"]

_OPERAND_DTYPES = tuple(d for d in INPUT_DTYPES if d != "float64")  # float64 is refused: no silent rounding


def operand_arg(x: Any, name: str = "x") -> jax.Array:
    """A float16, bfloat16 or float32 JAX or NumPy array (float64 is refused: no silent rounding)."""
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        dtype = np.dtype(x.dtype)
        if dtype.name in _OPERAND_DTYPES:
            return jnp.asarray(x)
        raise TypeError(f"{name} must be a float16, bfloat16 or float32 array, got dtype {dtype.name}")
    raise TypeError(f"{name} must be a JAX or NumPy array of float16, bfloat16 or float32, got {type(x).__name__}")


def amax_of(x: Any) -> jax.Array:
    """The float32 largest magnitude of ``x``, as a delayed-scaling history records it.

    NaN propagates (any NaN element gives NaN); ±inf gives inf; an empty array gives 0. Computed on
    the bit patterns, so float32 subnormals count on every backend. No gradient flows through it.

    Example:
      >>> import jax.numpy as jnp
      >>> amax_of(jnp.array([1.0, -3.5, 2.0])).tolist(), bool(jnp.isnan(amax_of(jnp.array([1.0, jnp.nan]))))
      (3.5, True)
    """
    x = operand_arg(x)
    bits = lax.bitwise_and(
        lax.bitcast_convert_type(lax.stop_gradient(x).astype(jnp.float32), jnp.uint32), jnp.uint32(0x7FFFFFFF)
    )
    return lax.bitcast_convert_type(magnitude_max(bits, tuple(range(bits.ndim)), keepdims=False), jnp.float32)
