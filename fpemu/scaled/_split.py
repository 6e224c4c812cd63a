"""`quantize_dequantize_split`: `quantize_dequantize` with its float32 per-tensor scale kept apart.

Hardware applies a per-tensor scale after the matrix product, not to each element: cuBLAS takes
FP8's per-tensor scales as the GEMM's scale factors and NVFP4's tensor scales as its ``alpha``, and
multiplies the float32 accumulator once. This is the quantization such a product starts from.
The jitted computation is `fpemu._scaled.cores.split_core`.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._scaled.block_format import BlockFormatLike
from fpemu._scaled.cores import split_core
from fpemu.deprecation import renamed_keyword
from fpemu.scaled._quantize import arguments_of_quantize_dequantize, checked_call, quantize_dequantize

__all__ = ["quantize_dequantize_split"]

F32 = jnp.float32


@renamed_keyword("recipe", "block_format", "fpemu.scaled.quantize_dequantize_split")
def quantize_dequantize_split(
    x: jax.Array | np.ndarray, block_format: BlockFormatLike, **options: Any
) -> tuple[jax.Array, jax.Array | None]:
    """`quantize_dequantize` as two factors: ``(blocks, tensor_scale)``, the float32 per-tensor scale apart.

    Special values first: ``blocks`` is NaN wherever `quantize_dequantize` is NaN (a group holding
    NaN or ±inf, under current scaling; with a per-tensor scale that is the whole tensor, and
    ``tensor_scale`` is NaN too); otherwise the same special values.

    ``tensor_scale`` is the float32 scale that applies to the whole tensor and is not a power of
    two: a two-level block format's global scale (NVFP4: ``blocks`` are the elements times their E4M3
    block scales, exact), or the scale of a per-tensor block format with float32 scales (``axis=None``,
    ``scale_rule="float"``: Transformer Engine's FP8 current and delayed scaling; ``blocks`` are the
    element values). Its shape is ``(1,) * x.ndim``. For every other block format (power-of-two or
    per-block scales only) it is None and ``blocks`` is `quantize_dequantize`'s result in float32.

    Bit for bit, ``quantize_dequantize(x, ...) == fl(blocks * tensor_scale)`` (the product rounded
    once to float32, then to ``x``'s dtype). A matrix product of two such operands is the product of
    their ``blocks`` times ``fl(tensor_scale_a * tensor_scale_b)``, as hardware computes it.
    Arguments are `quantize_dequantize`'s (its signature, the one definition of them). The gradient
    is straight-through for the product: ``blocks``' tangent is ``x``'s divided by ``tensor_scale``,
    whose own is zero.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import scaled
      >>> x = jnp.array([0.1, -0.35, 0.8, 2.0])
      >>> blocks, t = scaled.quantize_dequantize_split(x, "nvfp4", pad=True)
      >>> blocks.tolist(), t.tolist()          # E2M1 times the E4M3 block scale 448, tensor scale 2 / 2688
      ([224.0, -448.0, 896.0, 2688.0], [0.0007440476329065859])
      >>> bool(jnp.all(blocks * t == scaled.quantize_dequantize(x, "nvfp4", pad=True)))
      True
      >>> scaled.quantize_dequantize_split(x, "mxfp8", pad=True)[1] is None   # power-of-two scales
      True
    """
    return checked_call(split_core, x, block_format, arguments_of_quantize_dequantize(x, block_format, options))


quantize_dequantize_split.__signature__ = inspect.signature(quantize_dequantize).replace(  # type: ignore[attr-defined]  # for help() and IDEs
    return_annotation="tuple[jax.Array, jax.Array | None]"
)
