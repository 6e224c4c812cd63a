"""Scaling block formats as data: the `BlockFormat` descriptor, the scale rules, and the built-in table.

A block format says which element format the scaled values are rounded to, how many elements share a
scale (a block along one axis, a whole slice, or the whole tensor), which format the scale is
stored in, and which rule turns a group's absolute maximum (amax) into its scale. Everything else
(element max, emax, the scale format's range and NaN code) is read from the formats themselves.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from typing import Any, Literal, get_args

from fpemu._args import bool_arg, choice_arg, format_arg, int_arg, saturate_arg
from fpemu._core.format import Format
from fpemu._core.modes import ROUNDING_MODES, Saturation
from fpemu._core.registry import FormatLike, get_format
from fpemu.deprecation import renamed_keyword

ScaleRule = Literal["ocp", "ceil", "even", "ceil_log2", "float"]
SCALE_RULES: tuple[str, ...] = get_args(ScaleRule)
POW2_RULES: tuple[str, ...] = ("ocp", "ceil", "even", "ceil_log2")
RULE_ALIASES: dict[str, str] = {"floor": "ocp", "round_up": "ceil", "rceil": "ceil"}

# Element rounding modes the float-scale block formats accept. Their scaled value is a float32 product
# (x times the encode scale); where XLA:CPU flushes a float32 product below 2**-126 to zero, these
# modes give the same element as the exact product would (zero), so the result does not depend on
# the backend. Power-of-two block formats scale in the integer domain and accept every mode.
FLOAT_SCALE_ROUNDINGS: tuple[str, ...] = ("nearest_even", "nearest_away", "toward_zero", "stochastic")

#: The MXINT8 element: OCP INT8, the registry's ``"int8_ocp"`` (``MXINT8_ELEMENT is
#: fpemu.get_format("int8_ocp")``; kept as a public alias, new code should name the format). Its
#: codes are two's complement int8 ``k`` with an implicit scale of 2**-6, so its values are ``k / 64``
#: for ``-128 <= k <= 127``. The ``mxint8`` block format saturates symmetrically to ±127/64, as the OCP
#: reference code (microxcaling) does: -2.0 (code 0x80) is decoded but never produced.
MXINT8_ELEMENT = get_format("int8_ocp")

_FP32 = get_format("fp32")


def top_mantissa_bits(fmt: Format) -> int:
    """Fraction bits of the element values in the top binade ``[2**emax, 2**(emax + 1))``: the
    mantissa width, except for fixed-point formats (no exponent field: OCP INT8, whose values in
    [1, 2) are k/64, 6 fraction bits), where the binade holds the subnormal grid."""
    if fmt.exponent_bits == 0:
        return fmt.emax - fmt.min_subnormal_exponent
    return fmt.mantissa_bits


_MAX_MARGIN = 64  # keeps 2**±margin a normal float32 constant


def scale_kind(scale_format: Format) -> Literal["pow2", "fp32", "narrow"]:
    """How a scale format holds scales: ``"pow2"`` (no mantissa bits: powers of two, E8M0), ``"fp32"``
    (float32 values) or ``"narrow"`` (a narrow float such as E4M3, NVFP4's block scales).

    Example:
      >>> from fpemu import get_format
      >>> [scale_kind(get_format(name)) for name in ("e8m0fnu", "fp32", "e4m3fn")]
      ['pow2', 'fp32', 'narrow']
    """
    if scale_format.encoding == _FP32.encoding:
        return "fp32"
    if scale_format.mantissa_bits == 0:
        return "pow2"
    return "narrow"


def _field(where: str, check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an `fpemu._args` check on a field: a `BlockFormat` reports every bad field as a ValueError
    (its documented contract), prefixed with the block format's name."""
    try:
        return check(*args, **kwargs)
    except (ValueError, TypeError) as e:
        raise ValueError(where + str(e)) from None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True, init=False)
class BlockFormat:
    """A scaled or block format: element format, scaling granularity, scale format and scale rule.

    Scales are *decode* scales: ``x ≈ element_value * scale``. The groups that share a scale are set
    by ``block_size`` and the ``axis`` argument of `BlockArray.from_array`: ``block_size=None`` with
    ``axis=None`` is one scale per tensor, ``block_size=None`` with an axis is one scale per slice
    along that axis (per row / per channel), and an integer ``block_size`` is one scale per run of
    ``block_size`` consecutive elements along the axis (MX, NVFP4).

    Scale rules (``amax`` is the group's largest magnitude, ``M`` and ``emax`` the element format's
    largest value and its exponent):

    - ``"ocp"`` (alias ``"floor"``): ``2**(floor(log2(amax)) - emax)``, OCP MX v1.0. Elements above
      ``M`` after scaling saturate.
    - ``"ceil"`` (aliases ``"round_up"``, ``"rceil"``): ``2**ceil(log2(amax / M))``, the smallest
      power of two with which no element overflows (cuBLAS, ``jax.nn``'s MX helpers).
    - ``"even"``: ``2**(floor(log2(round(amax))) - emax)`` where ``round`` keeps the element's
      precision, ties away (torchao's EVEN).
    - ``"ceil_log2"``: ``2**(ceil(log2(amax)) - emax)`` (torchao's CEIL).
    - ``"float"``: a non-power-of-two scale: float32 ``amax / M`` (stored as float32, via the
      encode scale ``M / amax`` as Transformer Engine computes it), or, for a narrow scale format
      (E4M3), that ratio rounded into the scale format, under an optional float32 per-tensor
      scale (``global_scale=True``, NVFP4). See docs/scaling.md for the exact float32 sequence.

    Args:
      name: A label (shown in reprs).
      element: The element format (name or `fpemu.Format`): signed, with zero, at most 16 bits.
      block_size: Elements per scale along the axis, or None (per tensor / per slice).
      scale_format: ``"e8m0fnu"`` (powers of two), ``"fp32"``, or a narrow float with NaN such as
        ``"e4m3fn"``.
      scale_rule: One of ``"ocp"``, ``"ceil"``, ``"even"``, ``"ceil_log2"``, ``"float"`` (or an alias).
      global_scale: A float32 per-tensor scale above narrow block scales (NVFP4's second level).
      saturate: Clamp elements that overflow after scaling to ±M (OCP MX saturates). If False, they
        overflow as `fpemu.quantize` does. Also IEEE P3109's modes, as `fpemu.quantize` takes them:
        ``"sat_finite"`` (as True), ``"sat_propagate"`` (finite overflow clamps; a ±inf element,
        which only a given ``scale`` lets through, stays infinite where the element format has
        infinity) and ``"ovf_inf"`` (as False, except that ``to_odd`` overflows too). Under current
        scaling a group holding ±inf gets the NaN scale whatever the mode (docs/scaling.md).
      margin: An integer ``m``: scales are multiplied by ``2**m`` (power-of-two rules add ``m`` to the
        exponent), leaving headroom as Transformer Engine's ``margin`` does.

    Raises:
      ValueError: naming the field, for an unknown format or rule, a rule the scale format cannot
        hold, or an element format the exact scaling arithmetic does not cover.

    Example:
      >>> r = BlockFormat(name="mxfp4_b16_ceil", element="e2m1fn", block_size=16, scale_format="e8m0fnu",
      ...            scale_rule="round_up")
      >>> r.scale_rule, r.element.name, r.bits_per_element
      ('ceil', 'e2m1fn', 4.5)
    """

    name: str
    element: Format
    block_size: int | None = None
    scale_format: Format = _FP32
    scale_rule: ScaleRule = "float"
    global_scale: bool = False
    saturate: Saturation = True
    margin: int = 0

    def __init__(
        self,
        *,
        name: str,
        element: FormatLike,
        block_size: int | None = None,
        scale_format: FormatLike = _FP32,
        scale_rule: str = "float",
        global_scale: bool = False,
        saturate: Saturation = True,
        margin: int = 0,
    ) -> None:
        # Written out (the dataclass's own __init__ is off) so that the formats may be given by name.
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        where = f"block format {name!r}: "
        rule = _field(where, choice_arg, scale_rule, (*SCALE_RULES, *RULE_ALIASES), "scale_rule")
        fields = {
            "name": name,
            "element": _field(where, format_arg, element, "element"),
            "block_size": None if block_size is None else _field(where, int_arg, block_size, "block_size", minimum=1),
            "scale_format": _field(where, format_arg, scale_format, "scale_format"),
            "scale_rule": RULE_ALIASES.get(rule, rule),
            "global_scale": _field(where, bool_arg, global_scale, "global_scale"),
            "saturate": _field(where, saturate_arg, saturate, "saturate"),
            "margin": _field(where, int_arg, margin, "margin", minimum=-_MAX_MARGIN, maximum=_MAX_MARGIN),
        }
        for field, value in fields.items():
            object.__setattr__(self, field, value)
        self._check_element(where)
        self._check_scale(where)

    def _check_element(self, where: str) -> None:
        e = self.element
        if not (e.signed and e.has_zero) or e.bits > 16:
            raise ValueError(
                where + f"element must be a signed format with zero of at most 16 bits, got {e.name} "
                f"({e.bits} bits, signed={e.signed}, has_zero={e.has_zero})"
            )
        if e.mantissa_bits > 10 or e.max > _FP32.max or e.min_subnormal_exponent < -92:
            raise ValueError(
                where + f"element {e.name} is too wide or too fine for exact float32 scaling: it needs at most 10 "
                f"mantissa bits and a smallest value of at least 2**-92 (has {e.mantissa_bits}, "
                f"2**{e.min_subnormal_exponent})"
            )
        if e.max < 1:
            raise ValueError(where + f"element {e.name} has max {e.max} < 1; scaled formats need max >= 1")

    def _check_scale(self, where: str) -> None:
        s, e, rule = self.scale_format, self.element, self.scale_rule
        kind = scale_kind(s)
        if kind == "pow2":
            if s.signed or s.has_zero or not s.has_nan:
                raise ValueError(
                    where + f"a scale format without mantissa bits must be E8M0-like (unsigned, no zero, with NaN), "
                    f"got {s.name}"
                )
            if rule == "float":
                raise ValueError(
                    where + f"scale_format {s.name} holds only powers of two: scale_rule must be one of "
                    f"{', '.join(POW2_RULES)}, not 'float'"
                )
        elif kind == "narrow":
            if rule != "float":
                raise ValueError(
                    where + f"scale_format {s.name} is a narrow float: scale_rule must be 'float' (the block amax "
                    f"over the element max, rounded into {s.name}), got {rule!r}"
                )
            if not (s.signed and s.has_zero and s.has_nan) or s.bits > 16:
                raise ValueError(
                    where + f"a narrow scale format must be signed, with zero and a NaN code, of at most 16 bits; "
                    f"got {s.name}"
                )
            if e.precision + s.precision > 8:
                raise ValueError(
                    where + f"element {e.name} ({e.precision} significant bits) with scale {s.name} "
                    f"({s.precision}) exceeds the 8 significant bits the exact float32 products support"
                )
        if kind == "fp32" and rule == "float" and e.precision > 8:
            raise ValueError(
                where + f"scale_rule 'float' needs an element of at most 8 significant bits, got {e.name} "
                f"({e.precision})"
            )
        if self.global_scale and kind != "narrow":
            raise ValueError(
                where + f"global_scale=True needs a narrow block scale format such as e4m3fn, got {s.name}"
            )
        if self.is_pow2 and e.min_subnormal_exponent + s.emin < -149:
            raise ValueError(
                where + f"element {e.name} times the smallest {s.name} scale 2**{s.emin} falls below float32's "
                "smallest subnormal: dequantization would not be exact"
            )

    # -- derived facts ------------------------------------------------------------------------------

    @property
    def scale_kind(self) -> Literal["pow2", "fp32", "narrow"]:
        """``"pow2"`` (E8M0 codes), ``"fp32"`` (float32 scales) or ``"narrow"`` (E4M3-like codes)."""
        return scale_kind(self.scale_format)

    @property
    def is_pow2(self) -> bool:
        """Whether every scale is a power of two (a power-of-two rule)."""
        return self.scale_rule in POW2_RULES

    def has_tensor_scale(self, axis: int | None) -> bool:
        """Whether quantizing along ``axis`` leaves a float32 per-tensor scale that is not a power of
        two, which `fpemu.scaled.quantize_dequantize_split` keeps apart: a two-level block format's global
        scale (NVFP4), or the one float32 scale of a per-tensor quantization (``axis=None``, the
        ``"float"`` rule: FP8 current scaling).

        Example:
          >>> from fpemu.scaled import get_block_format
          >>> [get_block_format(r).has_tensor_scale(None) for r in ("nvfp4", "fp8_e4m3")], get_block_format("fp8_e4m3").has_tensor_scale(0)
          ([True, True], False)
        """
        return self.global_scale or (self.scale_kind == "fp32" and not self.is_pow2 and axis is None)

    @property
    def bits_per_element(self) -> float:
        """Storage bits per element with the block scale amortised (per-tensor scales count as 0)."""
        scale_bits = self.scale_format.bits / self.block_size if self.block_size else 0.0
        return self.element.bits + scale_bits

    @property
    def allowed_roundings(self) -> tuple[str, ...]:
        """The element rounding modes this block format accepts: all of `fpemu.quantize`'s for power-of-two
        scales, `FLOAT_SCALE_ROUNDINGS` for float scales."""
        return ROUNDING_MODES if self.is_pow2 else FLOAT_SCALE_ROUNDINGS

    def __str__(self) -> str:
        return self.name


_E8M0 = get_format("e8m0fnu")
# The built-in block formats, in table order, with their aliases.
_BUILTINS: tuple[tuple[BlockFormat, tuple[str, ...]], ...] = (
    # OCP MX v1.0 MXFP8, E4M3 elements
    (BlockFormat(name="mxfp8_e4m3", element="e4m3fn", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ("mxfp8",)),
    # OCP MX v1.0 MXFP8, E5M2 elements
    (BlockFormat(name="mxfp8_e5m2", element="e5m2", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ()),
    # OCP MX v1.0 MXFP6, E3M2 elements
    (BlockFormat(name="mxfp6_e3m2", element="e3m2fn", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ()),
    # OCP MX v1.0 MXFP6, E2M3 elements
    (BlockFormat(name="mxfp6_e2m3", element="e2m3fn", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ()),
    # OCP MX v1.0 MXFP4, E2M1 elements
    (BlockFormat(name="mxfp4", element="e2m1fn", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ("mxfp4_e2m1",)),
    # OCP MX v1.0 MXINT8, int8 elements k/64
    (BlockFormat(name="mxint8", element="int8_ocp", block_size=32, scale_format=_E8M0, scale_rule="ocp"), ()),
    # NVIDIA NVFP4: E2M1, blocks of 16, E4M3 block scale, float32 tensor scale
    (
        BlockFormat(
            name="nvfp4", element="e2m1fn", block_size=16, scale_format="e4m3fn", scale_rule="float", global_scale=True
        ),
        (),
    ),
    # FP8 E4M3 with a float32 scale per tensor or per slice (current scaling)
    (BlockFormat(name="fp8_e4m3", element="e4m3fn", scale_format=_FP32, scale_rule="float"), ()),
    # FP8 E5M2 with a float32 scale per tensor or per slice (current scaling)
    (BlockFormat(name="fp8_e5m2", element="e5m2", scale_format=_FP32, scale_rule="float"), ()),
)

_BLOCK_FORMATS: dict[str, BlockFormat] = {r.name: r for r, _ in _BUILTINS}
_NAMES: dict[str, BlockFormat] = {}
for _r, _aliases in _BUILTINS:
    for _n in (_r.name, *_aliases):
        _NAMES[_n] = _r


#: The aliases of the built-in block formats, each to its block format's name (``"mxfp8"`` -> ``"mxfp8_e4m3"``).
BLOCK_FORMAT_ALIASES: dict[str, str] = {alias: r.name for r, aliases in _BUILTINS for alias in aliases}

#: What every ``block_format`` argument takes: a built-in block format's name (or alias) or a `BlockFormat`.
BlockFormatLike = str | BlockFormat


class UnknownBlockFormatError(ValueError):
    """Raised for a block format name that is not in the table."""


def block_formats() -> tuple[str, ...]:
    """The names of the built-in block formats (look one up with `get_block_format`).

    Example:
      >>> block_formats()
      ('mxfp8_e4m3', 'mxfp8_e5m2', 'mxfp6_e3m2', 'mxfp6_e2m3', 'mxfp4', 'mxint8', 'nvfp4', 'fp8_e4m3', 'fp8_e5m2')
    """
    return tuple(_BLOCK_FORMATS)


@renamed_keyword("recipe", "block_format", "fpemu.scaled.get_block_format")
def get_block_format(block_format: BlockFormatLike) -> BlockFormat:
    """A `BlockFormat` by name, or pass one through.

    Names are exact and lower case, as format names are (`fpemu.get_format`): the names of `block_formats`
    and the aliases ``"mxfp8"`` (``mxfp8_e4m3``) and ``"mxfp4_e2m1"`` (``mxfp4``). ``"MXFP8"`` is an
    error that names ``'mxfp8'``; an element format's name (``"e4m3fn"``) is an error that says it is
    a format (round to it with `fpemu.quantize`) and names the block formats with that element.

    Raises:
      UnknownBlockFormatError: (a ValueError) for an unknown name: the block format it differs from only in case,
        else the format it names and that format's block formats, else the closest names; all are listed.
      TypeError: for anything that is neither a name nor a `BlockFormat`.

    Example:
      >>> get_block_format("mxfp8").name, get_block_format("mxfp8").block_size
      ('mxfp8_e4m3', 32)
      >>> try:
      ...     get_block_format("MXFP8")
      ... except UnknownBlockFormatError as e:
      ...     print(e)
      unknown block format 'MXFP8': block format names are exact and lower case; did you mean 'mxfp8'?
    """
    return block_format_arg(block_format)


def block_format_arg(block_format: Any) -> BlockFormat:
    """`get_block_format`'s check, for fpemu's own callers (no keyword of an earlier release to rename)."""
    if isinstance(block_format, BlockFormat):
        return block_format
    if not isinstance(block_format, str):
        raise TypeError(
            f"block_format must be a block format name or a fpemu.scaled.BlockFormat, got {type(block_format).__name__}"
        )
    found = _NAMES.get(block_format)
    if found is not None:
        return found
    raise UnknownBlockFormatError(_unknown_block_format(block_format))


def _describe(r: BlockFormat) -> str:
    """A block format's name and, in brackets, how it scales: ``'mxfp8_e4m3' (blocks of 32, e8m0fnu scales)``."""
    if r.block_size is None:
        how = f"a {r.scale_format.name} scale per tensor or slice"
    else:
        how = f"blocks of {r.block_size}, {r.scale_format.name} scales"
    return f"{r.name!r} ({how}{', a float32 tensor scale' if r.global_scale else ''})"


def _format_named(name: str) -> Format | None:
    try:
        return get_format(name)
    except (ValueError, TypeError):
        return None


def _unknown_block_format(name: str) -> str:
    """The message for a name that is not a block format: where the name points instead."""
    key = name.strip().lower()
    lower = "block format names are exact and lower case; " if key != name else ""
    listing = f"block formats: {', '.join(_BLOCK_FORMATS)}"
    if key in _NAMES:
        return f"unknown block format {name!r}: {lower}did you mean {key!r}?"
    if key == "e4m3":  # "E4M3" means OCP e4m3fn to most people; "e4m3" is the IEEE-like format
        fmt: Format | None = get_format("e4m3fn")
        what = (
            "OCP E4M3 (max 448, no infinity) is the element format 'e4m3fn' ('e4m3' is the IEEE-like one, max 240), "
            "not a block format"
        )
    else:
        fmt = _format_named(name) or _format_named(key)
        what = "" if fmt is None else f"{fmt.name!r} is an element format, not a block format"
    if fmt is not None:
        users = [_describe(r) for r in _BLOCK_FORMATS.values() if r.element is fmt]
        scaled = f"; the block formats with {fmt.name} elements: {', '.join(users)}" if users else f"; {listing}"
        return f"unknown block format {name!r}: {lower}{what}: round to it with fpemu.quantize(x, {fmt.name!r}){scaled}"
    close = difflib.get_close_matches(key, list(_NAMES), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown block format {name!r}; {lower}{hint}{listing}"


def pow2_constants(block_format: BlockFormat) -> tuple[int, int, int, int]:
    """(emax, significand of M as a 24-bit integer, fraction bits of the top binade, M's exponent) for the rules."""
    m, e = math.frexp(block_format.element.max)  # max = m * 2**e, 0.5 <= m < 1
    sig = int(math.ldexp(m, 24))  # exact: the element max has at most 11 significant bits
    return block_format.element.emax, sig, top_mantissa_bits(block_format.element), e - 1
