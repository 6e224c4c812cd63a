"""The element values of a quantized operand: what the statistics of a training recipe's GEMMs count."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from fpemu._jax.elementwise import select
from fpemu._training.quantize_operand import element_rounding, operand_view, scaled_operand
from fpemu._training.quantizer import Quantizer

__all__ = ["operand_elements"]

F32 = jnp.float32


def operand_elements(x: jax.Array, dims: tuple[int, ...], q: Quantizer, key: Any, amax: Any, margin: int) -> tuple:
    """(``x / scale``, the element values) of ``x`` quantized by ``q``, in the grouped view that
    `quantize_operand` quantizes: `scaled_operand`'s scales and element values (the same bits)."""
    x = x.astype(F32)
    stochastic = q.rounding == "stochastic"
    if q.scaling == "none":
        return x, element_rounding(x, key, q)
    view, axis, _ = operand_view(x, q, dims)
    sa = scaled_operand(x, key if stochastic else None, amax, q=q, dims=dims, margin=margin)
    scale = sa.scale_values()
    if sa.global_scale is not None:
        scale = lax.mul(scale, sa.global_scale)
    block = q.block_format.block_size if q.scaling in ("row", "block") else None  # block_2d: a tile is a group
    if axis is not None and block is not None and scale.shape[axis] > 1:
        scale = lax.slice_in_dim(jnp.repeat(scale, block, axis=axis), 0, view.shape[axis], axis=axis)
    scale = jnp.broadcast_to(scale, view.shape)
    values = select(lax.ne(scale, scale), jnp.nan, sa.values)  # NaN where the scale is
    return select(lax.eq(scale, F32(0)), F32(0), lax.div(view, scale)), values
