"""Exact assertions: bit-exact comparison, representability, and closeness in ulps or tolerances.

Every function accepts NumPy arrays, JAX arrays, ml_dtypes arrays and Python scalars, and widens
floats to float64 (exact for every float type of 64 bits or fewer) before doing arithmetic. The
failure messages list the first mismatches with their index, the values, their bits in hex and
their distance in ulps, and say how many elements failed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu._args import choice_arg, format_arg
from fpemu._core.format import Format
from fpemu._core.registry import UnknownFormatError, get_format
from fpemu._text import report_table
from fpemu.testing import reference
from fpemu.testing._bits import as_array, bits, bits_hex, is_float, widen
from fpemu.testing._grid import code_text, position_parts, representable, ulp_distance
from fpemu.testing._tolerances import TOLERANCES, tolerances

__all__ = ["assert_bit_exact", "assert_close", "assert_representable"]

_SHOW = 10  # mismatches listed in a failure message


def _dtype_format(dtype: np.dtype) -> Format | None:
    """The registry format of a float dtype, or None."""
    if not is_float(dtype):
        return None
    try:
        return get_format(dtype)
    except (UnknownFormatError, TypeError):
        return None


# -- failure messages -------------------------------------------------------------------------------


def _index_text(flat: int, shape: tuple[int, ...]) -> str:
    if len(shape) == 0:
        return "()"
    index = np.unravel_index(flat, shape)
    return str(int(index[0])) if len(shape) == 1 else str(tuple(int(i) for i in index))


def _value_text(x: np.ndarray) -> str:
    """An element: floats as the exact value's shortest float64 repr, integers in hex."""
    if is_float(x.dtype):
        return repr(float(widen(x)))
    if x.dtype.kind == "b":
        return repr(bool(x))
    return hex(int(x))


def _number_text(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.3g}"


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
    floats = is_float(actual.dtype)
    codes = codes and fmt is not None
    headers = ["index", "actual", "expected"]
    if floats:
        headers += ["actual bits", "expected bits"]
    if errors:
        headers += ["abs err", "rel err"]
    if codes and fmt is not None:
        headers += [f"{fmt.name} codes" if floats else f"{fmt.name} values"]
    if fmt is not None:
        headers += [f"ulps ({fmt.name})"]
    rows = []
    flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
    for i in failed[:show]:
        a, e = flat_a[i], flat_e[i]
        row = [_index_text(int(i), actual.shape), _value_text(a), _value_text(e)]
        if floats:
            row += [bits_hex(a), bits_hex(e)]
        a64, e64 = float(widen(np.asarray(a))), float(widen(np.asarray(e)))
        if not floats and fmt is not None:  # integer arrays are codes of fmt
            a64, e64 = _decode(int(a), fmt), _decode(int(e), fmt)
        if errors:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                abs_err = abs(a64 - e64)
                rel_err = abs_err / abs(e64) if e64 != 0 else (0.0 if abs_err == 0 else math.inf)
            row += [_number_text(abs_err), _number_text(rel_err)]
        if codes and fmt is not None:
            row += [f"{code_text(a64, fmt)} / {code_text(e64, fmt)}" if floats else f"{a64!r} / {e64!r}"]
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
    return f"{prefix}{title}\nFirst mismatches:\n{report_table(rows, headers)}{more}"


def _check_shapes(actual: np.ndarray, expected: np.ndarray, err_msg: str) -> None:
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
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
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
    actual = as_array(actual, "actual")
    expected = as_array(expected, "expected")
    prefix = f"{err_msg}\n" if err_msg else ""
    show = _show_arg(show)
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    _check_shapes(actual, expected, err_msg)
    codes = fmt is not None  # with the dtype's own format, the codes column would repeat the bits
    fmt = format_arg(fmt) if fmt is not None else _dtype_format(actual.dtype)
    if actual.dtype != expected.dtype:  # check_dtype=False: compare exact values
        if not (is_float(actual.dtype) or is_float(expected.dtype)):
            same = actual == expected
        else:
            a64, e64 = widen(actual), widen(expected)
            same = bits(a64) == bits(e64)
            if not nan_payload:
                same |= np.isnan(a64) & np.isnan(e64)
            actual, expected = a64, e64
    elif is_float(actual.dtype):
        same = bits(actual) == bits(expected)
        if not nan_payload:
            same |= np.isnan(actual) & np.isnan(expected)
    else:
        same = actual == expected
    failed = np.flatnonzero(~np.asarray(same))
    if failed.size:
        title = f"Not bit-exact: {failed.size} of {actual.size} elements differ (dtype {actual.dtype}, shape {actual.shape})."
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
    whole, part, _ = position_parts(np.array(a), fmt)
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
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
    fmt = format_arg(fmt)
    show = _show_arg(show)
    x = as_array(x, "x")
    if x.dtype.kind == "b":
        raise TypeError("x must be a float or integer array, got dtype bool")
    v = widen(x)
    failed = np.flatnonzero(~representable(v, fmt, subnormals))
    if failed.size:
        flat_x, flat_v = x.reshape(-1), v.reshape(-1)
        headers = ["index", "value"] + (["bits"] if is_float(x.dtype) else []) + ["why"]
        rows = []
        for i in failed[:show]:
            row = [_index_text(int(i), x.shape), _value_text(flat_x[i])]
            if is_float(x.dtype):
                row.append(bits_hex(flat_x[i]))
            rows.append(row + [_why_not(float(flat_v[i]), fmt, subnormals)])
        more = f"\n  ... and {failed.size - show} more" if failed.size > show else ""
        prefix = f"{err_msg}\n" if err_msg else ""
        raise AssertionError(
            f"{prefix}{failed.size} of {x.size} elements are not values of {fmt.name}.\n"
            f"First offenders:\n{report_table(rows, headers)}{more}"
        )


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
    - ``like``: the ``(rtol, atol)`` another framework uses by default, from `tolerances`
      (``"torch"``, ``"numpy"``, ``"numpy.allclose"``, ``"jax"``), by that framework's rule for two
      dtypes: the loosest of ``actual``'s and ``expected``'s (torch and JAX; NumPy's defaults do not
      depend on dtypes), so a float32 result against a float64 reference (``check_dtype=False``)
      passes at float32's tolerance, as in ``torch.testing.assert_close``. torch has no tolerance
      for float8: like torch, ``like="torch"`` compares two float8 arrays exactly.

    With none of them given the default is ``ulps=1`` in ``fmt`` (or in ``expected``'s own
    format): two correctly rounded results of the same computation are at most one ulp apart.

    Args:
      actual: The array under test.
      expected: The expected array; same shape (no broadcasting) and, unless
        ``check_dtype=False``, same dtype.
      fmt: The format whose ulps ``ulps`` counts, and that mismatches are described in.
      ulps, rtol, atol: Tolerances (non-negative numbers), see above.
      like: A framework name, whose default ``(rtol, atol)`` for the two dtypes to use.
      equal_nan: Whether NaN matches NaN.
      check_dtype: Require equal dtypes.
      err_msg: Text to put first in the failure message.
      show: How many mismatches the message lists.

    Raises:
      AssertionError: listing the count and the first mismatches (index, values, bits, absolute
        and relative error, codes in ``fmt`` and ulp distance).
      ValueError: for a negative tolerance, ``like`` together with ``rtol``/``atol``, ``like="jax"``
        with a dtype JAX has no tolerance for (float6), or ``ulps`` without a format (an expected
        dtype outside the registry and no ``fmt``).

    Example:
      >>> import numpy as np
      >>> assert_close(np.float32([1.0, 2.0]), np.float32([1.125, 2.0]), fmt="e4m3fn")  # 1 ulp
      >>> # float32 against float64: torch's float32 tolerance, the looser one, applies
      >>> assert_close(np.float32([1.000002]), np.float64([1.0]), like="torch", check_dtype=False)
      >>> assert_close(np.float32([1.0, 2.0]), np.float32([1.0001, 2.0]), like="torch")
      Traceback (most recent call last):
      ...
      AssertionError: Not close (rtol=1.3e-06, atol=1e-05): 1 of 2 elements differ (dtype float32, shape (2,)).
      First mismatches:
        index  actual  expected           actual bits  expected bits  abs err  rel err  ulps (fp32)
        0      1.0     1.000100016593933  0x3f800000   0x3f800347     0.0001   0.0001   839
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
    actual = as_array(actual, "actual")
    expected = as_array(expected, "expected")
    show = _show_arg(show)
    prefix = f"{err_msg}\n" if err_msg else ""
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype mismatch: actual {actual.dtype}, expected {expected.dtype}")
    _check_shapes(actual, expected, err_msg)
    ulps, rtol, atol = _tolerance_arg(ulps, "ulps"), _tolerance_arg(rtol, "rtol"), _tolerance_arg(atol, "atol")
    if like is not None:
        like = choice_arg(like, tuple(TOLERANCES), "like")
        if rtol is not None or atol is not None:
            raise ValueError("pass like= or rtol=/atol=, not both")
        rtol, atol = tolerances(like, actual.dtype, expected.dtype)
    elif rtol is not None or atol is not None:
        rtol, atol = rtol or 0.0, atol or 0.0
    codes = fmt is not None
    if fmt is not None:
        fmt = format_arg(fmt)
    else:
        fmt = _dtype_format(expected.dtype)
    if ulps is None and rtol is None:
        ulps = 1.0
    if ulps is not None and fmt is None:
        raise ValueError(f"ulps needs a format: pass fmt= (dtype {expected.dtype} is not in the registry)")
    a64, e64 = widen(actual), widen(expected)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (a64 == e64) | (nan_a & nan_e & equal_nan)
        finite = np.isfinite(a64) & np.isfinite(e64)
        if ulps is not None:
            ok |= finite & (ulp_distance(a64, e64, fmt) <= ulps)
        if rtol is not None:
            assert atol is not None  # set together above
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
