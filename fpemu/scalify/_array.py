"""`ScaledArray`: an array represented as ``data * scale`` with a scalar scale, and its helpers."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu.scalify._arith import is_numpy, mul
from fpemu.scalify._pow2 import Pow2RoundMode, pow2_decompose

__all__ = [
    "ScaledArray",
    "all_static_anyscale",
    "all_static_zero",
    "as_scaled_array",
    "asarray",
    "get_scale_dtype",
    "is_scaled_leaf",
    "is_static_anyscale",
    "is_static_one_scalar",
    "is_static_zero",
    "make_scaled_scalar",
    "scaled_array",
]


def _api(*values: Any) -> Any:
    return np if all(is_numpy(v) for v in values) else jnp


def _is_array(value: Any) -> bool:
    return is_numpy(value) or isinstance(value, jax.Array)


def wide_dtype(*dtypes: Any) -> np.dtype:
    """The narrowest float dtype that holds every one of ``dtypes`` (float32 at least)."""
    wide = any(np.dtype(dtype) == np.float64 for dtype in dtypes)
    return np.dtype(np.float64 if wide else np.float32)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True, eq=False)
class ScaledArray:
    """An array whose value is ``data * scale``: ``data`` holds the (low-precision) values and
    ``scale`` is a scalar, usually a power of two, usually in float32.

    A JAX pytree with the leaves ``data`` and ``scale``, so it passes through ``jit``, ``vmap``
    and ``grad``. ``dtype``, ``shape``, ``size``, ``ndim`` and ``aval`` are those of ``data``:
    the scale's dtype is separate (a float16 array may carry a float32 scale). NumPy data and
    scales stay NumPy (static while tracing). Make one with `scaled_array` or `as_scaled_array`.

    Example:
      >>> import numpy as np
      >>> from fpemu.scalify import ScaledArray
      >>> sa = ScaledArray(np.array([1.0, 1.5], np.float16), np.float32(4.0))
      >>> sa.dtype, sa.shape, sa.to_array().tolist()
      (dtype('float16'), (2,), [4.0, 6.0])
    """

    data: Any
    scale: Any

    def __post_init__(self):
        data, scale = self.data, self.scale
        if all(v is None or type(v) is int for v in (data, scale)):
            return  # a pytree prefix (``in_axes=ScaledArray(0, None)``), not an array
        if isinstance(data, np.generic):
            data = np.asarray(data)
        if isinstance(scale, (float, int)) and not isinstance(scale, bool):
            scale = np.asarray(scale, np.float32)
        if not _is_array(data):
            raise TypeError(f"ScaledArray data must be a NumPy or JAX array, got {type(data).__name__}")
        if not _is_array(scale):
            raise TypeError(f"ScaledArray scale must be a NumPy or JAX scalar, got {type(scale).__name__}")
        if np.ndim(scale) != 0:
            raise ValueError(f"ScaledArray scale must be a scalar (shape ()), got shape {np.shape(scale)}")
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "scale", scale)

    # -- pytree

    def tree_flatten(self):
        return (self.data, self.scale), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        out = object.__new__(cls)  # no checks: JAX unflattens with placeholder leaves too
        object.__setattr__(out, "data", children[0])
        object.__setattr__(out, "scale", children[1])
        return out

    # -- the data's array attributes

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def aval(self) -> jax.core.ShapedArray:
        """The abstract value (shape and dtype) of ``data``."""
        return jax.core.ShapedArray(self.shape, self.dtype)

    # -- conversions

    def to_array(self, dtype: Any = None) -> Any:
        """``data * scale`` in ``dtype`` (default: the data's), NumPy for NumPy leaves.

        The product is computed in the widest of float32 and both dtypes, then rounded once to
        ``dtype``: a power-of-two scale is exact, and a scale beyond the data dtype's range (a
        float16 array with scale 2**18) gives the right value wherever ``dtype`` can hold it.
        """
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        wide = wide_dtype(self.dtype, np.dtype(self.scale.dtype))
        with np.errstate(over="ignore", invalid="ignore"):  # NumPy leaves: overflow gives inf, as in JAX
            return mul(self.data.astype(wide), self.scale.astype(wide)).astype(dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.to_array(dtype))

    def astype(self, dtype: Any) -> ScaledArray:
        """A `ScaledArray` with ``data`` cast to ``dtype`` (the scale unchanged)."""
        return ScaledArray(self.data.astype(dtype), self.scale)

    def __repr__(self) -> str:
        return f"ScaledArray(data={self.data!r}, scale={self.scale!r})"


# -- construction -----------------------------------------------------------------------------------


def scaled_array(data: Any, scale: Any, dtype: Any = None, npapi: Any = jnp) -> ScaledArray:
    """A `ScaledArray` from ``data`` and ``scale`` as given (no division), made arrays with
    ``npapi.asarray`` (``jnp`` by default, ``np`` for static values); ``dtype`` applies to ``data``."""
    return ScaledArray(npapi.asarray(data, dtype=dtype), npapi.asarray(scale))


def make_scaled_scalar(val: Any, scale_dtype: Any = None) -> ScaledArray:
    """A scalar as a `ScaledArray`: ``data`` in [1, 2) (with the sign), ``scale`` a power of two
    in ``scale_dtype`` (default: the value's dtype).

    A Python float becomes float32 first (JAX's default); NumPy float64 stays float64. Computed in
    float32 (float64), so a float16 subnormal round-trips exactly with a float32 scale. 0 gives
    data 0 and scale 0.
    """
    if type(val) is float:
        val = np.float32(val)
    if not _is_array(val):
        val = np.asarray(val)
    if np.ndim(val) != 0:
        raise ValueError(f"make_scaled_scalar takes a scalar, got shape {np.shape(val)}")
    if not jnp.issubdtype(val.dtype, jnp.floating):
        raise TypeError(f"make_scaled_scalar takes a floating-point value, got dtype {val.dtype}")
    if isinstance(val, np.generic):
        val = np.asarray(val)
    scale, mantissa = pow2_decompose(val, scale_dtype=scale_dtype, mode=Pow2RoundMode.DOWN)
    return ScaledArray(mantissa, scale)


def is_scaled_leaf(val: Any) -> bool:
    """Whether ``val`` is a leaf for pytree functions that keep `ScaledArray` whole: an array,
    a `ScaledArray` or a scalar (use as ``is_leaf=`` of ``jax.tree_util`` functions)."""
    return np.isscalar(val) or isinstance(val, (jax.Array, np.ndarray, np.generic, ScaledArray))


def _as_scaled_leaf(val: Any, scale: Any = None) -> Any:
    if isinstance(val, ScaledArray):
        return val
    one = scale is None or is_static_one_scalar(scale)
    if isinstance(val, (bool, int, np.bool_, np.integer)) and not isinstance(val, np.floating):
        return val
    if type(val) is float:
        val = np.float32(val)
    if isinstance(val, np.generic):
        val = np.asarray(val)
    if not _is_array(val):
        raise TypeError(f"as_scaled_array: cannot make a ScaledArray from {type(val).__name__}")
    if not jnp.issubdtype(val.dtype, jnp.floating):
        return val  # integers and bools are left alone
    if one and np.ndim(val) == 0:
        return make_scaled_scalar(val)
    if scale is None:
        return ScaledArray(val, _api(val).ones((), val.dtype))
    if isinstance(scale, ScaledArray):
        scale = scale.to_array()
    if isinstance(scale, (float, int)):
        scale = np.asarray(scale, np.float32)
    if one:
        return ScaledArray(val, scale)
    wide = wide_dtype(val.dtype, scale.dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return ScaledArray((val.astype(wide) / scale.astype(wide)).astype(val.dtype), scale)


def as_scaled_array(val: Any, scale: Any = None) -> Any:
    """Every float leaf of the pytree ``val`` as a `ScaledArray` of the same value.

    `ScaledArray` leaves, ints and bools (Python or arrays) are returned unchanged. A float scalar
    (Python, NumPy or JAX, without a ``scale``) is split by `make_scaled_scalar` into a mantissa
    in [1, 2) and a power-of-two scale. An array gets ``scale`` (default 1, in the array's dtype)
    and ``data = val / scale`` (computed in float32 or wider, rounded once to the array's dtype).

    Example:
      >>> import numpy as np
      >>> from fpemu import scalify as jsa
      >>> sa = jsa.as_scaled_array(np.array([1.0, 2.0], np.float16), scale=np.float32(0.5))
      >>> sa.data.tolist(), float(sa.scale), np.asarray(sa).tolist()
      ([2.0, 4.0], 0.5, [1.0, 2.0])
      >>> s = jsa.as_scaled_array(3.0)
      >>> float(s.data), float(s.scale)
      (1.5, 2.0)
    """
    return jax.tree_util.tree_map(lambda leaf: _as_scaled_leaf(leaf, scale), val, is_leaf=is_scaled_leaf)


def _asarray_leaf(val: Any, dtype: Any) -> Any:
    if isinstance(val, ScaledArray):
        return val.to_array(dtype)
    if _is_array(val):
        return val if dtype is None else val.astype(dtype)
    return np.asarray(val, dtype=dtype)


def asarray(val: Any, dtype: Any = None) -> Any:
    """Every leaf of the pytree ``val`` as a plain array: `ScaledArray` leaves as ``data * scale``
    (`ScaledArray.to_array`), arrays unchanged (cast to ``dtype`` if given)."""
    return jax.tree_util.tree_map(lambda leaf: _asarray_leaf(leaf, dtype), val, is_leaf=is_scaled_leaf)


# -- static facts (NumPy values only: JAX arrays are never static) ---------------------------------


def _anyscale(value: Any) -> Any:
    magnitude = np.abs(value)
    return np.logical_or(magnitude == 0, magnitude == np.inf)


def _static_mask(val: Any, test) -> np.ndarray:
    if is_numpy(val) or np.isscalar(val):
        return np.asarray(test(np.asarray(val)))
    if isinstance(val, ScaledArray):
        shape = val.shape
        data = test(np.asarray(val.data)) if is_numpy(val.data) else np.zeros(shape, np.bool_)
        scale = test(np.asarray(val.scale)) if is_numpy(val.scale) else np.zeros((), np.bool_)
        return np.logical_or(np.broadcast_to(data, shape), scale)
    return np.zeros(np.shape(val), np.bool_)


def is_static_zero(val: Any) -> np.ndarray:
    """A NumPy bool array of ``val``'s shape: where ``val`` is known to be 0 while tracing (a NumPy
    value, or a `ScaledArray` with NumPy zero data or a NumPy zero scale). JAX arrays: all False."""
    return _static_mask(val, lambda v: v == 0)


def is_static_anyscale(val: Any) -> np.ndarray:
    """As `is_static_zero`, for the values that any scale leaves unchanged: 0 and ±inf."""
    return _static_mask(val, _anyscale)


def _all_static(val: Any, test) -> bool:
    """``bool(np.all(_static_mask(val, test)))``, without building the mask where only one of a `ScaledArray`'s
    data and scale is static, or neither (a traced array's mask is all False: allocating and scanning it took
    about 2 ms for a million elements, each time a rule asked)."""
    if isinstance(val, ScaledArray):
        data_static, scale_static = is_numpy(val.data), is_numpy(val.scale)
        if data_static and scale_static:
            return bool(np.all(_static_mask(val, test)))
        if scale_static:  # the data's mask is all False
            return val.size == 0 or bool(np.all(test(np.asarray(val.scale))))
        if data_static:  # the scale's mask is False
            return bool(np.all(test(np.asarray(val.data))))
        return val.size == 0
    if is_numpy(val) or np.isscalar(val):
        return bool(np.all(test(np.asarray(val))))
    return int(np.prod(np.shape(val), dtype=np.int64)) == 0


def all_static_zero(val: Any) -> bool:
    """Whether ``val`` is known to be 0 everywhere while tracing: ``np.all(is_static_zero(val))``."""
    return _all_static(val, lambda v: v == 0)


def all_static_anyscale(val: Any) -> bool:
    """Whether ``val`` is known to be 0 or ±inf everywhere while tracing: ``np.all(is_static_anyscale(val))``."""
    return _all_static(val, _anyscale)


def is_static_one_scalar(val: Any) -> bool:
    """Whether ``val`` is known to be the scalar 1 while tracing (a Python or NumPy 1, or a
    `ScaledArray` whose data and scale are both static ones)."""
    if isinstance(val, (bool, int, float)):
        return val == 1
    if is_numpy(val):
        return bool(np.size(val) == 1 and np.all(np.asarray(val) == 1))
    if isinstance(val, ScaledArray) and val.size == 1:
        return is_static_one_scalar(val.data) and is_static_one_scalar(val.scale)
    return False


def get_scale_dtype(val: Any) -> np.dtype:
    """The scale dtype of a `ScaledArray`, else the array's dtype."""
    if isinstance(val, ScaledArray):
        return np.dtype(val.scale.dtype)
    return np.dtype(val.dtype)
