"""Power-of-two scale formats: E8M0 codes (the OCP MX scale format) and mantissa truncation."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu.scalify._arith import is_numpy

__all__ = ["as_e8m0", "from_e8m0", "pow2_truncate"]

_FORMATS = {  # dtype name -> (unsigned dtype, sign-and-exponent mask, mantissa bits)
    "float16": (np.uint16, 0xFC00, 10),
    "bfloat16": (np.uint16, 0xFF80, 7),
    "float32": (np.uint32, 0xFF800000, 23),
}


def _bits(arr: Any, udtype: Any) -> Any:
    return np.asarray(arr).view(udtype) if is_numpy(arr) else jax.lax.bitcast_convert_type(arr, udtype)


def _floats(bits: Any, dtype: Any) -> Any:
    return np.asarray(bits).view(dtype) if is_numpy(bits) else jax.lax.bitcast_convert_type(bits, dtype)


def _spec(dtype: Any) -> tuple:
    name = np.dtype(dtype).name
    if name not in _FORMATS:
        raise TypeError(f"expected float16, bfloat16 or float32, got {name}")
    return _FORMATS[name]


def pow2_truncate(arr: Any) -> Any:
    """Each value with its mantissa bits cleared (a signed power of two, toward zero; subnormals
    become 0, ±inf and NaN become ±inf). NumPy in, NumPy out."""
    udtype, mask, _ = _spec(arr.dtype)
    return _floats(_bits(arr, udtype) & udtype(mask), arr.dtype).reshape(np.shape(arr))


def as_e8m0(arr: Any) -> Any:
    """E8M0 codes (uint8, ``2**(code - 127)``) of ``arr`` (float32 or bfloat16), by truncation
    with saturation: negative values, 0 and values below 2**-127 give code 0, as jax-scalify."""
    name = np.dtype(arr.dtype).name
    if name not in ("float32", "bfloat16"):
        raise TypeError(f"as_e8m0 takes float32 or bfloat16, got {name}")
    xp = np if is_numpy(arr) else jnp
    arr = xp.maximum(arr, np.zeros((), arr.dtype))
    udtype, _, mantissa_bits = _FORMATS[name]
    exponent = (_bits(arr, udtype) >> udtype(mantissa_bits)) & udtype(0xFF)
    return exponent.astype(np.uint8)


def from_e8m0(arr: Any, dtype: Any) -> Any:
    """The powers of two ``2**(code - 127)`` of E8M0 codes (uint8), in ``dtype`` (float32 or
    bfloat16; code 0 is the float32 subnormal 2**-127)."""
    if np.dtype(arr.dtype) != np.uint8:
        raise TypeError(f"from_e8m0 takes uint8 codes, got {np.dtype(arr.dtype)}")
    name = np.dtype(dtype).name
    if name not in ("float32", "bfloat16"):
        raise TypeError(f"from_e8m0 returns float32 or bfloat16, got {name}")
    codes = arr.astype(np.uint32)
    xp = np if is_numpy(arr) else jnp
    bits = xp.where(codes == 0, np.uint32(1 << 22), codes << np.uint32(23))  # 2**-127 is subnormal
    return _floats(bits.astype(np.uint32), np.float32).astype(dtype)
