"""`formats`: a hypothesis strategy of random custom `fpemu.Format`s, of every special-value layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import assume, reject
from hypothesis import strategies as st

from fpemu._core.format import Format, fits
from fpemu.testing._bits import container_format, dtype_arg

__all__ = ["LAYOUTS", "formats"]

# Special-value layouts drawn by `formats`, simplest first (hypothesis shrinks toward the first).
LAYOUTS: tuple[str, ...] = (
    "ieee", "fn", "fnuz", "none", "unsigned_ieee", "unsigned_fn", "e8m0_like", "p3109", "unsigned_p3109",
    "twos_complement",
)  # fmt: skip
# Exponent widths in shrinking order: IEEE-like ones first, then the narrow ones (no exponent field:
# every value a subnormal, as in P3109 with P = K and OCP INT8).
_EXPONENT_ORDER = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 0)


def _range_arg(value: Any, name: str, low: int, high: int) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value), int(value))
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
    ):
        raise TypeError(f"{name} must be an int or a (min, max) pair of ints, got {value!r}")
    lo, hi = int(value[0]), int(value[1])
    if not low <= lo <= hi <= high:
        raise ValueError(f"{name} must satisfy {low} <= min <= max <= {high}, got ({lo}, {hi})")
    return lo, hi


def _make_format(e: int, m: int, layout: str, bias_offset: int) -> Format | None:
    signed = not layout.startswith("unsigned") and layout != "e8m0_like"
    specials: Any = {
        "unsigned_ieee": "ieee", "unsigned_fn": "fn", "e8m0_like": "fn", "unsigned_p3109": "p3109",
        "twos_complement": "none",
    }.get(layout, layout)  # fmt: skip
    has_zero = layout != "e8m0_like"
    twos_complement = layout == "twos_complement"
    if twos_complement:
        e = 0  # a two's-complement format is fixed point: no exponent field
    if specials == "ieee":
        m = max(m, 1)  # the all-ones exponent needs a mantissa to hold both infinity and NaN
    bias = (2 ** (e - 1) - 1 if e else 0) + bias_offset
    # Wide exponents with a small bias put max beyond float64 (whose values fpemu formats must be):
    # raise the bias just enough rather than reject the draw.
    all_ones = (1 << (e + m)) - 1
    top = {"ieee": (((1 << e) - 1) << m) - 1, "fn": all_ones - 1, "p3109": all_ones - (1 if signed else 2)}
    bias = max(bias, (top.get(specials, all_ones) >> m) - 1023)
    try:
        return Format(
            name=f"e{e}m{m}_{layout}_b{bias}",
            exponent_bits=e,
            mantissa_bits=m,
            bias=bias,
            signed=signed,
            specials=specials,
            has_zero=has_zero,
            twos_complement=twos_complement,
        )
    except ValueError:  # a layout the bit budget cannot hold (e.g. e1m0 with a NaN code)
        return None


def formats(
    *,
    exponent_bits: int | tuple[int, int] = (0, 11),
    mantissa_bits: int | tuple[int, int] = (0, 23),
    layouts: Sequence[str] | None = None,
    fits_in: Any = None,
) -> st.SearchStrategy[Format]:
    """Random custom `fpemu.Format`s of every special-value layout.

    Layouts (see `LAYOUTS`): ``"ieee"`` (±inf and NaN; at least one mantissa bit), ``"fn"`` (NaN
    only, like OCP E4M3), ``"fnuz"`` (one NaN at ``0x80...``, no -0), ``"none"`` (every code finite,
    like FP4/FP6), ``"unsigned_ieee"``, ``"unsigned_fn"`` and ``"e8m0_like"`` (unsigned, no zero, no
    subnormals), ``"p3109"`` (IEEE P3109's extended domain: NaN at ``0x80...``, ±inf at the top
    magnitude codes, no -0), ``"unsigned_p3109"`` (+inf at ``2**K - 2``, NaN at ``2**K - 1``) and
    ``"twos_complement"`` (OCP INT8-like fixed point: no exponent field, whatever exponent width is
    drawn, so only where the ``exponent_bits`` range includes 0; the most negative value has no
    positive twin). With 0 exponent bits every value is a subnormal (P3109 with P = K). The bias is
    the IEEE bias ``2**(e-1) - 1`` (0 without exponent bits) moved by -2..2, which includes P3109's
    ``2**(e-1)``, raised where the largest value would exceed float64. Names read
    ``e{e}m{m}_{layout}_b{bias}``.

    Shrinks toward an IEEE-layout ``e2m1`` with the IEEE bias (exponent widths shrink toward 2, then
    1 and 0).

    Args:
      exponent_bits: An int or an inclusive ``(min, max)`` range, within 0..11.
      mantissa_bits: An int or an inclusive ``(min, max)`` range, within 0..23 (``"ieee"`` layouts
        get at least 1).
      layouts: The layouts to draw from (default: all of `LAYOUTS`).
      fits_in: A float dtype (e.g. ``"float32"``): only formats whose every finite value it holds
        exactly, as `fpemu.quantize` requires of its input dtype.

    Raises:
      TypeError, ValueError: naming the argument, for malformed ranges or unknown layouts.

    Example:
      >>> from hypothesis import find
      >>> fmt = find(formats(layouts=["fnuz"], fits_in="float32"), lambda f: f.mantissa_bits >= 3)
      >>> fmt.specials, fmt.has_negative_zero, fmt.name.startswith(f"e{fmt.exponent_bits}m{fmt.mantissa_bits}_fnuz")
      ('fnuz', False, True)
    """
    e_lo, e_hi = _range_arg(exponent_bits, "exponent_bits", 0, 11)
    m_lo, m_hi = _range_arg(mantissa_bits, "mantissa_bits", 0, 23)
    if layouts is None:
        layouts = LAYOUTS
    if isinstance(layouts, str) or not isinstance(layouts, Sequence) or not layouts:
        raise TypeError(f"layouts must be a non-empty sequence of layout names, got {layouts!r}")
    unknown = [layout for layout in layouts if layout not in LAYOUTS]
    if unknown:
        raise ValueError(f"layouts must be drawn from {', '.join(LAYOUTS)}; unknown: {unknown}")
    container = None if fits_in is None else container_format(dtype_arg(fits_in, "fits_in"), "fits_in")
    if e_lo > 0 and "twos_complement" in layouts:
        if list(layouts) == ["twos_complement"]:
            raise ValueError(f"layouts=['twos_complement'] needs exponent_bits to include 0, got ({e_lo}, {e_hi})")
        layouts = [layout for layout in layouts if layout != "twos_complement"]
    ordered = tuple(layout for layout in LAYOUTS if layout in layouts)
    widths = tuple(e for e in _EXPONENT_ORDER if e_lo <= e <= e_hi)

    @st.composite
    def draw_format(draw):
        e = draw(st.sampled_from(widths))
        m = draw(st.integers(m_lo, m_hi))
        layout = draw(st.sampled_from(ordered))
        fmt = _make_format(e, m, layout, draw(st.integers(-2, 2)))
        if fmt is None:
            reject()
        if container is not None:
            assume(fits(fmt, container))
        return fmt

    return draw_format()
