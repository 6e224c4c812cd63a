"""Hypothesis strategies for low-precision formats: values, codes, boundary inputs, arrays, formats.

Every strategy is built from integers (codes, indices into short lists of cases), so hypothesis
shrinks a failing example toward small codes: +0, the smallest values, the first kind of boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from fpemu._args import INPUT_DTYPES, bool_arg, format_arg
from fpemu._core.format import Format, fits
from fpemu.testing import reference
from fpemu.testing._bits import container_format, dtype_arg
from fpemu.testing._custom_formats import LAYOUTS, formats

__all__ = ["LAYOUTS", "arrays", "boundaries", "codes", "formats", "from_dtype", "values"]

# One draw in _SPECIAL_ODDS is a special value (NaN, ±inf), where they are allowed.
_SPECIAL_ODDS = 8
# The kinds of boundary input, in shrinking order.
_BOUNDARY_KINDS = (
    "zero",
    "value",
    "tie",
    "max",
    "overflow",
    "min_normal",
    "min_subnormal",
    "infinity",
    "nan",
)


# -- codes and values -------------------------------------------------------------------------------


def _nan_mantissas(m: int) -> st.SearchStrategy[int]:
    """NaN mantissa fields of an ``"ieee"`` format, the canonical quiet one first (it is what they shrink to)."""
    quiet = 1 << (m - 1)
    return st.integers(0, (1 << m) - 2).map(lambda i: quiet + i if quiet + i < (1 << m) else quiet + i - (1 << m) + 1)


def _special_code(fmt: Format, draw: Any, negative: bool) -> int:
    """Draw the code of a non-finite value (±inf, any NaN code), given the sign drawn for the value."""
    sign = fmt.sign_mask if negative else 0
    inf_code, nan_code = fmt.inf_code, fmt.nan_code
    assert nan_code is not None, fmt.name  # drawn only for formats with NaN
    if fmt.specials == "ieee":
        assert inf_code is not None, fmt.name
        # inf before NaN; the canonical quiet NaN before other payloads.
        mantissa = draw(_nan_mantissas(fmt.mantissa_bits)) if draw(st.booleans()) else 0
        return inf_code | mantissa | sign
    if fmt.specials == "fn":
        return nan_code | sign
    return nan_code  # fnuz: the one NaN, 0x80...


def codes(fmt: Any, *, specials: bool = True, subnormals: bool = True, negative: bool = True) -> st.SearchStrategy[int]:
    """Codes (``sign | exponent | mantissa``, as Python ints) of a format.

    Special values: with ``specials=True`` about one draw in eight is a non-finite code of the format
    (±infinity and every NaN code, payloads included, for ``"ieee"`` formats; the NaN codes of
    ``"fn"``/``"fnuz"`` formats); formats with neither (FP4, FP6) have none to draw. Zero is drawn as
    +0 and, where the format has it, -0. The fnuz code ``0x80`` is never drawn as a number: it is
    NaN. Finite codes are uniform over magnitude codes, so every binade is equally likely.

    Shrinks toward code 0 (+0, or the smallest value for formats without zero), then small codes.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      specials: Also draw the codes of NaN and ±infinity.
      subnormals: Also draw subnormal codes (zero is always drawn).
      negative: Also draw negative codes (signed formats only).

    Raises:
      TypeError: for a ``fmt`` that is not a format, or a non-bool option.

    Example:
      >>> from hypothesis import find, given
      >>> code = find(codes("e4m3fn", specials=False), lambda c: c & 0x7F >= 0x40)  # |value| >= 2
      >>> code & 0x7F != 0x7F  # specials=False: never a NaN code (0x7f, 0xff)
      True
      >>> @given(codes("e4m3fn", specials=False))
      ... def test_no_nan_codes(code):
      ...     assert code & 0x7F != 0x7F
      >>> test_no_nan_codes()
    """
    fmt = format_arg(fmt)
    specials = bool_arg(specials, "specials")
    subnormals = bool_arg(subnormals, "subnormals")
    negative = bool_arg(negative, "negative")
    first_normal = 1 << fmt.mantissa_bits
    if subnormals or not fmt.has_subnormals:
        magnitudes = st.integers(0, fmt.max_code)
    else:  # 0, then the normal codes: draw first_normal - 1 as zero so that zero stays the simplest
        magnitudes = st.integers(first_normal - 1, fmt.max_code).map(lambda c: 0 if c == first_normal - 1 else c)
    signed = negative and fmt.signed
    special = specials and fmt.has_nan

    # Every draw makes the same leading choices (magnitude, special?, sign), so that hypothesis,
    # which shrinks toward shorter and then smaller choice sequences, prefers finite values.
    @st.composite
    def draw_code(draw):
        magnitude = draw(magnitudes)
        is_special = special and draw(st.integers(0, _SPECIAL_ODDS - 1)) == _SPECIAL_ODDS - 1
        is_negative = signed and draw(st.booleans())
        if is_special:
            return _special_code(fmt, draw, is_negative)
        if is_negative and (magnitude or fmt.has_negative_zero):
            return magnitude | fmt.sign_mask
        return magnitude

    return draw_code()


def values(
    fmt: Any, *, specials: bool = True, subnormals: bool = True, negative: bool = True
) -> st.SearchStrategy[float]:
    """Representable values of a format, as exact Python floats.

    Special values: with ``specials=True`` about one draw in eight is NaN or ±infinity, as far as
    the format has them (FP4/FP6 have neither; e4m3fn has NaN only). -0.0 is drawn where the format
    has a negative zero. Every other draw is the exact value of a finite code (see `codes`), so
    ``fpemu.quantize`` returns it unchanged, bit for bit.

    Shrinks toward 0.0 (or the smallest value of a format without zero), then small magnitudes.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      specials: Also draw NaN and ±infinity.
      subnormals: Also draw subnormal values.
      negative: Also draw negative values (signed formats only).

    Example:
      >>> from hypothesis import find
      >>> find(values("e2m1fn"), lambda v: v > 3) in (4.0, 6.0)  # e2m1fn's values above 3
      True
      >>> find(values("e4m3fn", subnormals=False), lambda v: 0 < v < 1) >= 2.0**-6  # min_normal or more
      True
    """
    fmt = format_arg(fmt)
    return codes(fmt, specials=specials, subnormals=subnormals, negative=negative).map(
        lambda code: reference.decode_scalar(code, fmt)
    )


# -- boundary inputs --------------------------------------------------------------------------------


def _next_magnitude(fmt: Format, code: int) -> float:
    """The value of magnitude code ``code + 1``; past max, the grid continues with the top spacing."""
    if code < fmt.max_code:
        return fmt.magnitude_value(code + 1)
    return fmt.max + 2.0 ** (fmt.emax - fmt.mantissa_bits)


def _in_dtype(value: float, dtype: np.dtype, offset: int) -> float:
    """``value`` in ``dtype`` (nearest; beyond its range: its largest finite), moved ``offset`` ulps
    (but not past the largest finite value)."""
    with np.errstate(over="ignore"):
        x = np.asarray(value, np.float64).astype(dtype)
    if np.isinf(x):
        x = np.asarray(np.finfo(dtype).max, dtype)
    for _ in range(abs(offset)):
        with np.errstate(over="ignore"):
            moved = np.nextafter(x, np.asarray(np.inf if offset > 0 else -np.inf, dtype))
        x = x if np.isinf(moved) else moved  # the largest finite value stays: inputs stay finite
    return float(x)


def boundaries(fmt: Any, *, dtype: Any = "float32", negative: bool = True) -> st.SearchStrategy[float]:
    """Inputs (not necessarily representable) at the places where rounding into ``fmt`` can go wrong.

    Each draw is one of: ±0, ±inf, NaN; or a point below, moved by -1, 0 or +1 ulp of the input
    ``dtype``, with either sign:

    - a representable value (the value of a random finite code);
    - a tie: the midpoint between two neighbouring values (between 0 and the smallest subnormal,
      and between max and ``max + ulp(max)`` included);
    - max, and the overflow threshold ``max + ulp(max) / 2`` (the tie above max);
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
            point = (fmt.magnitude_value(code) + _next_magnitude(fmt, code)) / 2
        elif kind == "max":
            point = fmt.max
        elif kind == "overflow":
            point = (fmt.max + _next_magnitude(fmt, fmt.max_code)) / 2
        elif kind == "min_normal":
            point = fmt.min_normal
        else:
            point = fmt.min_subnormal
        value = _in_dtype(point, dtype, offset)
        return -value if negative else value

    return draw_boundary()


# -- arrays -----------------------------------------------------------------------------------------


def arrays(
    fmt: Any,
    shape: Any = None,
    *,
    dtype: Any = "float32",
    elements: st.SearchStrategy | None = None,
    specials: bool = True,
    subnormals: bool = True,
    negative: bool = True,
) -> st.SearchStrategy[np.ndarray]:
    """NumPy arrays of ``dtype`` holding representable values of ``fmt`` (or other ``elements``).

    Special values follow `values`: with ``specials=True`` about one element in eight is NaN or
    ±infinity (as far as the format has them), and -0.0 appears where the format has it. Arrays
    shrink toward all zeros.

    Args:
      fmt: Anything `fpemu.get_format` accepts.
      shape: An int, a tuple, or a hypothesis strategy of shapes; by default 1 or 2 dimensions of
        1 to 8 elements each.
      dtype: The array's dtype: any float dtype of the registry (float32, bfloat16,
        ``jnp.float8_e4m3fn``, ...) that holds every value of ``fmt``.
      elements: A strategy of floats to use instead of ``values(fmt, ...)``, for example
        ``boundaries(fmt)``; each must be exactly representable in ``dtype``.
      specials, subnormals, negative: as for `values` (ignored when ``elements`` is given).

    Raises:
      ValueError: if ``dtype`` cannot hold every value of ``fmt`` (e.g. fp16 values in bfloat16),
        or cannot hold its infinity or NaN while ``specials=True``.

    Example:
      >>> import jax.numpy as jnp, numpy as np, fpemu
      >>> from hypothesis import given, settings
      >>> @settings(max_examples=20, deadline=None)
      ... @given(arrays("e4m3fn", (2, 3)))
      ... def test_quantize_is_the_identity(a):
      ...     assert a.dtype == np.float32 and a.shape == (2, 3)
      ...     q = np.asarray(fpemu.quantize(jnp.asarray(a), "e4m3fn"))
      ...     assert (q.view(np.uint32) == a.view(np.uint32)).all()
      >>> test_quantize_is_the_identity()
    """
    fmt = format_arg(fmt)
    dtype = dtype_arg(dtype)
    container = container_format(dtype)
    if shape is None:
        shape = npst.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=8)
    if elements is None:
        if not fits(fmt, container):
            raise ValueError(
                f"dtype {dtype.name} cannot hold every value of {fmt.name} (max {fmt.max:g}, smallest "
                f"{fmt.min_subnormal:g}, {fmt.mantissa_bits} mantissa bits); use a wider dtype such as float32"
            )
        if specials and ((fmt.has_inf and not container.has_inf) or (fmt.has_nan and not container.has_nan)):
            raise ValueError(
                f"dtype {dtype.name} cannot hold the infinity/NaN of {fmt.name}; pass specials=False or a wider dtype"
            )
        elements = values(fmt, specials=specials, subnormals=subnormals, negative=negative)
    elif not isinstance(elements, st.SearchStrategy):
        raise TypeError(f"elements must be a hypothesis strategy or None, got {elements!r}")

    def convert(a: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return a.astype(dtype)

    # Drawn as float64 (which holds every value of every format exactly), then cast: exact.
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
