"""`ScaledArray`: element values plus scales, a JAX pytree that dequantizes, encodes and packs itself."""

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
from fpemu._core.modes import Rounding
from fpemu._ops import codec
from fpemu.scaled import _core
from fpemu.scaled._quantize import DEFAULT_AXIS, SCALED_INPUT_DTYPES, Config, prepare, prepare_scale, quantize_ste
from fpemu.scaled._recipes import Recipe, RecipeLike, get_recipe, is_twos_complement

F32 = jnp.float32


class Packed(NamedTuple):
    """The storage form of a `ScaledArray`: what a user would write to disk or send over a wire.

    ``elements``: uint8, the element codes packed along the last axis (`fpemu.pack`'s layout: two
    FP4 codes per byte, low nibble first; four FP6 codes per three bytes; one byte per FP8/int8
    code), the last axis padded with zero codes to whole bytes. ``scale``: uint8 codes (E8M0, E4M3)
    or float32 values. ``global_scale``: the float32 per-tensor scale, or None.
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


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["values", "scale", "global_scale"],
    meta_fields=["recipe", "axis", "dtype"],
)
@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class ScaledArray:
    """An array stored as element-format values and per-group scales: ``x ≈ values * scale``.

    A JAX pytree: it passes through ``jit``, ``vmap`` (the scales keep one axis per array axis, so
    batching is transparent) and ``grad``. Make one with `ScaledArray.from_array` (or rebuild one
    from storage with `from_codes` / `from_packed`).

    Leaves:
      values: float32, ``x``'s shape: the exact element-format values (before scaling). Elements
        of a group whose scale is NaN are 0.
      scale: the decode scale of each group, in the array's rank (the axis holds the number of
        groups; a per-tensor scale has shape ``(1,) * ndim``): uint8 codes for E8M0 and E4M3 scale
        formats, float32 for float32 scales. E8M0 NaN is ``0xff``, E4M3's ``0x7f``.
      global_scale: the float32 per-tensor decode scale of two-level recipes (NVFP4), shape
        ``(1,) * ndim``, else None.

    Static (aux data): ``recipe``, ``axis`` (negative, or None for a per-tensor scale) and the
    original ``dtype``.

    Gradients: the values' tangent is ``x``'s tangent divided by the scale, and `dequantize`
    multiplies it back, so ``dequantize(quantize(x))`` has the identity as its gradient (NaN and
    zero scales count as 1 there, scales below 2**-126 as 2**-126).
    """

    values: jax.Array
    scale: jax.Array
    global_scale: jax.Array | None
    recipe: Recipe
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
    def element(self) -> Format:
        """The element format."""
        return self.recipe.element

    @property
    def block_size(self) -> int | None:
        return self.recipe.block_size

    def layout(self) -> _core.Layout:
        return _core.Layout(_core.resolve_axis(self.axis, self.ndim), self.recipe.block_size)

    # -- conversions ----------------------------------------------------------------------------------

    def dequantize(self, dtype: DTypeLike | None = None) -> jax.Array:
        """``values * scale`` (``* global_scale``), in ``dtype`` (default: the original dtype).

        Power-of-two scales are exact. Float scales round each product once to float32 (nearest
        even, subnormals kept), then to ``dtype`` if narrower. NaN-scale groups give NaN.

        Example:
          >>> import jax.numpy as jnp
          >>> from fpemu import scaled
          >>> sa = scaled.ScaledArray.from_array(jnp.array([[0.3, -1.7, 5.0, 12.0]]), "mxfp4", pad=True)
          >>> sa.values.tolist(), sa.scale_values().tolist()   # elements, and the block's scale 2**1
          ([[0.0, -1.0, 2.0, 6.0]], [[2.0]])
          >>> sa.dequantize().tolist()
          [[0.0, -2.0, 4.0, 12.0]]
        """
        out = np.dtype(self.dtype if dtype is None else dtype)
        if out.name not in SCALED_INPUT_DTYPES:
            raise TypeError(f"dtype must be float16, bfloat16 or float32, got {out.name}")
        return _dequantize(self.values, self.scale, self.global_scale, (self.recipe, self.axis, out))

    def scale_values(self) -> jax.Array:
        """The decode scale of each group as float32 (NaN for NaN scales), without the global scale.

        E8M0's ``2**-127`` (code 0) is returned exactly, as a float32 subnormal.
        """
        bits, _ = _core.scale_bits(self.scale, self.recipe)
        return lax.bitcast_convert_type(bits, F32)

    def codes(self) -> jax.Array:
        """The element codes, ``values``' shape: uint8 (``element.code_dtype``), or int8 two's
        complement for MXINT8. NaN elements of FP4/FP6 (which have no NaN code) encode as
        `fpemu.encode` does (a zero code)."""
        if is_twos_complement(self.element):
            return jnp.round(self.values * F32(64)).astype(jnp.int8)
        return codec.encode(self.values, self.element)

    def pack(self) -> Packed:
        """The storage form (see `Packed`); ``pack().nbytes == nbytes``."""
        codes = self.codes()
        if codes.ndim == 0:
            codes = codes.reshape(1)
        if is_twos_complement(self.element):
            codes = lax.bitcast_convert_type(codes, jnp.uint8)
        group = _pack_group(self.element.bits)
        pad = -codes.shape[-1] % group
        if pad:
            codes = jnp.pad(codes, [(0, 0)] * (codes.ndim - 1) + [(0, pad)])
        elements = codes if self.element.bits == 8 else codec.pack(codes, self.element)
        return Packed(elements.astype(jnp.uint8), self.scale, self.global_scale)

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
    def from_array(
        cls,
        x: jax.Array | np.ndarray,
        recipe: RecipeLike,
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
        saturate: bool | None = None,
    ) -> ScaledArray:
        """Quantize ``x`` to a scaled format: per-group scales and element-format values.

        Special values first (current scaling, i.e. no ``scale`` given): a group (block, slice or
        tensor) holding NaN or ±inf gets the NaN scale and dequantizes to NaN in every element (the OCP
        MX rule). An all-zero group gets a finite scale (E8M0: ``2**-127``, code 0; float32 scales: 1;
        NVFP4: block scale 0) and zero elements. Elements that exceed the element format after scaling
        saturate to ±max (``saturate=False`` in the recipe: they overflow as `fpemu.quantize` does).
        With a given ``scale``, NaN elements stay NaN and ±inf saturate.

        The scale of each group follows the recipe's rule from the group's amax (see `Recipe` and
        docs/scaling.md); the elements are ``fpemu.quantize(x / scale)`` with the recipe's saturation and
        ``rounding``, where ``x / scale`` is exact for power-of-two scales and the float32 product
        ``x * encode_scale`` for float scales.

        Args:
          x: float16, bfloat16 or float32 array (float64 is refused rather than silently rounded).
          recipe: a recipe name (`recipes`) or a `Recipe`.
          axis: the axis the blocks (or per-slice scales) run along; default -1 for block recipes and
            None (one scale per tensor) for the others.
          rounding: element rounding mode (power-of-two recipes: all of `fpemu.quantize`'s; float-scale
            recipes: nearest_even, nearest_away, toward_zero, stochastic).
          key, random_bits: for ``rounding="stochastic"``, as in `fpemu.quantize` (the random bits
            follow the element's row-major index in ``x``).
          scale: optional decode scales to use instead of computing them (single-level recipes only):
            positive normal float32, broadcastable to the scale shape; powers of two for power-of-two
            recipes.
          pad: allow an axis length that is not a multiple of the block size (the last block is shorter).
          scale_rule, block_size, margin, saturate: override the recipe's fields for this call.

        Returns:
          A `ScaledArray` (``.dequantize()``, ``.codes()``, ``.pack()``, ``.nbytes``).

        Raises:
          TypeError: for a non-array or non-float16/bfloat16/float32 ``x``, a non-int ``axis``, a
            non-bool ``pad``.
          ValueError: unknown recipe (with close matches), an axis out of range, a block size that does not divide
            the axis without ``pad=True``, a rounding mode the recipe does not allow, a bad ``scale``.

        Example:
          >>> import jax.numpy as jnp
          >>> from fpemu import scaled
          >>> x = jnp.arange(1.0, 65.0).reshape(2, 32) / 8
          >>> sa = scaled.ScaledArray.from_array(x, "mxfp8_e4m3")
          >>> sa.scale.tolist()                  # E8M0 codes: 2**(2 - 8) and 2**(3 - 8)
          [[121], [122]]
          >>> sa.nbytes                          # 64 one-byte elements + 2 one-byte scales
          66
        """
        overrides = {"scale_rule": scale_rule, "block_size": block_size, "margin": margin, "saturate": saturate}
        x, cfg = prepare(x, recipe, axis, rounding, key, random_bits, pad, overrides)
        return quantize_jit(x, key, prepare_scale(scale, x, cfg), cfg, x.dtype)

    @classmethod
    def from_codes(
        cls,
        codes: ArrayLike,
        scale: ArrayLike,
        *,
        recipe: RecipeLike,
        axis: int | None = -1,
        dtype: DTypeLike = np.float32,
        global_scale: ArrayLike | None = None,
    ) -> ScaledArray:
        """Rebuild a `ScaledArray` from element codes (as `codes` returns them) and its scale leaf."""
        recipe = get_recipe(recipe)
        codes = jnp.asarray(codes)
        if is_twos_complement(recipe.element):
            values = codes.astype(jnp.int8).astype(F32) * F32(2.0**-6)
        else:
            values = codec.decode(codes, recipe.element)
        if axis is not None and codes.ndim:
            axis = axis % codes.ndim - codes.ndim
        scale = jnp.asarray(scale)
        gs = None if global_scale is None else jnp.asarray(global_scale, F32)
        return cls(values, scale, gs, recipe, axis, np.dtype(dtype))

    @classmethod
    def from_packed(
        cls,
        packed: Packed,
        *,
        recipe: RecipeLike,
        shape: tuple[int, ...],
        axis: int | None = -1,
        dtype: DTypeLike = np.float32,
    ) -> ScaledArray:
        """Inverse of `pack`: ``shape`` is the original (unpadded) shape."""
        recipe = get_recipe(recipe)
        elements = jnp.asarray(packed.elements)
        if recipe.element.bits == 8:
            codes = elements
        else:
            codes = codec.unpack(elements, recipe.element)
        codes = codes[..., : (shape[-1] if shape else 1)].reshape(shape)
        if is_twos_complement(recipe.element):
            codes = lax.bitcast_convert_type(codes.astype(jnp.uint8), jnp.int8)
        return cls.from_codes(
            codes, packed.scale, recipe=recipe, axis=axis, dtype=dtype, global_scale=packed.global_scale
        )

    # -- Python protocols -----------------------------------------------------------------------------

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        out = np.asarray(self.dequantize())
        return out if dtype is None else out.astype(dtype)

    def __jax_array__(self) -> jax.Array:
        return self.dequantize()

    def __repr__(self) -> str:
        r = self.recipe
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
            f"ScaledArray({r.name}: shape={self.shape} {np.dtype(self.dtype).name}, {groups}, "
            f"{r.element.name} elements, {r.scale_format.name} scales {scale_shape}{extra}{nbytes})"
        )


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _dequantize_ste(values, scale, global_scale, meta):
    recipe, axis, dtype = meta
    layout = _core.Layout(_core.resolve_axis(axis, values.ndim), recipe.block_size)
    return _core.decode(values, scale, global_scale, recipe, layout).astype(dtype)


@_dequantize_ste.defjvp
def _dequantize_jvp(meta, primals, tangents):
    values, scale, global_scale = primals
    values_dot = tangents[0]
    recipe, axis, dtype = meta
    layout = _core.Layout(_core.resolve_axis(axis, values.ndim), recipe.block_size)
    out = _dequantize_ste(values, scale, global_scale, meta)
    sg = _core.expand(_core.grad_scale(scale, global_scale, recipe), layout, values.shape)
    return out, (values_dot.astype(F32) * sg).astype(dtype)


_dequantize = jax.jit(_dequantize_ste, static_argnums=(3,))


@functools.partial(jax.jit, static_argnums=(3, 4))
def quantize_jit(x, key, scale, cfg: Config, dtype) -> ScaledArray:
    """The `ScaledArray` of ``x`` with its scales from the data, or the given ``scale`` (jitted)."""
    values, scale_leaf, global_leaf = quantize_ste(x, key, scale, cfg)
    axis = None if cfg.axis is None else cfg.axis - x.ndim
    return ScaledArray(values, scale_leaf, global_leaf, cfg.recipe, axis, np.dtype(dtype))
