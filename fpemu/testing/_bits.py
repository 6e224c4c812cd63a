"""Array helpers shared by the assertions, the sweeps and the strategies: inputs as NumPy arrays and
dtypes, exact float64 widening, raw bits and their hex spelling."""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu._core.format import Format
from fpemu._core.registry import UnknownFormatError, get_format

__all__ = ["as_array", "bits", "bits_hex", "code_hex", "container_format", "dtype_arg", "in_dtype", "is_float", "widen"]


def as_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a NumPy array of a float (ml_dtypes included), integer or bool dtype; else TypeError naming ``name``."""
    try:
        array = np.asarray(x)
    except Exception as err:
        raise TypeError(f"{name} must be an array or a number, got {type(x).__name__}") from err
    kind = array.dtype.kind
    if kind == "V" and _is_ml_float(array.dtype):
        return array
    if kind not in "fiub":
        raise TypeError(f"{name} must be a float, integer or bool array, got dtype {array.dtype}")
    return array


def _is_ml_float(dtype: np.dtype) -> bool:
    try:
        return get_format(dtype).dtype == dtype
    except (UnknownFormatError, TypeError):
        return False


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a NumPy float or an ml_dtypes float of fpemu's registry."""
    return dtype.kind == "f" or (dtype.kind == "V" and _is_ml_float(dtype))


def widen(array: np.ndarray) -> np.ndarray:
    """float64 values (exact for every float type of at most 64 bits, and for integers below 2**53)."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises FE_INVALID; it stays NaN
        return array.astype(np.float64)


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of a float array, as unsigned integers of the same width."""
    return array.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))


def code_hex(code: int, width: int) -> str:
    """A code of ``width`` bits in hex, zero-padded to whole hex digits (``0x07`` for 8 bits)."""
    return f"0x{code:0{(width + 3) // 4}x}"


def bits_hex(x: Any) -> str:
    """The bits of one float element, in hex with the width of its dtype."""
    x = np.asarray(x)
    return code_hex(int(bits(x)), 8 * x.dtype.itemsize)


def dtype_arg(dtype: Any, name: str = "dtype") -> np.dtype:
    """``dtype`` as a NumPy dtype; TypeError naming ``name`` for anything that is not one."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a NumPy/ml_dtypes/jnp dtype, got {dtype!r}") from None


def container_format(dtype: np.dtype, name: str = "dtype") -> Format:
    """The registry format of a float dtype (float32, bfloat16, float8_e4m3fn, ...); else ValueError."""
    try:
        return get_format(dtype)
    except (UnknownFormatError, TypeError):
        raise ValueError(f"{name} must be a floating-point dtype in fpemu's registry, got {dtype.name}") from None


def in_dtype(value: float, dtype: np.dtype, offset: int) -> float:
    """``value`` in ``dtype`` (nearest; beyond its range: its largest finite), moved ``offset`` ulps
    (but not past the largest finite value)."""
    with np.errstate(over="ignore"):
        x = np.asarray(value, np.float64).astype(dtype)
    if np.isinf(x):
        x = np.asarray(np.finfo(dtype).max, dtype)
    for _ in range(abs(offset)):
        with np.errstate(over="ignore"):
            moved = np.nextafter(x, np.asarray(np.inf if offset > 0 else -np.inf, dtype))
        x = x if np.isinf(moved) else moved  # the largest finite value stays: inputs stay finite
    return float(x)
