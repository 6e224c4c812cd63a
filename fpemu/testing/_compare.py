"""`compare`: run a JAX function in several emulated precisions and measure its error against float64."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._core.format import Format, fits
from fpemu._core.modes import Rounding
from fpemu._core.registry import get_format
from fpemu._emulate.policy import Policy
from fpemu._emulate.transform import emulate
from fpemu._ops.quantize import quantize
from fpemu._text import report_table
from fpemu.testing._grid import ulp_distance

__all__ = ["CompareReport", "CompareRow", "compare"]

DEFAULT_PRECISIONS = ("fp32", "bf16", "fp16", "e5m2", "e4m3fn")
_FP32 = get_format("fp32")
_FP64 = get_format("fp64")


@dataclasses.dataclass(frozen=True)
class CompareRow:
    """The error of one precision against the reference, over every output element."""

    precision: str  # the format's name
    max_abs_error: float  # max |result - reference| over elements where both are finite
    max_rel_error: float  # max |result - reference| / |reference| (0/0 counts 0, x/0 counts inf)
    max_ulp_error: float  # max ulp_distance(result, reference, precision), in ulps of the precision
    nonfinite: int  # elements where the result is NaN/inf and the reference is not, or the reverse


@dataclasses.dataclass(frozen=True)
class CompareReport:
    """The table `compare` returns: ``str(report)`` prints it, ``report.rows`` holds the numbers."""

    rows: tuple[CompareRow, ...]
    reference: str  # the reference precision's name
    size: int  # output elements compared
    intermediates: bool  # whether every intermediate result was rounded too
    name: str = "fn"

    def row(self, precision: Any) -> CompareRow:
        """The row of a precision (any name, alias or dtype of its format)."""
        name = get_format(precision).name
        for row in self.rows:
            if row.precision == name:
                return row
        raise KeyError(f"no row for {name!r}; rows: {', '.join(r.precision for r in self.rows)}")

    def __str__(self) -> str:
        rounded = "inputs, every intermediate result and output" if self.intermediates else "inputs and output"
        head = (
            f"{self.name} against a {self.reference} reference, {self.size:,} output elements; "
            f"{rounded} rounded to each precision, arithmetic in float32"
        )
        headers = ["precision", "max abs err", "max rel err", "max ulp err", "nonfinite"]
        rows = [
            [
                r.precision,
                _number(r.max_abs_error),
                _number(r.max_rel_error),
                _number(r.max_ulp_error),
                str(r.nonfinite),
            ]
            for r in self.rows
        ]
        return f"{head}\n{report_table(rows, headers)}"

    def plot(self, path: Any) -> Any:
        """Save a bar chart of the three errors per precision (log scale) to ``path``; needs matplotlib.

        Raises:
          ImportError: if matplotlib is not installed (it is not a dependency of fpemu).
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("CompareReport.plot needs matplotlib: pip install matplotlib") from err
        figure = Figure(figsize=(4 * 3, 3.5), layout="constrained")
        FigureCanvasAgg(figure)
        names = [r.precision for r in self.rows]
        for ax, (title, field) in zip(
            figure.subplots(1, 3),
            (
                ("max abs error", "max_abs_error"),
                ("max rel error", "max_rel_error"),
                ("max ulp error", "max_ulp_error"),
            ),
        ):
            heights = [getattr(r, field) for r in self.rows]
            finite = [h if math.isfinite(h) else np.nan for h in heights]
            ax.bar(names, finite, color="tab:blue")
            ax.set_yscale("log", nonpositive="clip")
            ax.set_title(title)
            ax.tick_params(axis="x", labelrotation=45)
        figure.suptitle(f"{self.name} against a {self.reference} reference")
        figure.savefig(path)
        return path


def _number(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) and x != 0 else str(x if x != 0 else 0)


def _is_float(x: Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


# -- compare ----------------------------------------------------------------------------------------


def _errors(result: np.ndarray, truth: np.ndarray, fmt: Format) -> CompareRow:
    both_finite = np.isfinite(result) & np.isfinite(truth)
    agree = (np.isnan(result) & np.isnan(truth)) | (np.isinf(result) & (result == truth))
    y, r = result[both_finite], truth[both_finite]
    abs_err = np.abs(y - r)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.where(r != 0, abs_err / np.abs(r), np.where(abs_err == 0, 0.0, np.inf))
    ulp_err = np.asarray(ulp_distance(y, r, fmt))
    return CompareRow(
        precision=fmt.name,
        max_abs_error=float(abs_err.max(initial=0.0)),
        max_rel_error=float(rel_err.max(initial=0.0)),
        max_ulp_error=float(ulp_err.max(initial=0.0)),
        nonfinite=int(np.count_nonzero(~both_finite & ~agree)),
    )


def _float_leaves(out: Any, what: str) -> list[np.ndarray]:
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(out)]
    floats = [leaf for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)]
    if not floats:
        raise ValueError(f"{what} returned no floating-point arrays to compare")
    return floats


def _host(x: Any) -> Any:
    """A host (NumPy) copy of one input leaf, keeping its dtype (Python floats become float64);
    Python ints and bools stay as they are (weakly typed in JAX)."""
    if isinstance(x, (bool, int)) and not isinstance(x, float):
        return x
    return np.asarray(x)


def compare(
    fn: Callable,
    inputs: Any,
    precisions: Sequence[Any] = DEFAULT_PRECISIONS,
    reference: Any = "fp64",
    *,
    intermediates: bool = False,
    rounding: Rounding = "nearest_even",
    saturate: bool = False,
) -> CompareReport:
    """How far a JAX function drifts from its float64 result when run in lower precisions.

    For each precision the floating-point inputs are rounded to it with `fpemu.quantize` (once,
    from their own value, float64 included), ``fn`` runs on them in float32, and its
    floating-point outputs are rounded to the precision too. With ``intermediates=True`` ``fn``
    runs under ``fpemu.emulate(fn, Policy(default=precision, rounding=..., saturate=...))``: the
    result of every primitive operation is rounded as well, inside nested ``jit``, ``custom_jvp``,
    ``custom_vjp``, ``checkpoint`` and the bodies of ``scan``/``while``/``cond``, and Python
    scalar constants are rounded too (docs/emulate.md has the rules). An operation such as ``dot``
    or ``reduce_sum`` still accumulates in float32 and rounds its result once. For ``+ - * /`` and
    ``sqrt`` this is exactly arithmetic in the precision (float32 has more than twice the
    significant bits of fp16, bf16 and FP8, so the double rounding is harmless).

    The reference runs ``fn`` on the unrounded inputs with ``jax.enable_x64(True)``, so ``fn`` must
    be dtype-generic (no hard-coded ``float32``). Special values: elements where the result is
    NaN or ±inf and the reference is not (or the reverse) are counted in ``nonfinite`` and left
    out of the error maxima; equal infinities and NaN against NaN agree.

    Args:
      fn: A JAX function of positional array (or pytree) arguments.
      inputs: The arguments: a tuple or list of them, or a single array.
      precisions: Formats to run in (names, `Format`s or dtypes), each of at most float32's range
        and precision.
      reference: ``"fp64"`` (default) or ``"fp32"``.
      intermediates: Also round every intermediate result (see above).
      rounding: The rounding mode for every rounding (not ``"stochastic"``).
      saturate: Saturating conversion (overflow gives ±max instead of inf/NaN).

    Returns:
      A `CompareReport`: ``print`` it for the table, ``.rows`` for the numbers (`CompareRow`:
      ``max_abs_error``, ``max_rel_error``, ``max_ulp_error`` in ulps of the precision,
      ``nonfinite``), ``.plot(path)`` for a chart (needs matplotlib).

    Raises:
      ValueError: for a precision wider than float32, an unknown reference, stochastic rounding,
        or a reference run that does not compute in float64.
      TypeError: if ``fn`` is not callable.

    Example:
      >>> import numpy as np
      >>> def f(x):
      ...     return x * x - 1  # cancels near 1: relative errors grow there
      >>> report = compare(f, np.linspace(0.5, 1.5, 11), precisions=["fp32", "bf16", "e4m3fn"])
      >>> print(report)
      f against a fp64 reference, 11 output elements; inputs and output rounded to each precision, arithmetic in float32
        precision  max abs err  max rel err  max ulp err  nonfinite
        fp32       1.81e-07     3.01e-07     3.84         0
        bf16       0.00727      0.0184       3.96         0
        e4m3fn     0.128        0.278        2.92         0
      >>> report.row("bf16").max_abs_error
      0.007265624999999609
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable, got {type(fn).__name__}")
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    args = jax.tree.map(_host, args)
    formats = [get_format(p) for p in precisions]
    if not formats:
        raise ValueError("precisions must name at least one format")
    for fmt in formats:
        if not fits(fmt, _FP32):
            raise ValueError(f"precisions: {fmt.name} does not fit in float32, in which compare computes")
    ref_fmt = get_format(reference)
    if ref_fmt not in (_FP64, _FP32):
        raise ValueError(f"reference must be 'fp64' or 'fp32', got {reference!r}")
    if rounding == "stochastic":
        raise ValueError("rounding must be a deterministic mode, not 'stochastic'")
    name = getattr(fn, "__name__", None) or type(fn).__name__

    if ref_fmt is _FP64:
        with jax.enable_x64(True):
            out = fn(*jax.tree.map(lambda a: jnp.asarray(a, jnp.float64) if _is_float(a) else a, args))
            truth_leaves = _float_leaves(out, "fn")
            if any(leaf.dtype != np.float64 for leaf in truth_leaves):
                dtypes = sorted({leaf.dtype.name for leaf in truth_leaves})
                raise ValueError(
                    f"the float64 reference run of {name} returned {', '.join(dtypes)}: make fn dtype-generic "
                    "(no hard-coded float32) or pass reference='fp32'"
                )
    else:
        with jax.enable_x64(False):
            out = fn(*jax.tree.map(lambda a: jnp.asarray(a, jnp.float32) if _is_float(a) else a, args))
            truth_leaves = _float_leaves(out, "fn")
    truth = np.concatenate([leaf.astype(np.float64).reshape(-1) for leaf in truth_leaves])

    rows = []
    for fmt in formats:

        def round_input(a, fmt=fmt):
            if not _is_float(a):
                return a
            if a.dtype != np.float64:
                a = a.astype(np.float32)  # exact: float16/bfloat16 widen
            return quantize(a, fmt, rounding=rounding, saturate=saturate).astype(jnp.float32)

        def round_value(v, fmt=fmt):
            dtype = getattr(v, "dtype", None)
            if dtype is None or not jnp.issubdtype(dtype, jnp.floating) or not fits(fmt, get_format(dtype)):
                return v
            return quantize(v, fmt, rounding=rounding, saturate=saturate)

        with jax.enable_x64(False):
            rounded_args = jax.tree.map(round_input, args)
            if intermediates:
                out = emulate(fn, Policy(default=fmt, rounding=rounding, saturate=saturate))(*rounded_args)
            else:
                out = fn(*rounded_args)
            out = jax.tree.map(lambda v: round_value(jnp.asarray(v)), out)
            leaves = _float_leaves(out, "fn")
        if [leaf.shape for leaf in leaves] != [leaf.shape for leaf in truth_leaves]:
            raise ValueError(f"{name} returned different shapes in {fmt.name} and in the reference")
        result = np.concatenate([leaf.astype(np.float64).reshape(-1) for leaf in leaves])
        rows.append(_errors(result, truth, fmt))
    return CompareReport(
        rows=tuple(rows), reference=ref_fmt.name, size=truth.size, intermediates=intermediates, name=name
    )
