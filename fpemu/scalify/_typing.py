"""jax-scalify's type aliases (``jax_scalify.core.{Array, ArrayTypes, DTypeLike, Shape, Sharding}``) and
``get_numpy_api``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Sharding
from jax.stages import ArgInfo
from numpy.typing import DTypeLike

__all__ = ["Array", "ArrayTypes", "DTypeLike", "Shape", "Sharding", "get_numpy_api"]

Array = jax.Array
#: The classes of JAX's arrays (tracers included), for ``isinstance``.
ArrayTypes: tuple[type, ...] = (jax.Array, ArgInfo)
Shape = Sequence[int]


def get_numpy_api(val: Any) -> Any:
    """``numpy`` for a NumPy array or scalar (static while tracing), ``jax.numpy`` for a JAX array.

    Raises:
      NotImplementedError: any other type.
    """
    if isinstance(val, (np.ndarray, np.number)):
        return np
    if isinstance(val, ArrayTypes):
        return jnp
    raise NotImplementedError(f"Unsupported input type '{type(val)}'. No matching Numpy API.")
