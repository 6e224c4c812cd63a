"""`quantize_operand`: one operand of one GEMM quantized by its `Quantizer`, and the views of it that
the GEMMs and the statistics read (`quantize_operand_split`, `scaled_view`).

The scaled modes are carried out by the checked-once cores of `fpemu.scaled.quantize_dequantize`
and `quantize_dequantize_split` (`fpemu._scaled.cores`, on a `Config` made from the `Quantizer`,
which was checked when it was made) with the `fpemu.scaled.BlockFormat` the quantizer holds; this
module only decides *which* elements share a scale: the operand's contraction axis
(`fpemu._training.layout`), 1-D blocks along it, or 2-D tiles of the matrix view.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp

from fpemu._args import check_fits, input_format, int_arg
from fpemu._ops.quantize import round_checked
from fpemu._ops.rounding_spec import rounding_spec_once
from fpemu._scaled.cores import Config, config, qdq_jit, quantize_ste, scale_of_amax, split_core, with_overrides
from fpemu._scaled.layout import group_shape
from fpemu._training.layout import Contraction, contracting_dims_arg, tiles, untiles
from fpemu._training.operands import operand_arg
from fpemu._training.quantizer import MAX_MARGIN, Quantizer, amax_arg, quantizer_key_arg
from fpemu.scaled import BlockArray, BlockFormat

__all__ = [
    "element_rounding",
    "operand_view",
    "quantize_operand",
    "quantize_operand_split",
    "scaled_operand",
    "scaled_view",
]


@functools.lru_cache(maxsize=256)
def _group_format(q: Quantizer) -> BlockFormat:
    """The block format of the groups `operand_view` cuts: a 2-D tile, flattened, is one block of
    ``block_size**2`` elements."""
    fmt = q.block_format
    return fmt if q.scaling != "block_2d" else dataclasses.replace(fmt, block_size=cast(int, q.block_size) ** 2)


def quantize_operand(
    x: Any,
    contracting_dims: Sequence[int],
    q: Quantizer,
    *,
    key: jax.Array | None = None,
    amax: Any = None,
    margin: int = 0,
) -> jax.Array:
    """``x`` quantized by ``q`` along the contraction ``contracting_dims``, dequantized, in ``x``'s dtype.

    Special values first (current scaling): a group holding NaN or ±inf dequantizes to NaN in every
    element; an all-zero group to zeros. Delayed scaling (``amax`` given): an ``amax`` of 0 (an
    empty history) gives scale 1, Transformer Engine's initial scale; a NaN or infinite ``amax``
    gives NaN everywhere; elements above the scaled range saturate, NaN elements stay NaN. The
    dequantized values are float32 products rounded once to ``x``'s dtype (exact for power-of-two
    scales; a float16/bfloat16 ``x`` with float scales is rounded a second time, to its dtype).

    Grouping: the contracting dimensions are merged into one axis ``K`` (in place when they are
    consecutive and increasing, else moved last in the order listed; `fpemu._training.layout`).
    ``"row"`` and ``"block"`` scales run along ``K``; ``"block_2d"`` tiles the matrix whose rows are
    the other dimensions (merged in their order) and whose columns are ``K``; ``"tensor"``,
    ``"delayed"`` and ``"none"`` quantize ``x`` as it is. A last block or tile that does not fill is
    shorter (as if zero-padded). Stochastic rounding draws the random bits of the element's row-major
    position in that view (`fpemu.stochastic_bits`; for ``"block_2d"`` the (tile row, tile column,
    row in tile, column in tile) view).

    The gradient is the identity (straight-through), as `fpemu.scaled.quantize_dequantize`'s.

    Args:
      x: float16, bfloat16 or float32 array.
      contracting_dims: the dimensions of ``x`` the GEMM contracts (negative ones from the end).
      q: the `Quantizer`.
      key: a JAX PRNG key, needed when ``q.rounding == "stochastic"`` (ignored otherwise).
      amax: with ``scaling="delayed"`` (and only then): the float32 scalar amax the scale comes from.
      margin: Transformer Engine's ``margin``: scales are multiplied by ``2**margin``.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[1.0, 2.0, 3.0, 100.0], [0.1, 0.2, 0.3, 0.4]])
      >>> q = Quantizer(format="e2m1fn", scaling="row", scale_format="e8m0fnu")
      >>> quantize_operand(x, [1], q).tolist()       # one power-of-two scale per row of x
      [[0.0, 0.0, 0.0, 96.0], [0.09375, 0.1875, 0.25, 0.375]]
      >>> quantize_operand(x, [0], q)[:, 3].tolist()  # per column: 100 and 0.4 share a scale
      [96.0, 0.0]
    """
    x, dims, key, amax, margin = _checked(x, contracting_dims, q, key, amax, margin)
    return _quantize(x, key, amax, None, q=q, dims=_traced_dims(q, dims, x.ndim), margin=margin)


def _checked(x: Any, contracting_dims: Any, q: Any, key: Any, amax: Any, margin: Any) -> tuple[Any, ...]:
    """The arguments of `quantize_operand` and `scaled_view`, checked: (x, dims, key, amax, margin)."""
    if not isinstance(q, Quantizer):
        raise TypeError(f"q must be a fpemu Quantizer, got {type(q).__name__}")
    x = operand_arg(x, "x")
    dims = contracting_dims_arg(contracting_dims, x.ndim)
    margin = int_arg(margin, "margin", minimum=-MAX_MARGIN, maximum=MAX_MARGIN)
    return x, dims, quantizer_key_arg(key, q, "key"), amax_arg(amax, q, "amax"), margin


def _traced_dims(q: Quantizer, dims: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """The contraction `_quantize` is traced with: where the result does not depend on ``dims``, one
    value, so that the quantizations of one array for different GEMMs (a weight in the forward GEMM
    and in dgrad) are one traced computation on the same input, which XLA computes once.

    - ``"none"``, ``"tensor"``, ``"delayed"``: the array is quantized as it is (``dims`` unused);
    - `_matrix_tiles_nearest`: the tiles of ``W`` and of ``W^T`` hold the same elements (the grid starts
      at (0, 0) either way, partial tiles end both dimensions), hence the same scales and values; the
      matrix is tiled as stored. Stochastic rounding keeps ``dims``: its bits follow the tiled view.
    """
    if q.scaling in ("none", "tensor", "delayed"):
        return ()
    return (1,) if _matrix_tiles_nearest(q, ndim, dims) else dims


def _matrix_tiles_nearest(q: Quantizer, ndim: int, dims: tuple[int, ...]) -> bool:
    """Whether ``q`` cuts a matrix (rank 2, one contracting dimension) into 2-D tiles rounded to nearest."""
    return q.scaling == "block_2d" and q.rounding != "stochastic" and ndim == 2 and len(dims) == 1


def operand_view(x: jax.Array, q: Quantizer, dims: tuple[int, ...]) -> tuple[jax.Array, int | None, Callable[..., Any]]:
    """(the array ``q``'s block format quantizes, the axis its groups run along, the map back to ``x``)."""
    if q.scaling in ("none", "tensor", "delayed"):
        return x, None, lambda y: y
    c = Contraction(tuple(x.shape), dims)
    if q.scaling in ("row", "block"):
        return (*c.group(x), c.ungroup)
    b = cast(int, q.block_size)
    return tiles(c.matrix(x), b), 2, lambda t: c.unmatrix(untiles(t, b, (c.rows, c.k)))


def _block_format_and_view(x: jax.Array, q: Quantizer, dims: tuple[int, ...]):
    """(the block format, the array it quantizes, how: its options, the map back to ``x``). A matrix's
    2-D tiles rounded to nearest are quantized where they lie (`fpemu.scaled`'s ``tile_axis``: the same
    values as `tiles` cut out, without moving the elements twice); stochastic rounding keeps the
    cut-out view, whose element positions its random bits follow."""
    if _matrix_tiles_nearest(q, x.ndim, dims):  # either contraction: the same tiles (`_traced_dims`)
        return q.block_format, x, {"axis": 1, "tile_axis": 0}, lambda y: y
    view, axis, back = operand_view(x, q, dims)
    return _group_format(q), view, {"axis": axis}, back


def _config(q: Quantizer, fmt: BlockFormat, layout: dict[str, Any], margin: int) -> Config:
    """The `Config` of ``q``'s quantization of its view (``layout``: its ``axis`` and ``tile_axis``), as
    `fpemu.scaled.quantize_dequantize` makes it of the same options; ``margin`` applied to the block
    format's scales (delayed scaling applies it to the scale from the amax instead, `_delayed_scale`)."""
    if margin and q.scaling != "delayed":
        fmt = with_overrides(fmt, {"margin": margin})
    return config(fmt, layout["axis"], q.rounding, q.random_bits, layout.get("tile_axis"))


def _given(x: jax.Array, key: Any, amax: Any, q: Quantizer, margin: int, cfg: Config) -> tuple[Any, Any]:
    """(the elements' key, the given decode scale) of ``x`` (the view) for ``cfg``: the key for stochastic
    rounding only; the scale for delayed scaling only, broadcast to the shape of the scales."""
    stream = key if q.rounding == "stochastic" else None
    if q.scaling != "delayed":
        return stream, None
    return stream, jnp.broadcast_to(_delayed_scale(amax, q.block_format, margin), group_shape(x.shape, cfg.layout()))


def element_rounding(x: jax.Array, key: Any, q: Quantizer) -> jax.Array:
    """``x`` rounded to ``q``'s element format (``scaling="none"``), as `fpemu.quantize` rounds it."""
    spec = rounding_spec_once(q.element, q.rounding, q.saturate, True, q.random_bits)
    check_fits(spec.fmt, input_format(x.dtype))
    return round_checked(x, spec, key if q.rounding == "stochastic" else None)


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def _quantize(x, key, amax, probe, *, q: Quantizer, dims: tuple[int, ...], margin: int):
    if q.scaling == "none":
        return element_rounding(x, key, q)
    fmt, view, layout, back = _block_format_and_view(x, q, dims)
    cfg = _config(q, fmt, layout, margin)
    return back(qdq_jit(view, *_given(view, key, amax, q, margin, cfg), cfg, probe))


def quantize_operand_split(
    x: jax.Array, dims: tuple[int, ...], q: Quantizer, *, key: Any, amax: Any, margin: int, probe: Any = None
) -> tuple[jax.Array, jax.Array | None]:
    """(blocks, tensor scale): `quantize_operand`'s result as ``fl(blocks * t)`` with ``q``'s float32
    per-tensor scale ``t`` (a float32 scalar) apart (`fpemu.scaled.quantize_dequantize_split`), for
    `quantized_dot_general` to apply after the product; ``blocks`` are float32. ``t`` is None for
    quantizers without one (`Quantizer.tensor_scaled`), and ``blocks`` is then `quantize_operand`'s
    result (in ``x``'s dtype). Arguments as `quantize_operand`'s, already checked; ``probe``: the array
    whose first element the quantizer's materializations read for their predicate (None: each its
    own), so that XLA computes one predicate for all of them (`fpemu._ops.fusion.materialize`)."""
    traced = _traced_dims(q, dims, x.ndim)
    key = key if q.rounding == "stochastic" else None  # as `quantizer_key_arg`: one trace for every GEMM's key
    if not q.tensor_scaled:
        return _quantize(x, key, amax, probe, q=q, dims=traced, margin=margin), None
    return _split(x, key, amax, probe, q=q, dims=traced, margin=margin)


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def _split(x, key, amax, probe, *, q: Quantizer, dims: tuple[int, ...], margin: int):
    fmt, view, layout, back = _block_format_and_view(x, q, dims)
    cfg = _config(q, fmt, layout, margin)
    blocks, t = split_core(view, *_given(view, key, amax, q, margin, cfg), cfg, probe)
    assert t is not None, q  # tensor_scaled: the block format has a float per-tensor scale
    return back(blocks), t.reshape(())


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def scaled_operand(x, key, amax, *, q: Quantizer, dims: tuple[int, ...], margin: int) -> BlockArray:
    """`scaled_view` on checked arguments: the checked-once core internal callers use."""
    view, axis, _ = operand_view(x, q, dims)
    cfg = _config(q, _group_format(q), {"axis": axis}, margin)
    values, scale_leaf, global_leaf = quantize_ste(view, *_given(view, key, amax, q, margin, cfg), cfg)
    return BlockArray(
        values, scale_leaf, global_leaf, cfg.block_format, None if axis is None else axis - view.ndim, view.dtype
    )


def scaled_view(
    x: Any,
    contracting_dims: Sequence[int],
    q: Quantizer,
    *,
    key: jax.Array | None = None,
    amax: Any = None,
    margin: int = 0,
) -> BlockArray:
    """What `quantize_operand` computes, before dequantization: a `fpemu.scaled.BlockArray` of the view
    ``q`` groups (``x`` itself for per-tensor scaling; the contraction merged for ``"row"``/``"block"``,
    along its ``axis``; the (tile row, tile column, tile element) array for ``"block_2d"``).

    Its ``scale`` leaf holds the scales in their storage form (E8M0 or E4M3 codes, or float32
    values), ``global_scale`` NVFP4's tensor scale, ``values`` the element values: what statistics
    read. Its ``dequantize()``, mapped back to ``x``'s layout, is `quantize_operand`'s result, bit for
    bit. Same arguments as `quantize_operand`; ``scaling="none"`` has no scales (a ValueError).

    Example:
      >>> import jax.numpy as jnp
      >>> q = Quantizer(format="e4m3fn", scaling="block", block_size=2, scale_format="e8m0fnu")
      >>> scaled_view(jnp.array([[1.0, 2.0], [3.0, 40.0]]), [0], q).scale.tolist()   # E8M0 codes, per column
      [[120, 124]]
    """
    x, dims, key, amax, margin = _checked(x, contracting_dims, q, key, amax, margin)
    if q.scaling == "none":
        raise ValueError("scaled_view: a quantizer with scaling='none' has no scales (use quantize_operand)")
    return scaled_operand(x, key, amax, q=q, dims=dims, margin=margin)


def _delayed_scale(amax: jax.Array, fmt: BlockFormat, margin: int) -> jax.Array:
    """The decode scale tensor scaling gives a tensor whose amax is ``amax`` (1 for amax 0, NaN for a
    NaN or infinite amax): `fpemu.scaled.scale_from_amax`, the scale `fpemu.scaled.DelayedScaling`
    computes from a reduced history."""
    return scale_of_amax(jnp.reshape(amax, ()).astype(jnp.float32), with_overrides(fmt, {"margin": margin or None}))
