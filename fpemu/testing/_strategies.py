"""Hypothesis strategies for low-precision formats: values, codes, boundary inputs, arrays, formats.

Every strategy is built from integers (codes, indices into short lists of cases), so hypothesis
shrinks a failing example toward small codes: +0, the smallest values, the first kind of boundary.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from fpemu._args import INPUT_DTYPES, bool_arg, format_arg, rounding_arg
from fpemu._core.format import Format, fits
from fpemu._core.modes import ROUNDING_MODES
from fpemu.testing import reference
from fpemu.testing._bits import bits, container_format, dtype_arg, in_dtype, widen
from fpemu.testing._custom_formats import LAYOUTS, formats
from fpemu.testing._grid import (
    boundary_magnitudes,
    checked_code_range,
    finite_code,
    next_magnitude,
    representable,
    spacing,
)

__all__ = ["LAYOUTS", "arrays", "boundaries", "codes", "formats", "from_dtype", "values"]

# The kinds of boundary input, in shrinking order.
_BOUNDARY_KINDS = ("zero", "value", "tie", "max", "overflow", "min_normal", "min_subnormal", "infinity", "nan")


# -- codes and values -------------------------------------------------------------------------------

# The rounding modes that put `arrays` elements into a format.
_DETERMINISTIC = tuple(mode for mode in ROUNDING_MODES if mode != "stochastic")

# One draw in _KINDS is a special value (where allowed), one a boundary of the range; the rest are uniform.
_KINDS = 8
_BOUNDARY, _SPECIAL = _KINDS - 2, _KINDS - 1


def _nan_mantissas(m: int) -> st.SearchStrategy[int]:
    """NaN mantissa fields of an ``"ieee"`` format, the canonical quiet one first (it is what they shrink to)."""
    quiet = 1 << (m - 1)
    return st.integers(0, (1 << m) - 2).map(lambda i: quiet + i if quiet + i < (1 << m) else quiet + i - (1 << m) + 1)


def codes(
    fmt: Any,
    *,
    specials: bool | None = None,
    subnormals: bool = True,
    negative: bool = True,
    min_value: float | None = None,
    max_value: float | None = None,
    min_magnitude: float | None = None,
    max_magnitude: float | None = None,
) -> st.SearchStrategy[int]:
    """Codes of a format (as Python ints): ``sign | exponent | mantissa``, or two's-complement integers.

    Special values: with ``specials`` about one draw in eight is a non-finite code of the format:
    ±infinity and every NaN code, payloads included, for ``"ieee"`` formats; the NaN codes of
    ``"fn"``/``"fnuz"`` formats; NaN (``0x80``) and ±infinity (``0x7f``/``0xff``) of IEEE P3109's
    extended formats (unsigned: +infinity ``2**K - 2`` and NaN ``2**K - 1``). Formats with neither
    (FP4, FP6, OCP INT8) have none to draw. ``specials=None`` (the default) means True without a
    range and False with one (as hypothesis' ``floats`` does); with a range, only the infinities inside it
    are drawn. Zero is +0 and, where the format has it, -0; the fnuz/P3109 code ``0x80`` is NaN,
    never a number. Two's-complement formats (``int8_ocp``) include their most negative value
    (``0x80``, -2.0), which has no positive twin.

    Finite codes are uniform over magnitude codes (every binade equally likely), and about one draw in
    eight is a boundary: the range's ends (the values nearest ``min_value``/``max_value`` inside it),
    the smallest and largest subnormal, ``min_normal``, max (where they lie in the range).

    Shrinks toward code 0 (+0, or the smallest value of a format without zero; with a range, the
    smallest magnitude in it), then small codes.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      specials: Also draw NaN and ±infinity (None: only without a range).
      subnormals: Also draw subnormal codes (zero is always drawn, where in the range).
      negative: Also draw negative codes (signed formats only).
      min_value, max_value: Only values in ``[min_value, max_value]`` (None: unbounded). Zeros
        compare by sign: ``min_value=0.0`` leaves out -0.0, ``max_value=-0.0`` leaves out +0.0.
      min_magnitude, max_magnitude: Only values whose magnitude lies in this range (so
        ``min_magnitude=2.0**-4, max_magnitude=2.0**4`` keeps 8 binades of each sign, no zero).

    Raises:
      TypeError: for a ``fmt`` that is not a format, a non-bool option or a non-number bound.
      ValueError: for a NaN or negative-magnitude bound, bounds in the wrong order, or a range that
        holds no finite value of the format.

    Example:
      >>> from hypothesis import find, given
      >>> code = find(codes("e4m3fn", specials=False), lambda c: c & 0x7F >= 0x40)  # |value| >= 2
      >>> code & 0x7F != 0x7F  # specials=False: never a NaN code (0x7f, 0xff)
      True
      >>> @given(codes("int8_ocp", min_value=-2.0, max_value=-1.5))
      ... def test_two_complement_range(code):
      ...     assert 0x80 <= code <= 0xA0  # two's complement: -2.0 is 0x80, -1.5 is 0xa0
      >>> test_two_complement_range()
      >>> @given(codes("e4m3fn", specials=False))
      ... def test_no_nan_codes(code):
      ...     assert code & 0x7F != 0x7F
      >>> test_no_nan_codes()
    """
    fmt = format_arg(fmt)
    subnormals = bool_arg(subnormals, "subnormals")
    negative = bool_arg(negative, "negative")
    bounds = {"min_value": min_value, "max_value": max_value, "min_magnitude": min_magnitude,
              "max_magnitude": max_magnitude}  # fmt: skip
    specials = all(v is None for v in bounds.values()) if specials is None else bool_arg(specials, "specials")
    found = checked_code_range(fmt, subnormals, negative, bounds)
    sides = [side for side in (found.positive, found.negative) if side is not None]
    lo, hi = min(side[0] for side in sides), max(side[1] for side in sides)
    gap = found.gap if found.gap is not None and lo == 0 and hi >= found.gap else None
    # Without subnormals, draw gap - 1 as zero, so that zero stays the simplest magnitude.
    magnitudes = st.integers(gap - 1, hi).map(lambda c: 0 if c == gap - 1 else c) if gap else st.integers(lo, hi)
    edges = boundary_magnitudes(fmt, found, lo, hi, subnormals)
    infinities = (found.pos_inf, found.neg_inf)
    nan = specials and fmt.has_nan
    special = specials and (nan or any(infinities))
    signed = negative and fmt.signed

    def allowed(magnitude: int, is_negative: bool) -> bool:
        side = found.negative if is_negative else found.positive
        return side is not None and side[0] <= magnitude <= side[1]

    # Every draw makes the same leading choices (magnitude, kind, sign), so that hypothesis, which
    # shrinks toward shorter and then smaller choice sequences, prefers uniform finite values.
    @st.composite
    def draw_code(draw):
        magnitude = draw(magnitudes)
        kind = draw(st.integers(0, _KINDS - 1))
        is_negative = signed and draw(st.booleans())
        if kind == _SPECIAL and special:
            return _special_code(fmt, draw, is_negative, nan, infinities)
        if kind == _BOUNDARY:
            magnitude, sign = draw(st.sampled_from(edges))
            is_negative = is_negative if sign is None else sign
        if not allowed(magnitude, is_negative):  # the other sign holds it (the range is not symmetric)
            is_negative = not is_negative
        if not allowed(magnitude, is_negative):  # not reached for the ranges code_range builds: clamp
            is_negative = found.positive is None
            side = found.negative if is_negative else found.positive
            assert side is not None
            magnitude = min(max(magnitude, side[0]), side[1])
        return finite_code(fmt, magnitude, is_negative)

    return draw_code()


def _special_code(fmt: Format, draw: Any, negative: bool, nan: bool, infinities: tuple[bool, bool]) -> int:
    """Draw the code of a non-finite value (±inf where allowed, any NaN code), given the drawn sign."""
    pos_inf, neg_inf = infinities
    if not nan or ((pos_inf or neg_inf) and not draw(st.booleans())):  # infinity before NaN
        negative = (negative and neg_inf) or not pos_inf
        inf_code = fmt.inf_code
        assert inf_code is not None, fmt.name
        return inf_code | (fmt.sign_mask if negative else 0)
    nan_code = fmt.nan_code
    assert nan_code is not None, fmt.name
    sign = fmt.sign_mask if negative else 0
    if fmt.specials == "ieee":  # the canonical quiet NaN before other payloads
        mantissa = draw(_nan_mantissas(fmt.mantissa_bits))
        assert fmt.inf_code is not None
        return fmt.inf_code | mantissa | sign
    if fmt.specials == "fn" and fmt.signed:
        return nan_code | sign
    return nan_code  # fnuz, P3109 and unsigned formats: the one NaN


def values(
    fmt: Any,
    *,
    specials: bool | None = None,
    subnormals: bool = True,
    negative: bool = True,
    min_value: float | None = None,
    max_value: float | None = None,
    min_magnitude: float | None = None,
    max_magnitude: float | None = None,
) -> st.SearchStrategy[float]:
    """Representable values of a format, as exact Python floats.

    Special values: with ``specials`` about one draw in eight is NaN or ±infinity, as far as the
    format has them (FP4/FP6/OCP INT8 have neither; e4m3fn has NaN only; IEEE P3109's extended formats
    both). ``specials=None`` (the default) means True without a range, False with one. -0.0 is drawn where
    the format has a negative zero. Every other draw is the exact value of a finite code (see
    `codes`, which also describes the range arguments), so ``fpemu.quantize`` returns it unchanged,
    bit for bit: with a range, only the values inside it, about one draw in eight a boundary (the
    values nearest the range's ends, the smallest subnormal, min_normal, max, where inside).

    Shrinks toward 0.0 (or the smallest value of a format without zero, or the smallest magnitude in
    the range), then small magnitudes.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      specials: Also draw NaN and ±infinity (None: only without a range).
      subnormals: Also draw subnormal values.
      negative: Also draw negative values (signed formats only).
      min_value, max_value, min_magnitude, max_magnitude: The range, see `codes`.

    Example:
      >>> from hypothesis import find
      >>> find(values("e2m1fn"), lambda v: v > 3) in (4.0, 6.0)  # e2m1fn's values above 3
      True
      >>> find(values("e4m3fn", subnormals=False), lambda v: 0 < v < 1) >= 2.0**-6  # min_normal or more
      True
      >>> find(values("bf16", min_value=-100, max_value=100), lambda v: v > 99) in (99.5, 100.0)  # bf16's only two
      True
      >>> find(values("int8_ocp"), lambda v: v < -1.99)  # two's complement: -2.0 (0x80) is a value
      -2.0
    """
    fmt = format_arg(fmt)
    bounds = {"min_value": min_value, "max_value": max_value, "min_magnitude": min_magnitude,
              "max_magnitude": max_magnitude}  # fmt: skip
    strategy = codes(fmt, specials=specials, subnormals=subnormals, negative=negative, **bounds)
    return strategy.map(lambda code: reference.decode_scalar(code, fmt))


# -- boundary inputs --------------------------------------------------------------------------------

# The strategies `boundaries` returned: their draws are inputs around a format, not its values, and
# `arrays` stores them unrounded.
_INPUTS: weakref.WeakSet = weakref.WeakSet()


def boundaries(fmt: Any, *, dtype: Any = "float32", negative: bool = True) -> st.SearchStrategy[float]:
    """Inputs (not necessarily representable) at the places where rounding into ``fmt`` can go wrong.

    Each draw is one of: ±0, ±inf, NaN; or a point below, moved by -1, 0 or +1 ulp of the input
    ``dtype``, with either sign:

    - a representable value (the value of a random finite code);
    - a tie: the midpoint between two neighbouring values (between 0 and the smallest subnormal,
      and between max and ``max + ulp(max)`` included);
    - max, and the overflow threshold ``max + ulp(max) / 2`` (the tie above max); for a
      two's-complement format (``int8_ocp``) the negative ones are its most negative value ``min``
      and ``min - ulp / 2``;
    - min_normal and min_subnormal.

    Values are exact Python floats that ``dtype`` holds exactly. A point that ``dtype`` cannot
    hold is first rounded to nearest in ``dtype`` (so pick a ``dtype`` wider than ``fmt`` for its
    ties to exist), and a finite point beyond ``dtype``'s range, or one ulp above its largest
    finite value, becomes that largest finite value. NaN and ±inf are always drawn: they are
    inputs every conversion must handle, whatever the format. Shrinks toward +0.0, then
    representable values, then ties.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      dtype: The input dtype: float16, bfloat16, float32 (default) or float64.
      negative: Also draw negative inputs.

    Raises:
      ValueError: for another ``dtype``.

    Example:
      >>> import math, jax.numpy as jnp, fpemu
      >>> from hypothesis import given, settings
      >>> from fpemu.testing import reference
      >>> @settings(max_examples=50, deadline=None)
      ... @given(boundaries("e4m3fn"))
      ... def test_quantize_matches_the_oracle(x):
      ...     got = float(fpemu.quantize(jnp.float32(x), "e4m3fn"))
      ...     want = reference.round_scalar(x, "e4m3fn")
      ...     assert got == want or (math.isnan(got) and math.isnan(want))
      >>> test_quantize_matches_the_oracle()
    """
    fmt = format_arg(fmt)
    dtype = dtype_arg(dtype)
    if dtype.name not in INPUT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(INPUT_DTYPES)}, got {dtype.name}")
    negative = bool_arg(negative, "negative")
    signs = st.booleans() if negative else st.just(False)
    offsets = st.sampled_from((0, 1, -1))

    # Every draw makes the same choices (kind, code, offset, sign), so that hypothesis, which shrinks
    # toward shorter and then smaller choice sequences, shrinks toward the first kinds.
    @st.composite
    def draw_boundary(draw):
        kind = draw(st.sampled_from(_BOUNDARY_KINDS))
        code = draw(st.integers(0, fmt.max_code))
        offset = draw(offsets)
        negative = draw(signs)
        if kind == "nan":
            return float("nan")
        if kind == "zero":
            return -0.0 if negative else 0.0
        if kind == "infinity":
            return float("-inf") if negative else float("inf")
        if kind == "value":
            point = fmt.magnitude_value(code)
        elif kind == "tie":
            point = (fmt.magnitude_value(code) + next_magnitude(fmt, code)) / 2
        elif kind == "max":
            point = -fmt.min if negative else fmt.max  # -min: two's complement has one more negative value
        elif kind == "overflow":
            top = -fmt.min if negative else fmt.max
            point = top + spacing(top, fmt) / 2
        elif kind == "min_normal":
            point = fmt.min_normal
        else:
            point = fmt.min_subnormal
        value = in_dtype(point, dtype, offset)
        return -value if negative else value

    strategy = draw_boundary()
    _INPUTS.add(strategy)
    return strategy


# -- arrays -----------------------------------------------------------------------------------------


def arrays(
    fmt: Any,
    shape: Any = None,
    *,
    dtype: Any = "float32",
    elements: st.SearchStrategy | None = None,
    rounding: str | None = "nearest_even",
    specials: bool | None = None,
    subnormals: bool = True,
    negative: bool = True,
    min_value: float | None = None,
    max_value: float | None = None,
    min_magnitude: float | None = None,
    max_magnitude: float | None = None,
) -> st.SearchStrategy[np.ndarray]:
    """NumPy arrays of ``dtype`` holding representable values of ``fmt`` (or other ``elements``).

    Special values follow `values`: without a range about one element in eight is NaN or ±infinity
    (as far as the format has them), and -0.0 appears where the format has it. Arrays shrink toward
    all zeros (or the smallest magnitude of the range).

    ``elements`` that are not values of ``fmt`` are never stored silently: each element is rounded
    into ``fmt`` with ``rounding`` (nearest-even by default, with the exact oracle
    `reference.round_scalar`, so overflow and NaN go as in `fpemu.quantize`: to ±inf or NaN where
    the format has them, else to ±max). Elements drawn by `boundaries` are the exception: they are
    inputs around a format by design and are stored as they are; so are any elements with
    ``rounding=None``. Unrounded elements must be exactly values of ``dtype``: another one raises
    a ValueError when drawn, never a silent cast.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      shape: An int, a tuple, or a hypothesis strategy of shapes; by default 1 or 2 dimensions of
        1 to 8 elements each.
      dtype: The array's dtype: any float dtype of the registry (float32, bfloat16,
        ``jnp.float8_e4m3fn``, ...) that holds every value of ``fmt``.
      elements: A strategy of numbers to use instead of ``values(fmt, ...)``, for example
        ``st.floats(-10, 10)`` (rounded into ``fmt``) or ``boundaries(fmt)`` (stored as drawn).
      rounding: The rounding mode that puts ``elements`` into ``fmt`` (a deterministic mode of
        `fpemu.ROUNDING_MODES`), or None to store them unrounded.
      specials, subnormals, negative, min_value, max_value, min_magnitude, max_magnitude: as for
        `values` (without ``elements`` only: bound your ``elements`` strategy itself).

    Raises:
      ValueError: if ``dtype`` cannot hold every value of ``fmt`` (e.g. fp16 values in bfloat16),
        or cannot hold its infinity or NaN while drawing specials; for a range with ``elements``;
        and, when drawn, for an unrounded element that ``dtype`` does not hold exactly.

    Example:
      >>> import jax.numpy as jnp, numpy as np, fpemu
      >>> from hypothesis import given, settings, strategies as st
      >>> @settings(max_examples=20, deadline=None)
      ... @given(arrays("e4m3fn", (2, 3)))
      ... def test_quantize_is_the_identity(a):
      ...     assert a.dtype == np.float32 and a.shape == (2, 3)
      ...     q = np.asarray(fpemu.quantize(jnp.asarray(a), "e4m3fn"))
      ...     assert (q.view(np.uint32) == a.view(np.uint32)).all()
      >>> test_quantize_is_the_identity()
      >>> @settings(max_examples=20, deadline=None)
      ... @given(arrays("bf16", 4, elements=st.floats(-10, 10)), arrays("bf16", 4, max_value=1e4, min_value=-1e4))
      ... def test_bf16_values(a, b):  # elements rounded into bf16; values within +-1e4
      ...     assert (a == a.astype(jnp.bfloat16).astype(np.float32)).all() and (abs(b) <= 1e4).all()
      >>> test_bf16_values()
    """
    fmt = format_arg(fmt)
    dtype = dtype_arg(dtype)
    container = container_format(dtype)
    if shape is None:
        shape = npst.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=8)
    bounds = {"min_value": min_value, "max_value": max_value, "min_magnitude": min_magnitude,
              "max_magnitude": max_magnitude}  # fmt: skip
    into_fmt, own_values = False, elements is None  # whether drawn elements are rounded into fmt
    mode: Any = rounding
    if own_values:
        draws_specials = all(v is None for v in bounds.values()) if specials is None else specials
        if draws_specials and ((fmt.has_inf and not container.has_inf) or (fmt.has_nan and not container.has_nan)):
            raise ValueError(
                f"dtype {dtype.name} cannot hold the infinity/NaN of {fmt.name}; pass specials=False or a wider dtype"
            )
        elements = values(fmt, specials=specials, subnormals=subnormals, negative=negative, **bounds)
    else:
        if not isinstance(elements, st.SearchStrategy):
            raise TypeError(f"elements must be a hypothesis strategy or None, got {elements!r}")
        given = [name for name, v in bounds.items() if v is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} bound the values arrays draws itself; with elements=, bound the elements "
                "strategy instead (or use values(fmt, ...) as elements)"
            )
        if rounding is not None:
            mode = rounding_arg(rounding, "rounding", choices=_DETERMINISTIC)
        into_fmt = rounding is not None and elements not in _INPUTS
    if (into_fmt or own_values) and not fits(fmt, container):
        raise ValueError(
            f"dtype {dtype.name} cannot hold every value of {fmt.name} (max {fmt.max:g}, smallest "
            f"{fmt.min_subnormal:g}, {fmt.mantissa_bits} mantissa bits); use a wider dtype such as float32"
        )

    def convert(a: np.ndarray) -> np.ndarray:
        if into_fmt:  # values of fmt (NaN payloads included, where fmt has NaN) stay as drawn
            a = a.copy()
            off = ~representable(a, fmt)
            a[off] = reference.round_array(a[off], fmt, rounding=mode)
        with np.errstate(invalid="ignore", over="ignore"):
            out = a.astype(dtype)
        back = widen(out)
        exact = (bits(back) == bits(a)) | (np.isnan(back) & np.isnan(a))
        if not exact.all():
            bad = float(a.reshape(-1)[np.flatnonzero(~exact)[0]])
            why = "rounded into " + fmt.name if into_fmt else "drawn unrounded"
            raise ValueError(
                f"arrays: element {bad!r} ({why}) is not a value of dtype {dtype.name}; draw elements that "
                f"{dtype.name} holds, or a wider dtype"
            )
        return out

    # Drawn as float64 (which holds every value of every format exactly), then rounded or cast.
    return npst.arrays(np.float64, shape, elements=elements).map(convert)


# -- dtypes -----------------------------------------------------------------------------------------

_ML_DTYPES_KWARGS = ("allow_nan", "allow_infinity", "allow_subnormal")


def _special_kind(value: float) -> str:
    return "nan" if np.isnan(value) else "inf" if np.isinf(value) else "finite"


def from_dtype(dtype: Any, **kwargs: Any) -> st.SearchStrategy:
    """Scalars of any float dtype, the ml_dtypes ones included (hypothesis cannot infer those).

    For the dtypes of fpemu's registry that NumPy does not know (bfloat16, the float8, float6 and
    float4 types, float8_e8m0fnu) this draws codes with `codes` and views them as the dtype, so
    every bit pattern can come up: NaN with any payload where the format has NaN payloads, ±inf,
    -0. The keyword arguments ``allow_nan``, ``allow_infinity`` and ``allow_subnormal`` (default
    True) exclude kinds of values, as in hypothesis. For every other dtype (float16, float32,
    float64, integers, ...) this is ``hypothesis.extra.numpy.from_dtype(dtype, **kwargs)``.

    Shrinks toward zero (for e8m0fnu: its smallest value, 2**-127).

    Raises:
      TypeError: for keyword arguments other than the three above, with an ml_dtypes dtype.
      ValueError: for an ml_dtypes-style dtype that is not in fpemu's registry.

    Example:
      >>> import ml_dtypes
      >>> from hypothesis import find
      >>> # No NaN here: comparing a signalling NaN of an ml_dtypes type warns in NumPy.
      >>> x = find(from_dtype(ml_dtypes.bfloat16, allow_nan=False, allow_infinity=False), lambda v: v > 1)
      >>> x.dtype, float(x) > 1
      (dtype(bfloat16), True)
      >>> abs(float(find(from_dtype("float8_e4m3fn", allow_nan=False), lambda v: abs(v) > 400))) in (416.0, 448.0)
      True
    """
    dtype = dtype_arg(dtype)
    if dtype.kind != "V":
        return npst.from_dtype(dtype, **kwargs)
    unknown = sorted(set(kwargs) - set(_ML_DTYPES_KWARGS))
    if unknown:
        raise TypeError(
            f"from_dtype({dtype.name}) accepts only {', '.join(_ML_DTYPES_KWARGS)}; got unexpected {', '.join(unknown)}"
        )
    options = {name: bool_arg(kwargs.get(name, True), name) for name in _ML_DTYPES_KWARGS}
    fmt = container_format(dtype)
    if fmt.dtype != dtype:
        raise ValueError(f"dtype {dtype.name} has no code layout in fpemu's registry")
    allow_nan, allow_inf = options["allow_nan"], options["allow_infinity"]
    specials = (allow_nan and fmt.has_nan) or (allow_inf and fmt.has_inf)
    strategy = codes(fmt, specials=specials, subnormals=options["allow_subnormal"])
    if specials and not (allow_nan and allow_inf):  # one kind of special value only
        kept = "nan" if allow_nan else "inf"
        strategy = strategy.filter(lambda c: _special_kind(reference.decode_scalar(c, fmt)) in ("finite", kept))
    code_dtype = fmt.code_dtype
    if code_dtype.itemsize != dtype.itemsize:
        code_dtype = np.dtype(f"uint{8 * dtype.itemsize}")
    return strategy.map(lambda c: np.asarray(c, code_dtype).view(dtype)[()])
