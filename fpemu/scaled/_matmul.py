"""`matmul`: the product of two float32 matrices in a block format (the accuracy benchmark's formats)."""

from __future__ import annotations

import functools
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._args import choice_arg, input_format
from fpemu._ops.accumulate import compute_dot
from fpemu._ops.geometry import dot_geometry
from fpemu._ops.matmul import tensor_scaled_dot
from fpemu._ops.matmul_config import MatmulConfig, MatmulOptions, matmul_config
from fpemu._scaled.block_format import BLOCK_FORMAT_ALIASES, block_format_arg
from fpemu._scaled.cores import Config, config, split_core
from fpemu.deprecation import renamed_keyword

MatmulFormat = Literal[
    "fp32",
    "bf16",
    "fp16",
    "fp8_e4m3",
    "fp8_e5m2",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e3m2",
    "mxfp6_e2m3",
    "mxfp4",
    "nvfp4",
    "mxint8",
]
#: The formats of `matmul`, in table order: the fp32 baseline, the unscaled 16-bit formats, per-tensor
#: FP8, then the block formats. ``mxint8`` (OCP MXINT8) comes last.
MATMUL_FORMATS: tuple[str, ...] = get_args(MatmulFormat)

_UNSCALED = {"fp32": None, "bf16": "bf16", "fp16": "fp16"}  # name -> operand format of the element matmul


def _check_operands(a: Any, b: Any) -> tuple[jax.Array, jax.Array]:
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (np.ndarray, jax.Array)):
            raise TypeError(f"{name} must be a float32 NumPy or JAX array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"{name} must be float32 (fpemu.scaled.matmul quantizes float32 operands), got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be a matrix (2-D), got shape {x.shape}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"the contraction dimensions differ: a has shape {a.shape}, b has shape {b.shape}")
    return jnp.asarray(a), jnp.asarray(b)


_DN = (((1,), (0,)), ((), ()))  # a (M x K) times b (K x N)


@functools.lru_cache(maxsize=64)
def _unscaled_config(fmt: str | None) -> MatmulConfig:
    """The checked config of ``fpemu.matmul(a, b, lhs=fmt, rhs=fmt)`` on float32 operands."""
    f32 = input_format(np.float32, "a")
    return matmul_config(f32, f32, MatmulOptions(lhs=fmt, rhs=fmt))


def _operand_config(name: str, axis: int | None) -> Config:
    """The checked config of ``quantize_dequantize_split(x, name, axis=axis, pad=True)`` (nearest even)."""
    return config(block_format_arg(name), axis, "nearest_even", None)


@functools.partial(jax.jit, static_argnames="name")
def _product(a: jax.Array, b: jax.Array, name: str) -> jax.Array:
    if name in _UNSCALED:
        geometry = dot_geometry(tuple(a.shape), tuple(b.shape), _DN)
        return compute_dot(a, b, None, None, None, None, cfg=_unscaled_config(_UNSCALED[name]), geometry=geometry)
    per_tensor = block_format_arg(name).block_size is None  # one float32 scale per operand
    # Blocks run along the contraction dimension K; a shorter last block if K is not a multiple.
    a_q, a_t = split_core(a, None, None, _operand_config(name, None if per_tensor else 1))
    b_q, b_t = split_core(b, None, None, _operand_config(name, None if per_tensor else 0))
    # What is left once the float per-tensor scales are taken out (elements times power-of-two or
    # E4M3 block scales) has at most 8 significant bits for every block format here: bfloat16 values, so
    # rounding to bf16 is exact and the dot takes bfloat16 operands with float32 accumulation. The
    # per-tensor scales multiply the float32 product once, as cuBLAS applies them.
    return tensor_scaled_dot(a_q.astype(jnp.bfloat16), b_q.astype(jnp.bfloat16), a_t, b_t, _DN)


def _matmul_format_name(fmt: Any) -> str:
    """A name of `MATMUL_FORMATS`, or an alias `get_block_format` accepts for one (``"mxfp8"`` is ``mxfp8_e4m3``
    here as in `quantize_dequantize`); else `choice_arg`'s error listing `MATMUL_FORMATS`."""
    if isinstance(fmt, str) and fmt not in MATMUL_FORMATS and fmt in BLOCK_FORMAT_ALIASES:
        return BLOCK_FORMAT_ALIASES[fmt]
    return choice_arg(fmt, MATMUL_FORMATS, "fmt")


@renamed_keyword("recipe", "fmt", "fpemu.scaled.matmul")
def matmul(a: jax.Array | np.ndarray, b: jax.Array | np.ndarray, fmt: MatmulFormat) -> jax.Array:
    """The emulated product of the float32 matrices ``a`` (M x K) and ``b`` (K x N) in ``fmt``, float32.

    Special values first: with a block format, a block (or, per tensor, an operand) holding NaN or
    ±inf has the NaN scale, so every product that reads it is NaN; ``"bf16"``/``"fp16"`` round an
    operand beyond the format's range to ±inf (fp16: beyond 65504), and inf or NaN propagate through
    the float32 accumulation as IEEE arithmetic has them.

    The formats (`MATMUL_FORMATS`): ``"fp32"`` is the plain float32 product (float32 accumulation at
    ``Precision.HIGHEST``); ``"bf16"``/``"fp16"`` round both operands to that format (nearest even)
    and accumulate in float32 (``fpemu.matmul(a, b, lhs=fmt, rhs=fmt)``); the block formats quantize
    ``a`` along K (``axis=-1``) and ``b`` along K (``axis=0``) with `quantize_dequantize_split`, so
    that blocks run along the contraction dimension as OCP MX prescribes (a shorter last block where
    K is not a multiple of the block size), per tensor for ``"fp8_e4m3"``/``"fp8_e5m2"``, and
    multiply the dequantized operands with float32 accumulation, except for the float32 per-tensor
    scales (FP8's, NVFP4's global scale), which multiply the float32 product once,
    ``fl(y * fl(t_a * t_b))``, as cuBLAS applies them. Jitted once per format and shape.

    Args:
      a: float32 matrix (NumPy or JAX), M x K.
      b: float32 matrix (NumPy or JAX), K x N.
      fmt: a name from `MATMUL_FORMATS`, or an alias that `get_block_format` accepts: ``"mxfp8"`` is
        ``"mxfp8_e4m3"`` here as everywhere in `fpemu.scaled` (``fpemu.Policy(dot="mxfp8")`` is the training
        recipe of that name, whose forward GEMM is this product). ``recipe=`` is its deprecated name.

    Returns:
      The float32 M x N product.

    Raises:
      ValueError: for an unknown format (listing `MATMUL_FORMATS`), or shapes that do not multiply.
      TypeError: for operands that are not float32 arrays.

    Example:
      >>> import numpy as np
      >>> from fpemu import scaled
      >>> a = np.full((1, 32), 0.3, np.float32); b = np.ones((32, 1), np.float32)
      >>> scaled.matmul(a, b, "bf16").tolist()    # 0.3 -> 0.30078125, times 32
      [[9.625]]
      >>> scaled.matmul(a, b, "mxfp4").tolist()   # scale 2**-4: 0.3 / 2**-4 = 4.8 -> 4, i.e. 0.25
      [[8.0]]
    """
    name = _matmul_format_name(fmt)
    a, b = _check_operands(a, b)
    return _product(a, b, name)
