"""`Quantizer`: how one operand of one GEMM is quantized (the block format it holds, which elements
share a scale, the rounding), and the checks of the inputs that depend on it.

A `Quantizer` is data (frozen, hashable: a ``jax.jit`` static argument); `fpemu._training.quantize_operand`
carries it out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp

from fpemu._args import bool_arg, choice_arg, format_arg, int_arg, key_arg, random_bits_arg, saturate_arg
from fpemu._core.format import Format
from fpemu._core.modes import Saturation
from fpemu._core.registry import FormatLike
from fpemu._scaled.block_format import block_format_arg
from fpemu.scaled import SCALE_RULES, BlockFormat, BlockFormatLike, scale_kind

__all__ = [
    "MAX_MARGIN",
    "QUANTIZER_ROUNDINGS",
    "SCALINGS",
    "Quantizer",
    "QuantizerRounding",
    "Scaling",
    "amax_arg",
    "quantizer_key_arg",
]

#: Which elements share a scale (see `Quantizer`).
Scaling = Literal["none", "tensor", "delayed", "row", "block", "block_2d"]
SCALINGS: tuple[str, ...] = get_args(Scaling)
#: The element roundings of a training recipe.
QuantizerRounding = Literal["nearest_even", "stochastic"]
QUANTIZER_ROUNDINGS: tuple[str, ...] = get_args(QuantizerRounding)

#: The largest |margin| (as `fpemu.scaled.BlockFormat`'s: 2**±margin stays a normal float32).
MAX_MARGIN = 64


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True, init=False)
class Quantizer:
    """How one operand of one GEMM is quantized: a block format (element format, scale format and
    rule), which elements share a scale, and the rounding.

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

    A scaled quantizer holds a `fpemu.scaled.BlockFormat` (``block_format``): give one (a name of
    `fpemu.scaled.block_formats` or the object), or its fields (``format``, ``block_size``,
    ``scale_format``, ``scale_rule``, ``tensor_scale``, ``saturate``: the block format's
    ``element``, ``block_size``, ``scale_format``, ``scale_rule``, ``global_scale`` and
    ``saturate``), not both. The quantizer's attributes of those names read the block format it
    holds. Two quantizers with the same numerics are equal whatever their block formats are named.

    The scale of a group is computed by `fpemu.scaled` from the group's amax with ``scale_rule``
    (``"float"``: ``amax / max`` as a float32, or rounded into a narrow ``scale_format``; ``"ocp"``,
    ``"ceil"``, ``"even"``, ``"ceil_log2"``: powers of two; see `fpemu.scaled.BlockFormat`). Special
    values: a group holding NaN or ±inf dequantizes to NaN in every element (current scaling);
    elements beyond the format's range after scaling saturate to ±max (``saturate=True``, as OCP MX
    and Transformer Engine's casts do).

    Args:
      block_format: a `fpemu.scaled.BlockFormat` or its name (``"mxfp8"``, ``"nvfp4"``,
        ``"fp8_e4m3"``, ...), with ``margin=0`` (a training recipe's margin is
        ``TrainingRecipe.margin``). Its ``block_size`` is the block (``"block"``) or the tile's side
        (``"block_2d"``); a block format without one is per tensor or per row.
      scaling: one of `SCALINGS` (above). Default: ``"block"`` for a block format with a block size,
        else ``"tensor"``.
      format: the element format (a name such as ``"e4m3fn"``, ``"e5m2"``, ``"e2m1fn"``, or a
        `fpemu.Format`); normalised to a `fpemu.Format`. The only field of ``scaling="none"``
        beside ``saturate``.
      block_size: elements per block (``"block"``) or the tile side (``"block_2d"``); None otherwise.
      scale_format: ``"fp32"`` (the default: float32 scales, powers of two or not), ``"e8m0fnu"``
        (OCP MX) or a narrow float such as ``"e4m3fn"`` (NVFP4 block scales).
      scale_rule: one of `fpemu.scaled.SCALE_RULES`; None picks ``"ocp"`` for an E8M0 scale format
        and ``"float"`` otherwise.
      tensor_scale: a float32 per-tensor scale above narrow block scales (NVFP4's second level).
      rounding: ``"nearest_even"`` or ``"stochastic"`` (needs a key when quantizing).
      saturate: clamp elements that overflow after scaling to ±max (the default; else they overflow
        as `fpemu.quantize` does), or one of IEEE P3109's saturation modes.
      random_bits: random bits per element of stochastic rounding (1..32; None: 32).

    Raises:
      ValueError: naming the field and the valid choices, for an unknown format, block format,
        scaling or rule, a block format and its fields given together, a scaling the block format's
        block size does not allow, a missing or superfluous ``block_size``, a rule the scale format
        cannot hold, ``tensor_scale`` without a narrow scale format, a scale field with
        ``scaling="none"``.
      TypeError: for a non-bool flag or a non-int size.

    Example:
      >>> q = Quantizer(block_format="mxfp8")
      >>> q.format.name, q.scaling, q.block_size, q.scale_rule, q.block_format.name
      ('e4m3fn', 'block', 32, 'ocp', 'mxfp8_e4m3')
      >>> q == Quantizer(format="float8_e4m3fn", scaling="block", block_size=32, scale_format="e8m0fnu")
      True
      >>> Quantizer(block_format="nvfp4", scaling="block_2d").block_size   # 16 x 16 tiles
      16
    """

    format: Format
    scaling: Scaling
    block_size: int | None
    scale_format: Format
    scale_rule: str
    tensor_scale: bool
    rounding: QuantizerRounding
    saturate: Saturation
    random_bits: int | None
    _held: BlockFormat | None = dataclasses.field(init=False, compare=False, repr=False)

    def __init__(
        self,
        *,
        block_format: BlockFormatLike | None = None,
        scaling: Scaling | None = None,
        format: FormatLike | None = None,
        block_size: int | None = None,
        scale_format: FormatLike | None = None,
        scale_rule: str | None = None,
        tensor_scale: bool | None = None,
        rounding: QuantizerRounding = "nearest_even",
        saturate: Saturation | None = None,
        random_bits: int | None = None,
    ) -> None:
        held_fields = {
            "format": format,
            "block_size": block_size,
            "scale_format": scale_format,
            "scale_rule": scale_rule,
            "tensor_scale": tensor_scale,
            "saturate": saturate,
        }
        if block_format is not None:
            fields, held = _fields_of_block_format(block_format, scaling, held_fields)
        else:
            fields, held = _fields_given(scaling, held_fields), None
        checked_rounding = choice_arg(rounding, QUANTIZER_ROUNDINGS, "Quantizer.rounding")
        stochastic = checked_rounding == "stochastic"
        random_bits_arg(random_bits, stochastic, "Quantizer.random_bits", rounding=checked_rounding)
        fields.update(rounding=checked_rounding, random_bits=None if random_bits is None else int(random_bits))
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        kind = scale_kind(self.scale_format)
        self._check_scales(kind)
        if held is None and self.scaling != "none":
            held = self._build_block_format()
        object.__setattr__(self, "_held", held)

    def _check_scales(self, kind: str) -> None:
        rule, fmt_name = self.scale_rule, self.scale_format.name
        if self.scaling == "none":
            return
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

    def _build_block_format(self) -> BlockFormat:
        """The block format of a quantizer given by its fields (`fpemu.scaled` checks the rest: the
        element's range, exact scaling)."""
        try:
            return BlockFormat(
                name=f"{self.format.name}/{self.scaling}",
                element=self.format,
                block_size=self.block_size,
                scale_format=self.scale_format,
                scale_rule=self.scale_rule,
                global_scale=self.tensor_scale,
                saturate=self.saturate,
            )
        except ValueError as e:
            raise ValueError(f"Quantizer(format={self.format.name!r}, scaling={self.scaling!r}): {e}") from None

    @property
    def element(self) -> Format:
        """The element format (``format``)."""
        return self.format

    @property
    def block_format(self) -> BlockFormat:
        """The `fpemu.scaled.BlockFormat` this quantizer holds: the one it was given, or the one its
        fields make (named ``"<format>/<scaling>"``). For ``"block_2d"`` its ``block_size`` is the
        tile's side. A ValueError for ``scaling="none"``, which has no scales."""
        if self._held is None:
            raise ValueError("a Quantizer with scaling='none' has no block format (no scales)")
        return self._held

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
            parts += [f"scale_format={self.scale_format.name!r}", f"scale_rule={self.scale_rule!r}"]
        if self.tensor_scale:
            parts.append("tensor_scale=True")
        if self.rounding != "nearest_even":
            parts.append(f"rounding={self.rounding!r}")
        if not self.saturate:
            parts.append("saturate=False")
        if self.random_bits is not None:
            parts.append(f"random_bits={self.random_bits}")
        return f"Quantizer({', '.join(parts)})"


_HELD_FIELDS = ("format", "block_size", "scale_format", "scale_rule", "tensor_scale", "saturate")
_BLOCKED = ("block", "block_2d")


def _fields_of_block_format(
    block_format: BlockFormatLike, scaling: Any, given: dict[str, Any]
) -> tuple[dict[str, Any], BlockFormat]:
    """A quantizer's fields read from the block format it is given (checked: no field given beside
    it, no margin, a scaling its block size allows)."""
    try:
        fmt = block_format_arg(block_format)
    except (ValueError, TypeError) as e:
        raise type(e)(f"Quantizer.block_format: {e}") from None
    extra = {name: value for name, value in given.items() if value is not None}
    if extra:
        raise ValueError(
            f"Quantizer: give block_format= or the fields it holds ({', '.join(_HELD_FIELDS)}), not both: got "
            f"block_format={fmt.name!r} and {', '.join(f'{k}={v!r}' for k, v in extra.items())}"
        )
    if fmt.margin:
        raise ValueError(
            f"Quantizer.block_format={fmt.name!r} has margin={fmt.margin}: a quantizer's margin is given when it "
            "quantizes (TrainingRecipe.margin, quantize_operand's margin=); use a block format with margin=0"
        )
    n = fmt.block_size
    scaling = choice_arg(
        scaling if scaling is not None else "tensor" if n is None else "block", SCALINGS, "Quantizer.scaling"
    )
    if scaling == "none":
        raise ValueError(
            "Quantizer.scaling='none' has no scales: give format= (the element format) instead of block_format="
        )
    if n is not None and scaling not in _BLOCKED:
        raise ValueError(
            f"Quantizer.block_format={fmt.name!r} has blocks of {n}: scaling must be 'block' or 'block_2d' "
            f"(tiles of {n} x {n}), not {scaling!r}"
        )
    if n is None and scaling in _BLOCKED:
        raise ValueError(
            f"Quantizer.block_format={fmt.name!r} has no block size (one scale per tensor or per row): scaling "
            f"must be 'tensor', 'delayed' or 'row', not {scaling!r}"
        )
    fields = {
        "format": fmt.element,
        "scaling": scaling,
        "block_size": n,
        "scale_format": fmt.scale_format,
        "scale_rule": fmt.scale_rule,
        "tensor_scale": fmt.global_scale,
        "saturate": fmt.saturate,
    }
    return fields, fmt


def _fields_given(scaling: Any, given: dict[str, Any]) -> dict[str, Any]:
    """A quantizer's fields given one by one, checked and with their defaults."""
    if given["format"] is None:
        raise ValueError(
            "Quantizer needs block_format= (a fpemu.scaled block format or its name, such as 'mxfp8') or "
            "format= (the element format)"
        )
    fmt = format_arg(given["format"], "Quantizer.format")
    scaling = choice_arg("tensor" if scaling is None else scaling, SCALINGS, "Quantizer.scaling")
    block = given["block_size"]
    if scaling in _BLOCKED:
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
    scale_format = format_arg(
        "fp32" if given["scale_format"] is None else given["scale_format"], "Quantizer.scale_format"
    )
    kind = scale_kind(scale_format)
    rule, tensor_scale = given["scale_rule"], given["tensor_scale"]
    if scaling == "none" and (kind != "fp32" or rule is not None or tensor_scale not in (None, False)):
        raise ValueError(
            "Quantizer.scale_format, scale_rule and tensor_scale are only used with scaled quantizers: "
            f"leave them at their defaults with scaling='none' (got scale_format={scale_format.name!r}, "
            f"scale_rule={rule!r}, tensor_scale={tensor_scale!r})"
        )
    if rule is None:
        rule = "ocp" if kind == "pow2" else "float"
    return {
        "format": fmt,
        "scaling": scaling,
        "block_size": block,
        "scale_format": scale_format,
        "scale_rule": choice_arg(rule, SCALE_RULES, "Quantizer.scale_rule"),
        "tensor_scale": bool_arg(False if tensor_scale is None else tensor_scale, "Quantizer.tensor_scale"),
        "saturate": saturate_arg(True if given["saturate"] is None else given["saturate"], "Quantizer.saturate"),
    }


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
