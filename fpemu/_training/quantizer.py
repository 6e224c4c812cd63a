"""`Quantizer`: how one operand of one GEMM is quantized, and `quantize_operand`, which does it.

A `Quantizer` is data (frozen, hashable: a ``jax.jit`` static argument). Its scaled modes are
carried out by `fpemu.scaled.quantize_dequantize` (one `fpemu.scaled.BlockFormat` per quantizer, built
once); this module only decides *which* elements share a scale: the operand's contraction axis
(`fpemu._training.layout`), 1-D blocks along it, or 2-D tiles of the matrix view.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast, get_args

import jax
import jax.numpy as jnp
from jax import lax

from fpemu._args import bool_arg, choice_arg, format_arg, int_arg, key_arg, random_bits_arg
from fpemu._core.format import Format
from fpemu._core.registry import FormatLike, get_format
from fpemu._ops.quantize import quantize as element_quantize
from fpemu._training.layout import Contraction, contracting_dims_arg, tiles, untiles
from fpemu._training.operands import operand_arg
from fpemu.scaled import SCALE_RULES, BlockArray, BlockFormat, quantize_dequantize, quantize_dequantize_split

__all__ = [
    "QUANTIZER_ROUNDINGS",
    "SCALINGS",
    "Quantizer",
    "QuantizerRounding",
    "Scaling",
    "amax_arg",
    "operand_view",
    "quantize_operand",
    "quantize_operand_split",
    "quantizer_key_arg",
    "scaled_operand",
    "scaled_view",
]

#: Which elements share a scale (see `Quantizer`).
Scaling = Literal["none", "tensor", "delayed", "row", "block", "block_2d"]
SCALINGS: tuple[str, ...] = get_args(Scaling)
#: The element roundings of a training recipe.
QuantizerRounding = Literal["nearest_even", "stochastic"]
QUANTIZER_ROUNDINGS: tuple[str, ...] = get_args(QuantizerRounding)

_FP32 = get_format("fp32")
_MAX_MARGIN = 64  # as fpemu.scaled.BlockFormat: 2**±margin stays a normal float32


def _scale_kind(fmt: Format) -> str:
    if fmt.encoding == _FP32.encoding:
        return "fp32"
    return "pow2" if fmt.mantissa_bits == 0 else "narrow"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Quantizer:
    """How one operand of one GEMM is quantized: element format, scaling, scale format and rule, rounding.

    Scales are computed along the GEMM's contraction axis ``K`` (the operand's contracting
    dimensions merged, see `quantize_operand`):

    - ``"none"``: each element rounded to ``format`` (`fpemu.quantize`), no scale.
    - ``"tensor"``: one scale per tensor from its current amax (Transformer Engine's current
      scaling, torchao's tensorwise).
    - ``"delayed"``: one scale per tensor from an amax given by the caller (the reduced amax
      history of earlier steps; Transformer Engine's ``DelayedScaling``).
    - ``"row"``: one scale per slice along ``K`` (per row of an activation ``x[m, :]``, per column
      of a weight ``W[:, n]``; torchao's rowwise/axiswise).
    - ``"block"``: one scale per run of ``block_size`` elements along ``K`` (OCP MX: 32; NVFP4: 16;
      DeepSeek-V3's 1 x 128 tiles).
    - ``"block_2d"``: one scale per ``block_size`` x ``block_size`` tile of the matrix (other
      dimensions, ``K``): weights quantized once for the forward and the transposed backward GEMM
      (DeepSeek-V3's 128 x 128 blocks, NVFP4's 16 x 16).

    The scale of a group is computed by `fpemu.scaled` from the group's amax with ``scale_rule``
    (``"float"``: ``amax / max`` as a float32, or rounded into a narrow ``scale_format``; ``"ocp"``,
    ``"ceil"``, ``"even"``, ``"ceil_log2"``: powers of two; see `fpemu.scaled.BlockFormat`). Special
    values: a group holding NaN or ±inf dequantizes to NaN in every element (current scaling);
    elements beyond the format's range after scaling saturate to ±max (``saturate=True``, as OCP MX
    and Transformer Engine's casts do).

    Args:
      format: the element format (a name such as ``"e4m3fn"``, ``"e5m2"``, ``"e2m1fn"``, or a
        `fpemu.Format`); normalised to a `fpemu.Format`.
      scaling: one of `SCALINGS` (above).
      block_size: elements per block (``"block"``) or the tile side (``"block_2d"``); None otherwise.
      scale_format: ``"fp32"`` (float32 scales, powers of two or not), ``"e8m0fnu"`` (OCP MX) or a
        narrow float such as ``"e4m3fn"`` (NVFP4 block scales).
      scale_rule: one of `fpemu.scaled.SCALE_RULES`; None picks ``"ocp"`` for an E8M0 scale format
        and ``"float"`` otherwise.
      tensor_scale: a float32 per-tensor scale above narrow block scales (NVFP4's second level).
      rounding: ``"nearest_even"`` or ``"stochastic"`` (needs a key when quantizing).
      saturate: clamp elements that overflow after scaling to ±max (else they overflow as
        `fpemu.quantize` does).
      random_bits: random bits per element of stochastic rounding (1..32; None: 32).

    Raises:
      ValueError: naming the field and the valid choices, for an unknown format, scaling or rule, a
        missing or superfluous ``block_size``, a rule the scale format cannot hold, ``tensor_scale``
        without a narrow scale format, a scale field with ``scaling="none"``.
      TypeError: for a non-bool flag or a non-int size.

    Example:
      >>> q = Quantizer(format="e4m3fn", scaling="block", block_size=32, scale_format="e8m0fnu")
      >>> q.format.name, q.scale_rule, q == Quantizer(format="float8_e4m3fn", scaling="block",
      ...     block_size=32, scale_format="e8m0fnu", scale_rule="ocp")
      ('e4m3fn', 'ocp', True)
    """

    format: FormatLike
    scaling: Scaling = "tensor"
    block_size: int | None = None
    scale_format: FormatLike = "fp32"
    scale_rule: str | None = None
    tensor_scale: bool = False
    rounding: QuantizerRounding = "nearest_even"
    saturate: bool = True
    random_bits: int | None = None

    def __post_init__(self) -> None:
        fmt = format_arg(self.format, "Quantizer.format")
        scaling = choice_arg(self.scaling, SCALINGS, "Quantizer.scaling")
        block = self.block_size
        if scaling in ("block", "block_2d"):
            if block is None:
                raise ValueError(
                    f"Quantizer.block_size is required with scaling={scaling!r}: elements per block along the "
                    "contraction axis (32 for MX, 16 for NVFP4, 128 for DeepSeek-V3)"
                )
            block = int_arg(block, "Quantizer.block_size", minimum=1)
        elif block is not None:
            raise ValueError(
                f"Quantizer.block_size={block!r} is only used with scaling='block' or 'block_2d', not {scaling!r}"
            )
        scale_format = format_arg(self.scale_format, "Quantizer.scale_format")
        kind = _scale_kind(scale_format)
        rule = self.scale_rule
        if scaling == "none":
            if kind != "fp32" or rule is not None or self.tensor_scale is not False:
                raise ValueError(
                    "Quantizer.scale_format, scale_rule and tensor_scale are only used with scaled quantizers: "
                    f"leave them at their defaults with scaling='none' (got scale_format={scale_format.name!r}, "
                    f"scale_rule={rule!r}, tensor_scale={self.tensor_scale!r})"
                )
        if rule is None:
            rule = "ocp" if kind == "pow2" else "float"
        rule = choice_arg(rule, SCALE_RULES, "Quantizer.scale_rule")
        tensor_scale = bool_arg(self.tensor_scale, "Quantizer.tensor_scale")
        rounding = choice_arg(self.rounding, QUANTIZER_ROUNDINGS, "Quantizer.rounding")
        stochastic = rounding == "stochastic"
        random_bits_arg(self.random_bits, stochastic, "Quantizer.random_bits", rounding=rounding)
        fields = {
            "format": fmt,
            "scaling": scaling,
            "block_size": block,
            "scale_format": scale_format,
            "scale_rule": rule,
            "tensor_scale": tensor_scale,
            "rounding": rounding,
            "saturate": bool_arg(self.saturate, "Quantizer.saturate"),
            "random_bits": None if self.random_bits is None else int(self.random_bits),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        self._check_scales(kind)
        if scaling != "none":
            _block_format_of(self)  # fpemu.scaled checks the rest (element range, exact scaling)

    def _check_scales(self, kind: str) -> None:
        rule, fmt_name = self.scale_rule, cast(Format, self.scale_format).name
        if kind == "pow2" and rule == "float":
            raise ValueError(
                f"Quantizer.scale_rule='float' cannot be held by scale_format={fmt_name!r} (powers of two only): "
                f"use one of {', '.join(repr(r) for r in SCALE_RULES if r != 'float')}"
            )
        if kind == "narrow" and rule != "float":
            raise ValueError(
                f"Quantizer.scale_rule must be 'float' with the narrow scale_format={fmt_name!r} (the block amax over "
                f"the element max, rounded into {fmt_name}), got {rule!r}"
            )
        if self.tensor_scale and kind != "narrow":
            raise ValueError(
                f"Quantizer.tensor_scale=True needs a narrow block scale format such as scale_format='e4m3fn' "
                f"(NVFP4), got {fmt_name!r}"
            )
        if self.scaling == "delayed" and kind == "narrow":
            raise ValueError(
                f"Quantizer.scaling='delayed' needs a single-level scale (scale_format 'fp32' or 'e8m0fnu'), "
                f"got {fmt_name!r}"
            )

    @property
    def element(self) -> Format:
        """The element format (``format``, normalised)."""
        return cast(Format, self.format)

    @property
    def block_format(self) -> BlockFormat:
        """The `fpemu.scaled.BlockFormat` this quantizer quantizes with (a 2-D tile is one group of
        ``block_size**2`` elements); a ValueError for ``scaling="none"``, which has no scales."""
        if self.scaling == "none":
            raise ValueError("a Quantizer with scaling='none' has no block format (no scales)")
        return _block_format_of(self)

    @property
    def pow2(self) -> bool:
        """Whether every scale is a power of two (a power-of-two rule, or no scale at all)."""
        return self.scaling == "none" or self.scale_rule != "float"

    @property
    def tensor_scaled(self) -> bool:
        """Whether the operand has a float32 per-tensor scale that is not a power of two (``"tensor"``
        and ``"delayed"`` scaling with float32 scales and the ``"float"`` rule, or NVFP4's
        ``tensor_scale``): a GEMM applies it to its result (`fpemu.scaled.BlockFormat.has_tensor_scale`
        of the quantizer's block format, per tensor or along the contraction)."""
        if self.scaling == "none":
            return False
        return self.block_format.has_tensor_scale(None if self.scaling in ("tensor", "delayed") else 0)

    def __repr__(self) -> str:
        parts = [f"format={self.element.name!r}", f"scaling={self.scaling!r}"]
        if self.block_size is not None:
            parts.append(f"block_size={self.block_size}")
        if self.scaling != "none":
            parts += [f"scale_format={cast(Format, self.scale_format).name!r}", f"scale_rule={self.scale_rule!r}"]
        if self.tensor_scale:
            parts.append("tensor_scale=True")
        if self.rounding != "nearest_even":
            parts.append(f"rounding={self.rounding!r}")
        if not self.saturate:
            parts.append("saturate=False")
        if self.random_bits is not None:
            parts.append(f"random_bits={self.random_bits}")
        return f"Quantizer({', '.join(parts)})"


@functools.lru_cache(maxsize=256)
def _block_format_of(q: Quantizer) -> BlockFormat:
    """`Quantizer.block_format`, built and checked once per quantizer."""
    block = {"block": q.block_size, "block_2d": None if q.block_size is None else q.block_size**2}.get(q.scaling)
    try:
        return BlockFormat(
            name=f"{q.element.name}/{q.scaling}",
            element=q.element,
            block_size=block,
            scale_format=cast(Format, q.scale_format),
            scale_rule=cast(str, q.scale_rule),
            global_scale=q.tensor_scale,
            saturate=q.saturate,
        )
    except ValueError as e:
        message = str(e).split(": ", 1)[-1].replace("global_scale", "tensor_scale")
        raise ValueError(f"Quantizer(format={q.element.name!r}, scaling={q.scaling!r}): {message}") from None


# -- inputs ------------------------------------------------------------------------------------------


def amax_arg(amax: Any, q: Quantizer, name: str) -> jax.Array | None:
    if q.scaling != "delayed":
        if amax is not None:
            raise ValueError(f"{name} is only used with scaling='delayed', not {q.scaling!r}")
        return None
    if amax is None:
        raise ValueError(f"scaling='delayed' needs {name}: the float32 amax (from the history) the scale comes from")
    a = jnp.asarray(amax)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise TypeError(f"{name} must be a float scalar, got dtype {a.dtype}")
    if a.shape != ():
        raise ValueError(f"{name} must be a scalar (shape ()), got shape {a.shape}")
    return a.astype(jnp.float32)


def quantizer_key_arg(key: Any, q: Quantizer, name: str) -> Any:
    if q.rounding != "stochastic":
        return None  # a key for the other operand or the Hadamard transform: not this quantizer's business
    return key_arg(key, True, name, what=f"{q!r} (rounding='stochastic')")


# -- the computation -----------------------------------------------------------------------------------


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
    if not isinstance(q, Quantizer):
        raise TypeError(f"q must be a fpemu Quantizer, got {type(q).__name__}")
    x = operand_arg(x, "x")
    dims = contracting_dims_arg(contracting_dims, x.ndim)
    margin = int_arg(margin, "margin", minimum=-_MAX_MARGIN, maximum=_MAX_MARGIN)
    key, amax = quantizer_key_arg(key, q, "key"), amax_arg(amax, q, "amax")
    return _quantize(x, key, amax, q=q, dims=_traced_dims(q, dims, x.ndim), margin=margin)


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
        fmt = dataclasses.replace(q.block_format, block_size=q.block_size)
        return fmt, x, {"axis": 1, "tile_axis": 0}, lambda y: y
    view, axis, back = operand_view(x, q, dims)
    return q.block_format, view, {"axis": axis}, back


def _options(key: Any, amax: Any, q: Quantizer, margin: int) -> dict[str, Any]:
    """The keyword arguments of `fpemu.scaled.quantize_dequantize` / ``BlockArray.from_array``."""
    kw: dict[str, Any] = {"rounding": q.rounding, "pad": True}
    if q.rounding == "stochastic":
        kw.update(key=key, random_bits=q.random_bits)
    if q.scaling == "delayed":
        kw["scale"] = _delayed_scale(amax, q.block_format, margin)
    elif margin:
        kw["margin"] = margin
    return kw


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def _quantize(x, key, amax, *, q: Quantizer, dims: tuple[int, ...], margin: int):
    if q.scaling == "none":
        stochastic = q.rounding == "stochastic"
        extra = {"key": key, "random_bits": q.random_bits} if stochastic else {}
        return element_quantize(x, q.element, rounding=q.rounding, saturate=q.saturate, **extra)
    fmt, view, layout, back = _block_format_and_view(x, q, dims)
    return back(quantize_dequantize(view, fmt, **layout, **_options(key, amax, q, margin)))


def quantize_operand_split(
    x: jax.Array, dims: tuple[int, ...], q: Quantizer, *, key: Any, amax: Any, margin: int
) -> tuple[jax.Array, jax.Array | None]:
    """(blocks, tensor scale): `quantize_operand`'s result as ``fl(blocks * t)`` with ``q``'s float32
    per-tensor scale ``t`` (a float32 scalar) apart (`fpemu.scaled.quantize_dequantize_split`), for
    `quantized_dot_general` to apply after the product; ``blocks`` are float32. ``t`` is None for
    quantizers without one (`Quantizer.tensor_scaled`), and ``blocks`` is then `quantize_operand`'s
    result (in ``x``'s dtype). Arguments as `quantize_operand`'s, already checked."""
    if not q.tensor_scaled:
        return quantize_operand(x, dims, q, key=key, amax=amax, margin=margin), None
    return _split(x, key, amax, q=q, dims=_traced_dims(q, dims, x.ndim), margin=margin)


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def _split(x, key, amax, *, q: Quantizer, dims: tuple[int, ...], margin: int):
    fmt, view, layout, back = _block_format_and_view(x, q, dims)
    blocks, t = quantize_dequantize_split(view, fmt, **layout, **_options(key, amax, q, margin))
    assert t is not None, q  # tensor_scaled: the block format has a float per-tensor scale
    return back(blocks), t.reshape(())


@functools.partial(jax.jit, static_argnames=("q", "dims", "margin"))
def scaled_operand(x, key, amax, *, q: Quantizer, dims: tuple[int, ...], margin: int) -> BlockArray:
    """`scaled_view` on checked arguments: the checked-once core internal callers use."""
    view, axis, _ = operand_view(x, q, dims)
    return BlockArray.from_array(view, q.block_format, axis=axis, **_options(key, amax, q, margin))


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
    if not isinstance(q, Quantizer):
        raise TypeError(f"q must be a fpemu Quantizer, got {type(q).__name__}")
    if q.scaling == "none":
        raise ValueError("scaled_view: a quantizer with scaling='none' has no scales (use quantize_operand)")
    x = operand_arg(x, "x")
    dims = contracting_dims_arg(contracting_dims, x.ndim)
    margin = int_arg(margin, "margin", minimum=-_MAX_MARGIN, maximum=_MAX_MARGIN)
    return scaled_operand(x, quantizer_key_arg(key, q, "key"), amax_arg(amax, q, "amax"), q=q, dims=dims, margin=margin)


def _delayed_scale(amax: jax.Array, fmt: BlockFormat, margin: int) -> jax.Array:
    """The decode scale tensor scaling gives a tensor whose amax is ``amax`` (1 for amax 0, NaN for a
    NaN or infinite amax): the scale `fpemu.scaled.DelayedScaling` computes from a reduced history."""
    a = jnp.abs(amax).reshape(1)
    extra: dict[str, Any] = {"margin": margin} if margin else {}
    sa = BlockArray.from_array(a, fmt, axis=None, **extra)
    scale = sa.scale_values().reshape(())
    bits = lax.bitcast_convert_type(a[0], jnp.uint32)
    # NaN explicitly: BlockArray.scale_values() reads E8M0's NaN code 0xff as inf
    scale = jnp.where(bits >= jnp.uint32(0x7F800000), jnp.float32(jnp.nan), scale)
    return jnp.where(bits == jnp.uint32(0), jnp.float32(1), scale)
