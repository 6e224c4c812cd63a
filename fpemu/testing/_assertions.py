"""Exact assertions: bit-exact comparison, representability, ulp distance, and tolerance checks.

Every function accepts NumPy arrays, JAX arrays, ml_dtypes arrays and Python scalars, and widens
floats to float64 (exact for every float type of 64 bits or fewer) before doing arithmetic. The
failure messages list the first mismatches with their index, the values, their bits in hex and
their distance in ulps, and say how many elements failed.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

import numpy as np

from fpemu._core.format import Format
from fpemu._core.registry import UnknownFormatError, get_format
from fpemu.testing import reference

__all__ = [
    "TOLERANCES",
    "Tolerance",
    "assert_bit_exact",
    "assert_close",
    "assert_representable",
    "tolerances",
    "ulp_distance",
]

_SHOW = 10  # mismatches listed in a failure message


# -- array helpers ----------------------------------------------------------------------------------


def _as_array(x: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(x)
    except Exception as err:  # noqa: BLE001 - anything NumPy cannot convert
        raise TypeError(f"{name} must be an array or a number, got {type(x).__name__}") from err
    kind = array.dtype.kind
    if kind == "V" and _is_ml_float(array.dtype):
        return array
    if kind not in "fiub":
        raise TypeError(f"{name} must be a float, integer or bool array, got dtype {array.dtype}")
    return array


def _is_ml_float(dtype: np.dtype) -> bool:
    try:
        return get_format(dtype).dtype == dtype
    except (UnknownFormatError, TypeError):
        return False


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and _is_ml_float(dtype))


def _widen(array: np.ndarray) -> np.ndarray:
    """float64 values (exact for every float type of at most 64 bits, and for integers below 2**53)."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises FE_INVALID; it stays NaN
        return array.astype(np.float64)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))


def _bits_hex(x: Any) -> str:
    """The bits of one float element, in hex with the width of its dtype."""
    x = np.asarray(x)
    return _hex(int(_bits(x)), 8 * x.dtype.itemsize)


def _format_arg(fmt: Any, name: str = "fmt") -> Format:
    try:
        return get_format(fmt)
    except TypeError:
        raise TypeError(f"{name} must be a format name, a fpemu.Format or a float dtype, got {fmt!r}") from None


def _dtype_format(dtype: np.dtype) -> Format | None:
    """The registry format of a float dtype, or None."""
    if not _is_float(dtype):
        return None
    try:
        return get_format(dtype)
    except (UnknownFormatError, TypeError):
        return None


# -- positions on a format's grid -------------------------------------------------------------------


def _scaled(a: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """For magnitudes ``a`` (float64, >= 0): the binade of each (clamped below at emin) and
    ``a / 2**(binade - mantissa_bits)``, the magnitude in units of the binade's spacing (exact)."""
    with np.errstate(invalid="ignore"):
        _, exponent = np.frexp(np.where(np.isfinite(a), a, 0.0))
    e = exponent.astype(np.int64) - 1  # floor(log2(a)) for a > 0
    binade = np.maximum(np.where(a == 0, fmt.emin, e), fmt.emin)
    scaled = np.ldexp(a, (fmt.mantissa_bits - binade).astype(np.int32))
    return binade, scaled


def _position_parts(v: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each float64 value's position on the format's ordered grid of magnitudes, as an exact integer
    part (int64) plus a float64 part in ``[0, 2**(mantissa_bits + 1))``, and its sign.

    Magnitude code ``c`` sits at position ``c``; between two neighbours the position is linear in
    the value; past max the grid continues as if the format had more exponent range. The parts of
    ±inf and NaN are (0, inf) and (0, NaN).
    """
    a = np.abs(v)
    binade, scaled = _scaled(a, fmt)
    offset = 0 if fmt.has_zero else 1 << fmt.mantissa_bits
    whole = ((binade - fmt.emin) << fmt.mantissa_bits) - offset
    part = np.where(np.isinf(a), np.inf, np.where(np.isnan(a), np.nan, scaled))
    return np.where(np.isfinite(a), whole, 0), part, np.signbit(v)


def _representable(v: np.ndarray, fmt: Format, subnormals: bool = True) -> np.ndarray:
    """Whether each float64 value is a value of ``fmt`` (NaN: iff the format has a NaN code)."""
    a = np.abs(v)
    negative = np.signbit(v)
    finite = np.isfinite(v)
    _, scaled = _scaled(a, fmt)
    with np.errstate(invalid="ignore"):
        on_grid = finite & (a != 0) & (scaled == np.floor(scaled)) & (a <= fmt.max) & (a >= fmt.min_subnormal)
    if not subnormals:
        on_grid &= a >= fmt.min_normal
    if not fmt.signed:
        on_grid &= ~negative
    zero = (a == 0) & fmt.has_zero & (~negative | fmt.has_negative_zero)
    infinity = np.isinf(v) & fmt.has_inf & (~negative | fmt.signed)
    nan = np.isnan(v) & fmt.has_nan
    return on_grid | zero | infinity | nan


def _code_text(value: float, fmt: Format) -> str:
    """The code of a value in ``fmt`` in hex, or ``-`` if the format has no such value."""
    v = np.array(value, np.float64)
    if not _representable(v, fmt):
        return "-"
    if math.isnan(value):
        return "nan"
    sign = fmt.sign_mask if math.copysign(1.0, value) < 0 else 0
    if math.isinf(value):
        return _hex(fmt.inf_code | sign, fmt.bits)
    whole, part, _ = _position_parts(v, fmt)
    return _hex(int(whole) + int(part) | sign, fmt.bits)


def _hex(code: int, bits: int) -> str:
    return f"0x{code:0{(bits + 3) // 4}x}"


def ulp_distance(a: Any, b: Any, fmt: Any) -> Any:
    """The distance between ``a`` and ``b`` in units of ``fmt``'s spacing: the number of steps
    between them in the format's ordered list of finite values.

    Special values first: two NaNs are at distance 0 and a NaN is at distance ``inf`` from
    anything else; equal infinities are at distance 0, and an infinity is at distance ``inf`` from
    anything else. -0 and +0 are the same point (distance 0): compare bits with
    `assert_bit_exact` to catch a sign-of-zero difference.

    For values of ``fmt`` the distance is an integer: the number of codes between them, counted
    on the ordered list ``-max, ..., -min_subnormal, 0, min_subnormal, ..., max`` (one zero). For
    other values it is interpolated linearly between neighbouring values, so ``ulp_distance(x,
    quantize(x, fmt), fmt) <= 0.5`` after rounding to nearest. Past max the grid continues as if
    the format had more exponent range; for unsigned formats negative values are measured on the
    mirrored grid. Computed in float64 and exact while positions stay below 2**53 (every format
    except fp64 itself).

    Args:
      a, b: Arrays or numbers of any float (or integer) dtype; they broadcast together.
      fmt: Anything `fpemu.get_format` accepts.

    Returns:
      A float64 array of the broadcast shape (a NumPy scalar for scalar inputs).

    Raises:
      TypeError: for inputs that are not float, integer or bool, or a bad ``fmt``.

    Example:
      >>> float(ulp_distance(1.0, 1.25, "e4m3fn"))  # 1.0, 1.125, 1.25: two steps
      2.0
      >>> float(ulp_distance(-0.001953125, 0.001953125, "e4m3fn"))  # -min_subnormal, 0, +min_subnormal
      2.0
      >>> float(ulp_distance(1.0625, 1.0, "e4m3fn"))  # a midpoint is half a step away
      0.5
      >>> ulp_distance([float("nan"), float("nan"), float("inf")], [float("nan"), 1.0, float("inf")], "bf16").tolist()
      [0.0, inf, 0.0]
    """
    fmt = _format_arg(fmt)
    a64, b64 = np.broadcast_arrays(_widen(_as_array(a, "a")), _widen(_as_array(b, "b")))
    whole_a, part_a, negative_a = _position_parts(a64, fmt)
    whole_b, part_b, negative_b = _position_parts(b64, fmt)
    with np.errstate(invalid="ignore"):
        # Same sign: the difference of the integer parts is exact, so the distance keeps its
        # fractional digits however far from zero both are. Opposite signs: the magnitudes add.
        same_sign = np.abs((whole_a - whole_b).astype(np.float64) + (part_a - part_b))
        opposite = whole_a.astype(np.float64) + whole_b.astype(np.float64) + part_a + part_b
        distance = np.where(negative_a == negative_b, same_sign, opposite)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    distance = np.where(nan_a | nan_b, np.inf, distance)
    distance = np.where((nan_a & nan_b) | (np.isinf(a64) & (a64 == b64)), 0.0, distance)
    return distance[()] if distance.ndim == 0 else distance


# -- failure messages -------------------------------------------------------------------------------


def _index_text(flat: int, shape: tuple[int, ...]) -> str:
    if len(shape) == 0:
        return "()"
    index = np.unravel_index(flat, shape)
    return str(int(index[0])) if len(shape) == 1 else str(tuple(int(i) for i in index))


def _value_text(x: np.ndarray) -> str:
    """An element: floats as the exact value's shortest float64 repr, integers in hex."""
    if _is_float(x.dtype):
        return repr(float(_widen(x)))
    if x.dtype.kind == "b":
        return repr(bool(x))
    return hex(int(x))


def _number_text(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.3g}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _mismatch_rows(
    failed: np.ndarray,
    actual: np.ndarray,
    expected: np.ndarray,
    fmt: Format | None,
    show: int,
    errors: bool = False,
    codes: bool = True,
) -> tuple[list[str], list[list[str]]]:
    """A table of the first ``show`` failing elements (flat indices ``failed``)."""
    is_float = _is_float(actual.dtype)
    codes = codes and fmt is not None
    headers = ["index", "actual", "expected"]
    if is_float:
        headers += ["actual bits", "expected bits"]
    if errors:
        headers += ["abs err", "rel err"]
    if codes:
        headers += [f"{fmt.name} codes" if is_float else f"{fmt.name} values"]
    if fmt is not None:
        headers += [f"ulps ({fmt.name})"]
    rows = []
    flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
    for i in failed[:show]:
        a, e = flat_a[i], flat_e[i]
        row = [_index_text(int(i), actual.shape), _value_text(a), _value_text(e)]
        if is_float:
            row += [_bits_hex(a), _bits_hex(e)]
        a64, e64 = float(_widen(np.asarray(a))), float(_widen(np.asarray(e)))
        if not is_float and fmt is not None:  # integer arrays are codes of fmt
            a64, e64 = _decode(int(a), fmt), _decode(int(e), fmt)
        if errors:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                abs_err = abs(a64 - e64)
                rel_err = abs_err / abs(e64) if e64 != 0 else (0.0 if abs_err == 0 else math.inf)
            row += [_number_text(abs_err), _number_text(rel_err)]
        if codes:
            row += [f"{_code_text(a64, fmt)} / {_code_text(e64, fmt)}" if is_float else f"{a64!r} / {e64!r}"]
        if fmt is not None:
            row += [_number_text(float(ulp_distance(a64, e64, fmt)))]
        rows.append(row)
    return headers, rows


def _decode(code: int, fmt: Format) -> float:
    try:
        return reference.decode_scalar(code, fmt)
    except ValueError:
        return math.nan


def _report(title, failed, actual, expected, fmt, show: int, err_msg: str, errors=False, codes=True) -> str:
    headers, rows = _mismatch_rows(failed, actual, expected, fmt, show, errors, codes)
    more = f"\n  ... and {failed.size - show} more" if failed.size > show else ""
    prefix = f"{err_msg}\n" if err_msg else ""
    return f"{prefix}{title}\nFirst mismatches:\n{_table(headers, rows)}{more}"


def _check_shapes(actual: np.ndarray, expected: np.ndarray, err_msg: str) -> None:
    if actual.shape != expected.shape:
        prefix = f"{err_msg}\n" if err_msg else ""
        raise AssertionError(f"{prefix}shape mismatch: actual {actual.shape}, expected {expected.shape}")


def _show_arg(show: Any) -> int:
    if isinstance(show, bool) or not isinstance(show, (int, np.integer)) or show < 1:
        raise ValueError(f"show must be a positive int, got {show!r}")
    return int(show)


# -- assertions -------------------------------------------------------------------------------------


def assert_bit_exact(
    actual: Any,
    expected: Any,
    *,
    fmt: Any = None,
    nan_payload: bool = False,
    check_dtype: bool = True,
    err_msg: str = "",
    show: int = _SHOW,
) -> None:
    """Assert that two arrays hold the same bits, element for element.

    Special values first: any NaN equals any NaN (whatever its sign and payload) unless
    ``nan_payload=True``, which compares NaNs bit for bit too; -0 and +0 differ; ±inf equal only
    themselves. Shapes must be equal (no broadcasting) and so must dtypes, unless
    ``check_dtype=False``, which compares exact values instead (float64 widening is exact).
    Integer arrays are compared by value: with ``fmt`` given they are read as codes of ``fmt``.

    Args:
      actual: The array under test (NumPy, JAX, ml_dtypes or a number).
      expected: The expected array.
      fmt: A format to describe mismatches in: each value's code in ``fmt`` (``-`` if it has
        none) and the distance in ulps of ``fmt``. By default, the format of the dtype.
      nan_payload: Compare NaNs bit for bit (sign and payload).
      check_dtype: Require equal dtypes.
      err_msg: Text to put first in the failure message.
      show: How many mismatches the message lists.

    Raises:
      AssertionError: listing the count and the first ``show`` mismatches: index, values, bits,
        codes in ``fmt`` and ulp distance.

    Example:
      >>> import numpy as np
      >>> assert_bit_exact(np.float32([1.0, np.nan]), np.float32([1.0, -np.nan]))  # NaNs match
      >>> assert_bit_exact(np.float32([0.0, 1.0, 2.0]), np.float32([-0.0, 1.125, 2.0]), fmt="e4m3fn")
      Traceback (most recent call last):
      ...
      AssertionError: Not bit-exact: 2 of 3 elements differ (dtype float32, shape (3,)).
      First mismatches:
        index  actual  expected  actual bits  expected bits  e4m3fn codes  ulps (e4m3fn)
        0      0.0     -0.0      0x00000000   0x80000000     0x00 / 0x80   0
        1      1.0     1.125     0x3f800000   0x3f900000     0x38 / 0x39   1
    """
    actual = _as_array(actual, "actual")
    expected = _as_array(expected, "expected")
    prefix = f"{err_msg}\n" if err_msg else ""
    show = _show_arg(show)
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    _check_shapes(actual, expected, err_msg)
    codes = fmt is not None  # with the dtype's own format, the codes column would repeat the bits
    fmt = _format_arg(fmt) if fmt is not None else _dtype_format(actual.dtype)
    if actual.dtype != expected.dtype:  # check_dtype=False: compare exact values
        if not (_is_float(actual.dtype) or _is_float(expected.dtype)):
            same = actual == expected
        else:
            a64, e64 = _widen(actual), _widen(expected)
            same = _bits(a64) == _bits(e64)
            if not nan_payload:
                same |= np.isnan(a64) & np.isnan(e64)
            actual, expected = a64, e64
    elif _is_float(actual.dtype):
        same = _bits(actual) == _bits(expected)
        if not nan_payload:
            same |= np.isnan(actual) & np.isnan(expected)
    else:
        same = actual == expected
    failed = np.flatnonzero(~np.asarray(same))
    if failed.size:
        title = (
            f"Not bit-exact: {failed.size} of {actual.size} elements differ (dtype {actual.dtype}, shape {actual.shape})."
        )
        raise AssertionError(_report(title, failed, actual, expected, fmt, show, err_msg, codes=codes))


def _why_not(value: float, fmt: Format, subnormals: bool) -> str:
    """Why a value is not a value of ``fmt``, naming its neighbours."""
    if math.isnan(value):
        return f"NaN: {fmt.name} has no NaN code"
    if math.isinf(value):
        return f"{value}: {fmt.name} has no infinity" + ("" if fmt.signed or value > 0 else " (unsigned)")
    if value == 0:
        if not fmt.has_zero:
            return f"{fmt.name} has no zero"
        return f"-0: {fmt.name} has no negative zero"
    if value < 0 and not fmt.signed:
        return f"negative: {fmt.name} is unsigned"
    a = abs(value)
    if a > fmt.max:
        return f"beyond max {fmt.max!r}"
    if a < fmt.min_subnormal:
        return f"below the smallest value {fmt.min_subnormal!r}"
    if not subnormals and a < fmt.min_normal:
        return f"subnormal (subnormals=False; min_normal {fmt.min_normal!r})"
    whole, part, _ = _position_parts(np.array(a), fmt)
    lo = int(whole) + math.floor(float(part))
    return f"between {fmt.magnitude_value(lo)!r} and {fmt.magnitude_value(lo + 1)!r}"


def assert_representable(x: Any, fmt: Any, *, subnormals: bool = True, err_msg: str = "", show: int = _SHOW) -> None:
    """Assert that every element of ``x`` is a value of ``fmt`` (so ``quantize(x, fmt)`` returns ``x``).

    Special values first: NaN passes only if the format has a NaN code (it fails for FP4/FP6, whose
    `fpemu.quantize` results keep NaN visible but cannot store it), ±inf only if the format has
    infinities, -0 only if it has a negative zero (not the fnuz formats), negative values only for
    signed formats. Decided exactly, from the value's binade and its multiple of the spacing.

    Args:
      x: An array or number of any float dtype (integers are taken as values).
      fmt: Anything `fpemu.get_format` accepts.
      subnormals: If False, subnormal values fail too (for flush-to-zero results).
      err_msg: Text to put first in the failure message.
      show: How many offending elements the message lists.

    Raises:
      AssertionError: listing the count and the first offending elements, with the reason (for
        example the two neighbouring values).

    Example:
      >>> import numpy as np
      >>> assert_representable(np.float32([0.0, -448.0, 0.001953125, np.nan]), "e4m3fn")
      >>> assert_representable(np.float32([1.0, 1.0625, 500.0]), "e4m3fn")
      Traceback (most recent call last):
      ...
      AssertionError: 2 of 3 elements are not values of e4m3fn.
      First offenders:
        index  value   bits        why
        1      1.0625  0x3f880000  between 1.0 and 1.125
        2      500.0   0x43fa0000  beyond max 448.0
    """
    fmt = _format_arg(fmt)
    show = _show_arg(show)
    x = _as_array(x, "x")
    if x.dtype.kind == "b":
        raise TypeError("x must be a float or integer array, got dtype bool")
    v = _widen(x)
    failed = np.flatnonzero(~_representable(v, fmt, subnormals))
    if failed.size:
        flat_x, flat_v = x.reshape(-1), v.reshape(-1)
        headers = ["index", "value"] + (["bits"] if _is_float(x.dtype) else []) + ["why"]
        rows = []
        for i in failed[:show]:
            row = [_index_text(int(i), x.shape), _value_text(flat_x[i])]
            if _is_float(x.dtype):
                row.append(_bits_hex(flat_x[i]))
            rows.append(row + [_why_not(float(flat_v[i]), fmt, subnormals)])
        more = f"\n  ... and {failed.size - show} more" if failed.size > show else ""
        prefix = f"{err_msg}\n" if err_msg else ""
        raise AssertionError(
            f"{prefix}{failed.size} of {x.size} elements are not values of {fmt.name}.\n"
            f"First offenders:\n{_table(headers, rows)}{more}"
        )


# -- tolerances -------------------------------------------------------------------------------------


class Tolerance(NamedTuple):
    """A pair of tolerances: ``|actual - expected| <= atol + rtol * |expected|``."""

    rtol: float
    atol: float


def _same(value: float, dtypes: tuple[str, ...]) -> dict[str, Tolerance]:
    return {dtype: Tolerance(value, value) for dtype in dtypes}


_FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
           "float8_e5m2fnuz")  # fmt: skip

TOLERANCES: Mapping[str, Mapping[str, Tolerance]] = MappingProxyType(
    {
        # torch.testing.assert_close's defaults: torch/testing/_comparison.py `_DTYPE_PRECISIONS`
        # (copied there from torch.testing._internal.common_utils.TestCase.dtype_precisions).
        "torch": MappingProxyType(
            {
                "float64": Tolerance(1e-7, 1e-7),
                "float32": Tolerance(1.3e-6, 1e-5),
                "float16": Tolerance(1e-3, 1e-5),
                "bfloat16": Tolerance(1.6e-2, 1e-5),
            }
        ),
        # numpy.testing.assert_allclose(actual, desired, rtol=1e-07, atol=0): one default for every dtype.
        "numpy": MappingProxyType(
            {dtype: Tolerance(1e-7, 0.0) for dtype in ("float64", "float32", "float16", "bfloat16")}
        ),
        # numpy.allclose / numpy.isclose(a, b, rtol=1e-05, atol=1e-08).
        "numpy.allclose": MappingProxyType(
            {dtype: Tolerance(1e-5, 1e-8) for dtype in ("float64", "float32", "float16", "bfloat16")}
        ),
        # JAX's own test suite: jax/_src/public_test_util.py `_default_tolerance`, used as both rtol and
        # atol by JaxTestCase.assertAllClose (jax.test_util.check_close also multiplies them by the size).
        "jax": MappingProxyType(
            {
                **_same(1e-15, ("float64",)),
                **_same(1e-6, ("float32",)),
                **_same(1e-3, ("float16",)),
                **_same(1e-2, ("bfloat16",)),
                **_same(1e-1, _FLOAT8),
                **_same(1.0, ("float4_e2m1fn", "float8_e8m0fnu")),
            }
        ),
    }
)


def tolerances(framework: str, dtype: Any = None) -> Any:
    """The default tolerances another framework's closeness assertion uses, per dtype.

    ``"torch"``: ``torch.testing.assert_close`` (float64, float32, float16, bfloat16).
    ``"numpy"``: ``numpy.testing.assert_allclose`` (rtol 1e-7, atol 0, every dtype).
    ``"numpy.allclose"``: ``numpy.allclose`` / ``isclose`` (rtol 1e-5, atol 1e-8).
    ``"jax"``: JAX's test suite (``jax._src.public_test_util``; rtol = atol, also for the float8,
    float4 and e8m0 dtypes).

    Args:
      framework: One of the keys of `TOLERANCES`.
      dtype: A dtype (or its name); None returns the whole per-dtype table.

    Returns:
      A `Tolerance` ``(rtol, atol)``, or a read-only mapping from dtype name to `Tolerance`.

    Raises:
      ValueError: for an unknown framework, or a dtype the framework has no default for (the
        message lists the valid choices).

    Example:
      >>> tolerances("torch", "bfloat16")
      Tolerance(rtol=0.016, atol=1e-05)
      >>> import jax.numpy as jnp
      >>> tolerances("jax", jnp.float32), tolerances("numpy", "float16")
      (Tolerance(rtol=1e-06, atol=1e-06), Tolerance(rtol=1e-07, atol=0.0))
    """
    if framework not in TOLERANCES:
        raise ValueError(f"framework must be one of {', '.join(map(repr, TOLERANCES))}; got {framework!r}")
    table = TOLERANCES[framework]
    if dtype is None:
        return table
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be a dtype or a dtype name, got {dtype!r}") from None
    if name not in table:
        raise ValueError(f"{framework} has no default tolerance for {name}; it has: {', '.join(table)}")
    return table[name]


def _tolerance_arg(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number or None, got {value!r}")
    return float(value)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    fmt: Any = None,
    ulps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    like: str | None = None,
    equal_nan: bool = True,
    check_dtype: bool = True,
    err_msg: str = "",
    show: int = _SHOW,
) -> None:
    """Assert that two arrays agree within a tolerance in ulps of a format, or relative/absolute.

    Special values first: NaN matches NaN (unless ``equal_nan=False``) and nothing else; ±inf
    match only the same infinity; -0 and +0 match (use `assert_bit_exact` for signs of zero).

    An element passes if it is within *any* of the tolerances given:

    - ``ulps``: ``ulp_distance(actual, expected, fmt) <= ulps``, in units of ``fmt`` (by default
      the format of ``expected``'s dtype);
    - ``rtol``/``atol`` (a missing one is 0): ``|actual - expected| <= atol + rtol * |expected|``;
    - ``like``: the ``(rtol, atol)`` another framework uses by default for ``expected``'s dtype,
      from `tolerances` (``"torch"``, ``"numpy"``, ``"numpy.allclose"``, ``"jax"``).

    With none of them given the default is ``ulps=1`` in ``fmt`` (or in ``expected``'s own
    format): two correctly rounded results of the same computation are at most one ulp apart.

    Args:
      actual: The array under test.
      expected: The expected array; same shape (no broadcasting) and, unless
        ``check_dtype=False``, same dtype.
      fmt: The format whose ulps ``ulps`` counts, and that mismatches are described in.
      ulps, rtol, atol: Tolerances (non-negative numbers), see above.
      like: A framework name, whose default ``(rtol, atol)`` for ``expected``'s dtype to use.
      equal_nan: Whether NaN matches NaN.
      check_dtype: Require equal dtypes.
      err_msg: Text to put first in the failure message.
      show: How many mismatches the message lists.

    Raises:
      AssertionError: listing the count and the first mismatches (index, values, bits, absolute
        and relative error, codes in ``fmt`` and ulp distance).
      ValueError: for a negative tolerance, ``like`` together with ``rtol``/``atol``, or ``ulps``
        without a format (an expected dtype outside the registry and no ``fmt``).

    Example:
      >>> import numpy as np
      >>> assert_close(np.float32([1.0, 2.0]), np.float32([1.125, 2.0]), fmt="e4m3fn")  # 1 ulp
      >>> assert_close(np.float32([1.0, 2.0]), np.float32([1.0001, 2.0]), like="torch")
      Traceback (most recent call last):
      ...
      AssertionError: Not close (rtol=1.3e-06, atol=1e-05): 1 of 2 elements differ (dtype float32, shape (2,)).
      First mismatches:
        index  actual  expected           actual bits  expected bits  abs err  rel err  ulps (fp32)
        0      1.0     1.000100016593933  0x3f800000   0x3f800347     0.0001   0.0001   839
    """
    actual = _as_array(actual, "actual")
    expected = _as_array(expected, "expected")
    show = _show_arg(show)
    prefix = f"{err_msg}\n" if err_msg else ""
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    _check_shapes(actual, expected, err_msg)
    ulps, rtol, atol = _tolerance_arg(ulps, "ulps"), _tolerance_arg(rtol, "rtol"), _tolerance_arg(atol, "atol")
    if like is not None:
        if rtol is not None or atol is not None:
            raise ValueError("pass like= or rtol=/atol=, not both")
        rtol, atol = tolerances(like, expected.dtype)
    elif rtol is not None or atol is not None:
        rtol, atol = rtol or 0.0, atol or 0.0
    codes = fmt is not None
    if fmt is not None:
        fmt = _format_arg(fmt)
    else:
        fmt = _dtype_format(expected.dtype)
    if ulps is None and rtol is None:
        ulps = 1.0
    if ulps is not None and fmt is None:
        raise ValueError(f"ulps needs a format: pass fmt= (dtype {expected.dtype} is not in the registry)")
    a64, e64 = _widen(actual), _widen(expected)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (a64 == e64) | (nan_a & nan_e & equal_nan)
        finite = np.isfinite(a64) & np.isfinite(e64)
        if ulps is not None:
            ok |= finite & (ulp_distance(a64, e64, fmt) <= ulps)
        if rtol is not None:
            ok |= finite & (np.abs(a64 - e64) <= atol + rtol * np.abs(e64))
    failed = np.flatnonzero(~ok)
    if failed.size:
        criteria = ([f"ulps={ulps:g} in {fmt.name}"] if ulps is not None else []) + (
            [f"rtol={rtol:g}, atol={atol:g}"] if rtol is not None else []
        )
        title = (
            f"Not close ({' or '.join(criteria)}): {failed.size} of {actual.size} elements differ "
            f"(dtype {actual.dtype}, shape {actual.shape})."
        )
        raise AssertionError(_report(title, failed, actual, expected, fmt, show, err_msg, errors=True, codes=codes))
