"""`BlockArray`: element values plus scales, a JAX pytree that dequantizes, encodes and packs itself."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from fpemu._core.format import Format
from fpemu._core.modes import Rounding, Saturation, StochasticVariant
from fpemu._jax.elementwise import select
from fpemu._ops import codec
from fpemu._scaled import core as _core
from fpemu._scaled import layout as _layout
from fpemu._scaled.block_format import BlockFormat, BlockFormatLike, block_format_arg, block_formats
from fpemu._scaled.cores import Config, quantize_ste
from fpemu.deprecation import renamed_keyword, warn_renamed
from fpemu.scaled._quantize import (
    DEFAULT_AXIS,
    SCALED_INPUT_DTYPES,
    global_scale_arg,
    prepare,
    prepare_random,
    prepare_scale,
    scale_leaf_arg,
    shape_arg,
    storage_axis,
    storage_codes,
)

F32 = jnp.float32


class Packed(NamedTuple):
    """The storage form of a `BlockArray`: what a user would write to disk or send over a wire.

    ``elements``: uint8, the element codes packed along the last axis (`fpemu.pack`'s layout: two
    FP4 codes per byte, low nibble first; four FP6 codes per three bytes; one byte per FP8/int8
    code), the last axis padded with zero codes to whole bytes. ``scale``: uint8 codes (E8M0, E4M3)
    or float32 values; the NaN scale also marks a group holding a NaN its element format has no code
    for (FP4, FP6, INT8). ``global_scale``: the float32 per-tensor scale, or None.
    """

    elements: jax.Array
    scale: jax.Array
    global_scale: jax.Array | None

    @property
    def nbytes(self) -> int:
        """Total bytes of the three parts."""
        return sum(int(a.size) * a.dtype.itemsize for a in self if a is not None)


def _pack_group(bits: int) -> int:
    """Codes per packing group: the smallest run of codes that fills whole bytes."""
    return 8 // math.gcd(bits, 8)


def _packed_bytes(shape: tuple[int, ...], bits: int) -> tuple[int, ...]:
    """The shape of what `BlockArray.pack` writes for ``shape`` of ``bits``-bit codes."""
    n = shape[-1] if shape else 1
    group = _pack_group(bits)
    return (*shape[:-1], -(-n // group) * group * bits // 8)


def _packed_shape_mismatch(got: tuple[int, ...], shape: tuple[int, ...], block_format: BlockFormat) -> str:
    """Why packed elements of shape ``got`` are not ``shape`` under ``block_format``: the block format's element width
    where another block format's would fit (naming those block formats), else the shape."""
    fmt = block_format.element
    widths = sorted({block_format_arg(name).element.bits for name in block_formats()} - {fmt.bits})
    fitting = [bits for bits in widths if _packed_bytes(shape, bits) == got]
    if fitting:
        others = [name for name in block_formats() if block_format_arg(name).element.bits == fitting[0]]
        return (
            f"packed.elements has shape {got}: {fitting[0]}-bit codes for shape={shape}, but block_format={block_format.name!r} "
            f"has {fmt.bits}-bit {fmt.name} elements: pass the block format it was packed with (block formats with "
            f"{fitting[0]}-bit elements: {', '.join(others)})"
        )
    return (
        f"packed.elements has shape {got}, but shape={shape} of {fmt.bits}-bit {fmt.name} codes packs to "
        f"{_packed_bytes(shape, fmt.bits)}: shape must be the shape that was packed"
    )


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["values", "scale", "global_scale"],
    meta_fields=["block_format", "axis", "dtype"],
)
@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class BlockArray:
    """An array stored as element-format values and per-group scales: ``x ≈ values * scale``.

    A JAX pytree: it passes through ``jit``, ``vmap`` (the scales keep one axis per array axis, so
    batching is transparent) and ``grad``. Make one with `BlockArray.from_array` (or rebuild one
    from storage with `from_codes` / `from_packed`).

    Leaves:
      values: float32, ``x``'s shape: the exact element-format values (before scaling). Elements
        of a group whose scale is NaN are 0.
      scale: the decode scale of each group, in the array's rank (the axis holds the number of
        groups; a per-tensor scale has shape ``(1,) * ndim``): uint8 codes for E8M0 and E4M3 scale
        formats, float32 for float32 scales. E8M0 NaN is ``0xff``, E4M3's ``0x7f``.
      global_scale: the float32 per-tensor decode scale of two-level block formats (NVFP4), shape
        ``(1,) * ndim``, else None.

    Static (aux data): ``block_format``, ``axis`` (negative, or None for a per-tensor scale) and the
    original ``dtype``.

    Gradients: the values' tangent is ``x``'s tangent divided by the scale, and `dequantize`
    multiplies it back, so ``dequantize(quantize(x))`` has the identity as its gradient (NaN and
    zero scales count as 1 there, scales below 2**-126 as 2**-126).
    """

    values: jax.Array
    scale: jax.Array
    global_scale: jax.Array | None
    block_format: BlockFormat
    axis: int | None
    dtype: np.dtype

    # -- shape ----------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def ndim(self) -> int:
        return self.values.ndim

    @property
    def size(self) -> int:
        return int(self.values.size)

    @property
    def recipe(self) -> BlockFormat:
        """Deprecated: `block_format` (the name of an earlier release; warns)."""
        warn_renamed("BlockArray.recipe", "BlockArray.block_format")
        return self.block_format

    @property
    def element(self) -> Format:
        """The element format."""
        return self.block_format.element

    @property
    def block_size(self) -> int | None:
        return self.block_format.block_size

    def layout(self) -> _layout.Layout:
        return _layout.Layout(_core.resolve_axis(self.axis, self.ndim), self.block_format.block_size)

    # -- conversions ----------------------------------------------------------------------------------

    def dequantize(self, dtype: DTypeLike | None = None) -> jax.Array:
        """``values * scale`` (``* global_scale``), in ``dtype`` (default: the original dtype).

        Power-of-two scales are exact. Float scales round each product once to float32 (nearest
        even, subnormals kept), then to ``dtype`` if narrower. NaN-scale groups give NaN.

        Example:
          >>> import jax.numpy as jnp
          >>> from fpemu import scaled
          >>> sa = scaled.BlockArray.from_array(jnp.array([[0.3, -1.7, 5.0, 12.0]]), "mxfp4", pad=True)
          >>> sa.values.tolist(), sa.scale_values().tolist()   # elements, and the block's scale 2**1
          ([[0.0, -1.0, 2.0, 6.0]], [[2.0]])
          >>> sa.dequantize().tolist()
          [[0.0, -2.0, 4.0, 12.0]]
        """
        out = np.dtype(self.dtype if dtype is None else dtype)
        if out.name not in SCALED_INPUT_DTYPES:
            raise TypeError(f"dtype must be float16, bfloat16 or float32, got {out.name}")
        return _dequantize(self.values, self.scale, self.global_scale, (self.block_format, self.axis, out))

    def scale_values(self) -> jax.Array:
        """The decode scale of each group as float32 (NaN for NaN scales), without the global scale.

        E8M0's ``2**-127`` (code 0) is returned exactly, as a float32 subnormal.
        """
        bits, nan = _core.scale_bits(self.scale, self.block_format)
        return select(nan, np.float32(np.nan), lax.bitcast_convert_type(bits, F32))

    def codes(self) -> jax.Array:
        """The element codes, ``values``' shape: ``element.code_dtype`` (`fpemu.encode`'s codes), or,
        for a two's-complement element (MXINT8), the signed integers ``k`` of ``k / 64`` as int8.

        NaN elements (only with a given ``scale``) of an element format without a NaN code (FP4, FP6,
        INT8) encode as `fpemu.encode` does (a zero code); `pack` keeps them NaN through the scale.
        """
        codes = codec.encode(self.values, self.element)
        return _signed_codes(codes, self.element) if self.element.twos_complement else codes

    def pack(self) -> Packed:
        """The storage form (see `Packed`); ``pack().nbytes == nbytes``.

        NaN survives: a NaN element of a format with a NaN code (FP8) is stored as that code, and a
        group whose elements hold a NaN but whose format has no NaN code (FP4, FP6, INT8; possible
        only with a given ``scale``) is stored with the NaN scale (E8M0 ``0xff``, E4M3 ``0x7f``,
        float32 NaN), as OCP MX defines a NaN block: after `from_packed`, every element of that
        group is NaN (the other elements' codes are stored, but the NaN scale hides them).
        """
        fmt = self.element
        codes = codec.encode(self.values, fmt)
        elements = codec.pack_codes(codes.reshape(1) if codes.ndim == 0 else codes, fmt)
        scale = self.scale
        if not fmt.has_nan:
            scale = _core.mark_nan_groups(self.values, scale, self.block_format, self.layout())
        return Packed(elements.astype(jnp.uint8), scale, self.global_scale)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed form: elements (sub-byte codes packed), scales and the global scale."""
        shape = self.shape or (1,)
        bits, group = self.element.bits, _pack_group(self.element.bits)
        last = -(-shape[-1] // group) * group
        elements = math.prod(shape[:-1]) * last * bits // 8
        scales = int(self.scale.size) * self.scale.dtype.itemsize
        extra = 0 if self.global_scale is None else int(self.global_scale.size) * 4
        return elements + scales + extra

    @classmethod
    @renamed_keyword("recipe", "block_format", "fpemu.scaled.BlockArray.from_array")
    def from_array(
        cls,
        x: jax.Array | np.ndarray,
        block_format: BlockFormatLike,
        *,
        axis: int | None = DEFAULT_AXIS,
        rounding: Rounding = "nearest_even",
        key: jax.Array | None = None,
        random_bits: int | None = None,
        scale: ArrayLike | None = None,
        pad: bool = False,
        scale_rule: str | None = None,
        block_size: int | None = None,
        margin: int | None = None,
        saturate: Saturation | None = None,
        stochastic_variant: StochasticVariant = "floor",
        random: ArrayLike | None = None,
    ) -> BlockArray:
        """Quantize ``x`` to a scaled format: per-group scales and element-format values.

        Special values first (current scaling, i.e. no ``scale`` given): a group (block, slice or
        tensor) holding NaN or ±inf gets the NaN scale and dequantizes to NaN in every element (the OCP
        MX rule). An all-zero group gets a finite scale (E8M0: ``2**-127``, code 0; float32 scales: 1;
        NVFP4: block scale 0) and zero elements. Elements that exceed the element format after scaling
        saturate to ±max (``saturate=False`` in the block format: they overflow as `fpemu.quantize` does).
        With a given ``scale``, NaN elements stay NaN and ±inf saturate.

        The scale of each group follows the block format's rule from the group's amax (see `BlockFormat` and
        docs/scaling.md); the elements are ``fpemu.quantize(x / scale)`` with the block format's saturation and
        ``rounding``, where ``x / scale`` is exact for power-of-two scales and the float32 product
        ``x * encode_scale`` for float scales.

        Args:
          x: float16, bfloat16 or float32 array (float64 is refused rather than silently rounded).
          block_format: a block format name (`block_formats`) or a `BlockFormat`.
          axis: the axis the blocks (or per-slice scales) run along; default -1 for block block formats and
            None (one scale per tensor) for the others.
          rounding: element rounding mode (power-of-two block formats: all of `fpemu.quantize`'s; float-scale
            block formats: nearest_even, nearest_away, toward_zero, stochastic).
          key, random_bits, stochastic_variant: for ``rounding="stochastic"``, as in `fpemu.quantize`
            (``stochastic_variant``: ``"floor"``, ``"nearest_even"``, ``"nearest_odd"`` or
            ``"nearest_away"``; anything but ``"floor"`` only with stochastic rounding; the random bits
            follow the element's row-major index in ``x``: ``key=key`` draws
            ``fpemu.stochastic_bits(key, x.shape, random_bits)``, whatever the block format and axis).
          scale: optional decode scales to use instead of computing them (single-level block formats only):
            positive normal float32, broadcastable to the scale shape; powers of two for power-of-two
            block formats.
          pad: allow an axis length that is not a multiple of the block size (the last block is shorter).
          scale_rule, block_size, margin, saturate: override the block format's fields for this call
            (``saturate``: a bool or one of IEEE P3109's modes, as `BlockFormat` takes it).
          random: instead of ``key``, the elements' random bits: integers in ``[0, 2**random_bits)``
            broadcastable to ``x``'s shape, as `fpemu.quantize` takes them; ``key=key`` gives the
            result of ``random=fpemu.stochastic_bits(key, x.shape, random_bits)``.

        Returns:
          A `BlockArray` (``.dequantize()``, ``.codes()``, ``.pack()``, ``.nbytes``).

        Raises:
          TypeError: for a non-array or non-float16/bfloat16/float32 ``x``, a non-int ``axis``, a
            non-bool ``pad``, non-integer ``random`` bits.
          ValueError: unknown block format (with close matches), an axis out of range, a block size that does not divide
            the axis without ``pad=True``, a rounding mode the block format does not allow, a bad ``scale``,
            stochastic rounding with both ``key`` and ``random`` (or neither), ``random`` bits out of
            range or of a shape that does not broadcast to ``x``'s.

        Example:
          >>> import jax.numpy as jnp
          >>> from fpemu import scaled
          >>> x = jnp.arange(1.0, 65.0).reshape(2, 32) / 8
          >>> sa = scaled.BlockArray.from_array(x, "mxfp8_e4m3")
          >>> sa.scale.tolist()                  # E8M0 codes: 2**(2 - 8) and 2**(3 - 8)
          [[121], [122]]
          >>> sa.nbytes                          # 64 one-byte elements + 2 one-byte scales
          66
        """
        overrides = {"scale_rule": scale_rule, "block_size": block_size, "margin": margin, "saturate": saturate}
        x, cfg = prepare(
            x, block_format, axis, rounding, key, random_bits, pad, overrides, stochastic_variant=stochastic_variant,
            random=random,
        )  # fmt: skip
        return quantize_jit(x, prepare_random(key, random, x, cfg), prepare_scale(scale, x, cfg), cfg, x.dtype)

    @classmethod
    @renamed_keyword("recipe", "block_format", "fpemu.scaled.BlockArray.from_codes")
    def from_codes(
        cls,
        codes: ArrayLike,
        scale: ArrayLike,
        *,
        block_format: BlockFormatLike,
        axis: int | None = DEFAULT_AXIS,
        dtype: DTypeLike = np.float32,
        global_scale: ArrayLike | None = None,
    ) -> BlockArray:
        """Rebuild a `BlockArray` from element codes (as `codes` returns them) and its scale leaf.

        Everything is checked against the block format, and what it cannot hold is refused rather than
        read differently: ``scale`` must have exactly the shape `from_array` gives (a 0-d scale is
        taken for a per-tensor one), in the scale format's storage type.

        Args:
          codes: integer element codes: ``element.code_dtype`` values in ``[0, 2**bits)``; for a
            two's-complement element (MXINT8) also signed integers ``k`` (``-128 <= k <= 127``), as
            `codes` returns them.
          scale: the scale leaf, ``x``'s rank with the axis holding the number of groups: uint8
            codes for E8M0 and E4M3 scale formats (`fpemu.encode`'s codes; NaN is the format's NaN
            code), float32 decode scales otherwise (positive and finite, or NaN; powers of two
            for power-of-two rules; float16, bfloat16, or float64 values that are float32 values,
            are converted).
          block_format: a block format name or `BlockFormat`.
          axis: as in `from_array` (default: -1 for block block formats, None for the others).
          dtype: the original dtype, float16, bfloat16 or float32.
          global_scale: the float32 tensor scale of two-level block formats (NVFP4), required there and
            refused elsewhere; shape ``(1,) * ndim`` (or 0-d), positive and finite.

        Raises:
          TypeError: for codes that are not integers, float scales where codes are expected (or
            codes where float32 scales are), a non-float ``dtype``.
          ValueError: for codes or scale codes out of range, a ``scale`` whose shape is not the
            scale shape, scale values the block format cannot produce, an axis out of range (or None
            for a block block format), a missing or unexpected ``global_scale``. Concrete values only:
            under jit, out-of-range codes decode to NaN and the scale's values are not checked.

        Example:
          >>> import numpy as np
          >>> from fpemu import scaled
          >>> codes = np.array([[0x2, 0x3, 0xF, 0x0]], np.uint8)      # E2M1 1.0, 1.5, -6.0, 0.0
          >>> sa = scaled.BlockArray.from_codes(codes, np.array([[128]], np.uint8), block_format="mxfp4")
          >>> sa.dequantize().tolist()                                  # times the E8M0 scale 2**1
          [[2.0, 3.0, -12.0, 0.0]]
          >>> try:
          ...     scaled.BlockArray.from_codes(codes, np.array([[2.0]], np.float32), block_format="mxfp4")
          ... except TypeError as e:
          ...     print(e)
          scale of block format mxfp4 must hold uint8 e8m0fnu codes (fpemu.encode(s, 'e8m0fnu')), got dtype float32
        """
        block_format = block_format_arg(block_format)
        values = codec.decode(storage_codes(codes, block_format.element), block_format.element)  # checks the codes
        ndim = values.ndim
        axis = storage_axis(axis, ndim, block_format)
        out = np.dtype(dtype)
        if out.name not in SCALED_INPUT_DTYPES:
            raise TypeError(f"dtype must be float16, bfloat16 or float32, got {out.name}")
        shape = _layout.group_shape(tuple(values.shape), _layout.Layout(axis, block_format.block_size))
        leaf = scale_leaf_arg(scale, block_format, shape)
        gs = global_scale_arg(global_scale, block_format, ndim)
        return cls(values, leaf, gs, block_format, None if axis is None else axis - ndim, out)

    @classmethod
    @renamed_keyword("recipe", "block_format", "fpemu.scaled.BlockArray.from_packed")
    def from_packed(
        cls,
        packed: Packed,
        *,
        block_format: BlockFormatLike,
        shape: tuple[int, ...],
        axis: int | None = DEFAULT_AXIS,
        dtype: DTypeLike = np.float32,
    ) -> BlockArray:
        """Inverse of `pack`: ``shape`` is the original (unpadded) shape.

        ``packed.elements`` must be exactly what `pack` writes for ``shape`` (``shape[:-1]`` and the
        bytes of ``shape[-1]`` codes padded to whole bytes), and the padding codes must be zero, so
        that a ``shape`` that would drop (or invent) codes is refused. The scales and the global scale
        are checked as in `from_codes`.

        Raises:
          TypeError: if ``packed`` is not a `Packed` (or its elements are not uint8).
          ValueError: a ``shape`` that is not a tuple of non-negative ints, or does not match the
            elements; nonzero padding codes (concrete elements only); as for `from_codes`.
        """
        block_format = block_format_arg(block_format)
        if not isinstance(packed, tuple) or len(packed) != 3:
            raise TypeError(f"packed must be a fpemu.scaled.Packed (what BlockArray.pack returns), got {packed!r}")
        elements, scale, global_scale = packed
        shape = shape_arg(shape)
        fmt = block_format.element
        elements = jnp.asarray(elements)
        if elements.dtype != jnp.uint8:
            raise TypeError(f"packed.elements must be uint8 (what BlockArray.pack writes), got dtype {elements.dtype}")
        n = shape[-1] if shape else 1
        expected = _packed_bytes(shape, fmt.bits)
        if tuple(elements.shape) != expected:
            raise ValueError(_packed_shape_mismatch(tuple(elements.shape), shape, block_format))
        codes = codec.unpack(elements, fmt)
        padding = codes[..., n:]
        if padding.size and not isinstance(padding, jax.core.Tracer) and bool(jnp.any(padding != 0)):
            raise ValueError(
                f"packed.elements holds nonzero codes after the first shape[-1]={n} codes of a row (pack pads "
                "with zero codes): shape drops codes that were packed"
            )
        codes = codes[..., :n].reshape(shape)
        return cls.from_codes(
            codes, scale, block_format=block_format, axis=axis, dtype=dtype, global_scale=global_scale
        )

    # -- Python protocols -----------------------------------------------------------------------------

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        out = np.asarray(self.dequantize())
        return out if dtype is None else out.astype(dtype)

    def __jax_array__(self) -> jax.Array:
        return self.dequantize()

    def __repr__(self) -> str:
        r = self.block_format
        if self.axis is None:
            groups = "one scale per tensor"
        elif r.block_size is None:
            groups = f"one scale per slice along axis {self.axis}"
        else:
            groups = f"blocks of {r.block_size} along axis {self.axis}"
        extra = ", float32 tensor scale" if self.global_scale is not None else ""
        try:
            nbytes = f", {self.nbytes} bytes packed"
        except Exception:  # leaves that are not arrays (inside transformations)
            nbytes = ""
        scale_shape = tuple(getattr(self.scale, "shape", ()))
        return (
            f"BlockArray({r.name}: shape={self.shape} {np.dtype(self.dtype).name}, {groups}, "
            f"{r.element.name} elements, {r.scale_format.name} scales {scale_shape}{extra}{nbytes})"
        )


def _signed_codes(codes: jax.Array, fmt: Format) -> jax.Array:
    """Two's-complement codes (unsigned) as the signed integers they hold (int8 for 8 bits)."""
    k = codes.astype(jnp.int32)
    k = select(lax.ge(k, np.int32(fmt.num_codes // 2)), lax.sub(k, np.int32(fmt.num_codes)), k)
    return k.astype(jnp.dtype(f"int{fmt.code_dtype.itemsize * 8}"))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _dequantize_ste(values, scale, global_scale, meta):
    block_format, axis, dtype = meta
    layout = _layout.Layout(_core.resolve_axis(axis, values.ndim), block_format.block_size)
    return _core.decode(values, scale, global_scale, block_format, layout).astype(dtype)


@_dequantize_ste.defjvp
def _dequantize_jvp(meta, primals, tangents):
    values, scale, global_scale = primals
    values_dot = tangents[0]
    block_format, axis, dtype = meta
    layout = _layout.Layout(_core.resolve_axis(axis, values.ndim), block_format.block_size)
    out = _dequantize_ste(values, scale, global_scale, meta)
    sg = _layout.expand(_core.grad_scale(scale, global_scale, block_format), layout, values.shape)
    return out, (values_dot.astype(F32) * sg).astype(dtype)


_dequantize = jax.jit(_dequantize_ste, static_argnums=(3,))


@functools.partial(jax.jit, static_argnums=(3, 4))
def quantize_jit(x, key, scale, cfg: Config, dtype) -> BlockArray:
    """The `BlockArray` of ``x`` with its scales from the data, or the given ``scale`` (jitted)."""
    values, scale_leaf, global_leaf = quantize_ste(x, key, scale, cfg)
    axis = None if cfg.axis is None else cfg.axis - x.ndim
    return BlockArray(values, scale_leaf, global_leaf, cfg.block_format, axis, np.dtype(dtype))
