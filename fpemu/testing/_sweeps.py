"""Exhaustive sweeps: run a function and its reference on every code of a small format, or on every
float32, and report the mismatches."""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from fpemu._args import INPUT_DTYPES
from fpemu._core.format import Format, fits
from fpemu._core.registry import get_format
from fpemu._text import report_table
from fpemu.testing import reference
from fpemu.testing._bits import as_array, bits, bits_hex, code_hex, is_float, widen

__all__ = ["Mismatch", "SweepReport", "sweep"]

_MAX_CODE_BITS = 16  # formats swept code by code (decoded into the input dtype)
_FP32 = get_format("fp32")


@functools.lru_cache(maxsize=32)
def _code_values(fmt: Format) -> np.ndarray:
    """The exact oracle's float64 value of every code; NaN codes as a quiet NaN with the code's sign bit."""
    values = np.array([reference.decode_scalar(code, fmt) for code in range(fmt.num_codes)], np.float64)
    negative = (np.arange(fmt.num_codes) & fmt.sign_mask) != 0
    return np.where(np.isnan(values) & negative, np.copysign(np.nan, -1.0), values)


def _decode(codes: np.ndarray, fmt: Format) -> np.ndarray:
    """The float64 value of each code (NaN codes: a quiet NaN with the code's sign where it has one)."""
    return _code_values(fmt)[codes.astype(np.int64)]


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """One input on which the function and its reference disagree."""

    code: int  # the input's code (bit pattern) in the swept format
    input: float  # the input's value (as the input dtype holds it)
    actual: Any  # the function's result for it (a NumPy scalar)
    expected: Any  # the reference's result


@dataclasses.dataclass(frozen=True)
class SweepReport:
    """The result of `sweep`: how many inputs were checked, how many disagreed, and the first ones.

    ``str(report)`` is a readable summary; `raise_if_mismatch` turns mismatches into an
    AssertionError. ``stop`` is where to resume a partial sweep (``sweep(..., start=report.stop)``).
    """

    fmt: Format  # the swept format (fp32 for the float32 sweep)
    dtype: np.dtype  # the dtype of the inputs the functions received
    start: int  # first code swept
    stop: int  # one past the last code swept
    checked: int  # inputs checked
    mismatches: int  # inputs on which the results differ
    first: tuple[Mismatch, ...]  # the first mismatches, in code order
    elapsed: float  # seconds
    names: tuple[str, str] = ("fn", "reference_fn")

    @property
    def ok(self) -> bool:
        """Whether every checked input agreed."""
        return self.mismatches == 0

    @property
    def complete(self) -> bool:
        """Whether the sweep covered every code of the format."""
        return self.start == 0 and self.stop == self.fmt.num_codes

    def raise_if_mismatch(self) -> None:
        """Raise AssertionError with this report as the message if any input disagreed."""
        __tracebackhide__ = True  # pytest shows the caller's line, not this function's source
        if not self.ok:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        width = self.fmt.bits
        if self.complete:
            scope = f"all {self.checked:,} codes of {self.fmt.name}"
        else:
            scope = f"{self.fmt.name} codes [{code_hex(self.start, width)}, {code_hex(self.stop, width)}) ({self.checked:,} inputs)"
        rate = f", {self.checked / self.elapsed / 1e6:.3g} M/s" if self.elapsed > 0 else ""
        head = (
            f"sweep of {self.names[0]} against {self.names[1]} over {scope} as {self.dtype}: "
            f"{'no' if self.ok else f'{self.mismatches:,}'} mismatch{'' if self.mismatches == 1 else 'es'} "
            f"({self.elapsed:.3g} s{rate})"
        )
        lines = [head]
        if self.first:
            rows = []
            for m in self.first:
                actual, expected = np.asarray(m.actual), np.asarray(m.expected)
                rows.append([code_hex(m.code, width), repr(m.input), _show(actual), _show(expected)])
                rows[-1] += [_bits_text(actual), _bits_text(expected)]
            headers = ["code", "input", "actual", "expected", "actual bits", "expected bits"]
            title = "first mismatch" if len(self.first) == 1 else f"first {len(self.first)} mismatches"
            lines.append(f"{title}:\n" + report_table(rows, headers))
        if self.stop < self.fmt.num_codes:
            lines.append(f"resume with start={code_hex(self.stop, width)}")
        return "\n".join(lines)


def _show(x: np.ndarray) -> str:
    return repr(float(widen(x))) if is_float(x.dtype) else hex(int(x)) if x.dtype.kind in "iu" else repr(x.item())


def _bits_text(x: np.ndarray) -> str:
    return bits_hex(x) if is_float(x.dtype) else "-"


class _Progress:
    """A one-line progress bar on a text stream (standard error by default)."""

    def __init__(self, label: str, total: int, stream: TextIO):
        self.label, self.total, self.stream = label, total, stream
        self.begin = time.perf_counter()

    def update(self, done: int) -> None:
        fraction = done / self.total if self.total else 1.0
        elapsed = time.perf_counter() - self.begin
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        bar = "#" * int(30 * fraction)
        self.stream.write(
            f"\r{self.label} [{bar:<30}] {100 * fraction:5.1f}% {done:,}/{self.total:,} "
            f"{rate / 1e6:.3g} M/s ETA {eta:.0f} s"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _int_arg(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _result(value: Any, x: np.ndarray, name: str) -> np.ndarray:
    result = as_array(value, f"the result of {name}")
    if result.shape != x.shape:
        raise ValueError(f"{name} must return an array of its input's shape {x.shape}, got {result.shape}")
    return result


def sweep(
    fn: Callable[[np.ndarray], Any],
    reference_fn: Callable[[np.ndarray], Any],
    fmt: Any = "float32",
    *,
    dtype: Any = "float32",
    chunk: int = 1 << 22,
    start: int = 0,
    stop: int | None = None,
    progress: bool | TextIO = False,
    nan_payload: bool = False,
    show: int = 10,
) -> SweepReport:
    """Run ``fn`` and ``reference_fn`` on every code of a format and compare their results bit for bit.

    Special values first: the inputs include every NaN code (decoded to a quiet NaN of the code's
    sign), ±inf, -0 and every subnormal. Results are compared as `assert_bit_exact` does: any
    NaN equals any NaN unless ``nan_payload=True``; -0 differs from +0.

    For a format of at most 16 bits (``"bf16"``, ``"fp16"``, ``"e4m3fn"``, ...) the inputs are
    the values of its codes, decoded exactly into ``dtype``. For ``"float32"`` (the default) the
    inputs are all 2**32 float32 bit patterns, NaN payloads included, in chunks of ``chunk``; a long
    sweep can be split or resumed with ``start``/``stop`` (codes, i.e. bit patterns). Each chunk is
    a 1-D NumPy array; the functions may return NumPy or JAX arrays of its shape, of any one dtype
    (floats are compared as bits, integers as values).

    The sweep does not raise on mismatches: it returns a `SweepReport` (``print`` it, or call
    ``report.raise_if_mismatch()``).

    Args:
      fn: The function under test, called on each chunk of inputs.
      reference_fn: The reference, called on a copy of each chunk.
      fmt: ``"float32"``, or a format of at most 16 bits (anything `fpemu.get_format` accepts).
      dtype: The dtype the inputs of a small format are decoded into: float16, bfloat16,
        float32 (default) or float64, holding every value of ``fmt``. The float32 sweep is float32.
      chunk: Inputs per call.
      start: The first code to sweep.
      stop: One past the last code to sweep (default: all of them, ``2**bits``).
      progress: Print a progress bar to standard error (``True``) or to the given text stream.
      nan_payload: Compare NaNs bit for bit.
      show: How many mismatches the report keeps.

    Returns:
      A `SweepReport`.

    Raises:
      ValueError: for a format of 17 to 31 bits or wider than float32, a bad range or chunk, a
        ``dtype`` that cannot hold the format's values, or a result of the wrong shape.
      TypeError: if ``fn`` and ``reference_fn`` return different dtypes (bit comparison needs one).

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> from fpemu.testing import reference
      >>> def oracle(x):
      ...     return reference.round_array(x, "e4m3fn").astype(x.dtype)
      >>> report = sweep(lambda x: fpemu.quantize(x, "e4m3fn"), oracle, "bf16")
      >>> report.ok, report.checked
      (True, 65536)
      >>> wrong = sweep(jnp.abs, lambda x: x, "e2m1fn", show=3)  # -0 and the negatives differ
      >>> print(wrong)  # doctest: +ELLIPSIS
      sweep of abs against <lambda> over all 16 codes of e2m1fn as float32: 8 mismatches (...)
      first 3 mismatches:
        code  input  actual  expected  actual bits  expected bits
        0x8   -0.0   0.0     -0.0      0x00000000   0x80000000
        0x9   -0.5   0.5     -0.5      0x3f000000   0xbf000000
        0xa   -1.0   1.0     -1.0      0x3f800000   0xbf800000
    """
    if not callable(fn) or not callable(reference_fn):
        raise TypeError("fn and reference_fn must be callables taking one array")
    fmt = get_format(fmt)
    whole_float32 = fmt.encoding == _FP32.encoding
    if not whole_float32 and fmt.bits > _MAX_CODE_BITS:
        raise ValueError(
            f"fmt must be 'float32' or a format of at most {_MAX_CODE_BITS} bits, got {fmt.name} ({fmt.bits} bits)"
        )
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a float dtype, got {dtype!r}") from None
    if dtype.name not in INPUT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(INPUT_DTYPES)}, got {dtype.name}")
    if whole_float32:
        if dtype != np.float32:
            raise ValueError(f"the float32 sweep feeds float32 inputs; got dtype={dtype.name}")
    elif not fits(fmt, get_format(dtype)):
        raise ValueError(f"dtype {dtype.name} cannot hold every value of {fmt.name}; use float32 or float64")
    chunk = _int_arg(chunk, "chunk", 1, 1 << 30)
    start = _int_arg(start, "start", 0, fmt.num_codes)
    stop = fmt.num_codes if stop is None else _int_arg(stop, "stop", start, fmt.num_codes)
    show = _int_arg(show, "show", 0, 1 << 20)
    names = (_name(fn), _name(reference_fn))
    stream = sys.stderr if progress is True else (progress or None)
    bar = _Progress(f"sweep {fmt.name}", stop - start, stream) if stream is not None else None

    first: list[Mismatch] = []
    mismatches = 0
    begin = time.perf_counter()
    for low in range(start, stop, chunk):
        high = min(low + chunk, stop)
        codes = np.arange(low, high, dtype=np.uint64)
        if whole_float32:
            x = codes.astype(np.uint32).view(np.float32)
        else:
            x = _decode(codes, fmt).astype(dtype)
        actual = _result(fn(x), x, names[0])
        expected = _result(reference_fn(x.copy()), x, names[1])
        if actual.dtype != expected.dtype:
            raise TypeError(
                f"{names[0]} returned {actual.dtype} but {names[1]} returned {expected.dtype}; "
                "return one dtype (results are compared bit for bit)"
            )
        if is_float(actual.dtype):
            same = bits(actual) == bits(expected)
            if not nan_payload:
                same |= np.isnan(actual) & np.isnan(expected)
        else:
            same = actual == expected
        bad = np.flatnonzero(~same)
        mismatches += bad.size
        for i in bad[: max(show - len(first), 0)]:
            first.append(Mismatch(int(codes[i]), float(widen(x[i])), actual[i], expected[i]))
        if bar is not None:
            bar.update(high - start)
    if bar is not None:
        bar.close()
    return SweepReport(
        fmt=fmt,
        dtype=np.dtype(np.float32) if whole_float32 else dtype,
        start=start,
        stop=stop,
        checked=stop - start,
        mismatches=mismatches,
        first=tuple(first),
        elapsed=time.perf_counter() - begin,
        names=names,
    )
