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
from fpemu.testing._bits import widen
from fpemu.testing._grid import spacing

__all__ = ["CompareReport", "CompareRow", "compare"]

DEFAULT_PRECISIONS = ("fp32", "bf16", "fp16", "e5m2", "e4m3fn")
_FP32 = get_format("fp32")
_FP64 = get_format("fp64")


@dataclasses.dataclass(frozen=True)
class CompareRow:
    """The error of one precision against the reference, over every output element, and where it is worst.

    The maxima are over the elements where result and reference are both finite (NaN if there are
    none); ``nonfinite`` counts the others that disagree, and any makes the row `failed`.
    """

    precision: str  # the format's name
    max_abs_error: float  # max |result - reference|
    max_rel_error: float  # max |result - reference| / max(|reference|, floor), floor = rel_floor * scale
    max_ulp_error: float  # max |result - reference| in ulps of the precision at the output scale
    nonfinite: int  # elements where the result is NaN/inf and the reference is not, or the reverse
    worst_output: int | None = None  # the output (position in jax.tree.leaves) of the worst element
    worst_index: tuple[int, ...] | None = None  # its index in that output
    worst_input: tuple[float, ...] = ()  # the inputs at that index (the float inputs of the output's shape)
    worst_value: float | None = None  # the result there
    worst_reference: float | None = None  # the reference there

    @property
    def failed(self) -> bool:
        """Whether some output is non-finite where the reference is finite (or the reverse)."""
        return self.nonfinite > 0


@dataclasses.dataclass(frozen=True)
class CompareReport:
    """The table `compare` returns: ``str(report)`` prints it, ``report.rows`` holds the numbers."""

    rows: tuple[CompareRow, ...]
    reference: str  # the reference precision's name
    size: int  # output elements compared
    intermediates: bool  # whether every intermediate result was rounded too
    name: str = "fn"
    rel_floor: float = 2.0**-12  # the relative error's floor, as a fraction of the output scale
    outputs: int = 1  # floating-point output arrays of fn

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
        headers = ["precision", "max abs err", "max rel err", "max ulp err", "nonfinite", "status", "worst at",
                   "input", "result", "reference"]  # fmt: skip
        many = self.outputs > 1
        rows = [
            [
                r.precision,
                _number(r.max_abs_error),
                _number(r.max_rel_error),
                _number(r.max_ulp_error),
                str(r.nonfinite),
                "FAILED" if r.failed else "ok",
                _where(r, many),
                ", ".join(_value(v) for v in r.worst_input) or "-",
                _value(r.worst_value),
                _value(r.worst_reference),
            ]
            for r in self.rows
        ]
        foot = (
            f"rel err: |error| / max(|reference|, {self.rel_floor:.3g} * max|reference|); "
            "ulp err: in ulps of the precision at max|reference|"
        )
        return f"{head}\n{report_table(rows, headers)}\n{foot}"

    def plot(self, path: Any) -> Any:
        """Save a bar chart of the absolute and relative errors per precision (log scale) to ``path``.

        Needs matplotlib. A failed precision (non-finite results where the reference is finite) is
        drawn as a red bar labelled FAILED, whatever its finite elements' errors. (The ulp errors, each
        in its own format's units, stay in the table: side by side they would rank fp32 with the
        narrow formats.)

        Raises:
          ImportError: if matplotlib is not installed (it is not a dependency of fpemu).
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("CompareReport.plot needs matplotlib: pip install matplotlib") from err
        figure = Figure(figsize=(4 * 2, 3.8), layout="constrained")
        FigureCanvasAgg(figure)
        names = [r.precision for r in self.rows]
        panels = (
            ("max abs error", "max_abs_error"),
            (f"max rel error (floor {self.rel_floor:.2g} x scale)", "max_rel_error"),
        )
        for ax, (title, field) in zip(figure.subplots(1, 2), panels):
            heights = [getattr(r, field) for r in self.rows]
            finite = [h if math.isfinite(h) and h > 0 else np.nan for h in heights]
            top = float(np.nanmax(finite)) if not np.all(np.isnan(finite)) else 1.0
            failed = [r.failed for r in self.rows]
            shown = [4 * top if bad else h for h, bad in zip(finite, failed)]  # failed: taller than any error
            ax.bar(names, shown, color=["tab:red" if bad else "tab:blue" for bad in failed])
            ax.set_yscale("log", nonpositive="clip")
            low = float(np.nanmin(finite)) if not np.all(np.isnan(finite)) else top
            ax.set_ylim(low / 4, 20 * top)
            for i, bad in enumerate(failed):
                if bad:  # the label in the middle of the (logarithmic) bar
                    label = f"FAILED\n{self.rows[i].nonfinite}\nnon-finite"
                    middle = math.sqrt(low / 4 * 4 * top)
                    ax.text(i, middle, label, ha="center", va="center", color="white", fontsize=8, weight="bold")
            ax.set_title(title, fontsize=10)
            ax.tick_params(axis="x", labelrotation=45)
        figure.suptitle(f"{self.name} against a {self.reference} reference")
        figure.savefig(path)
        return path


def _number(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:.3g}" if math.isfinite(x) and x != 0 else str(x if x != 0 else 0)


def _value(x: float | None) -> str:
    return "-" if x is None else f"{x:.8g}"


def _where(row: CompareRow, many_outputs: bool) -> str:
    if row.worst_index is None:
        return "-"
    index = f"[{', '.join(map(str, row.worst_index))}]"
    return f"out{row.worst_output}{index}" if many_outputs else index


def _is_float(x: Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


# -- compare ----------------------------------------------------------------------------------------


def _errors(
    results: list[np.ndarray], truths: list[np.ndarray], fmt: Format, rel_floor: float, inputs: list[np.ndarray]
) -> CompareRow:
    """One row: the errors of each output against its reference, and the worst element's place."""
    maxima = {"abs": math.nan, "rel": math.nan, "ulp": math.nan}
    nonfinite = 0
    worst: tuple[float, int, int] | None = None  # (rel error, output, flat index); first mismatch wins
    for k, (result, truth) in enumerate(zip(results, truths)):
        y, r = result.reshape(-1), truth.reshape(-1)
        both_finite = np.isfinite(y) & np.isfinite(r)
        agree = (np.isnan(y) & np.isnan(r)) | (np.isinf(y) & (y == r))
        mismatched = np.flatnonzero(~both_finite & ~agree)
        nonfinite += mismatched.size
        if mismatched.size and (worst is None or worst[0] != math.inf):
            worst = (math.inf, k, int(mismatched[0]))
        if not both_finite.any():
            continue
        scale = float(np.abs(r[both_finite]).max())
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are infinite
            abs_err = np.where(both_finite, np.abs(y - r), 0.0)
        floor = rel_floor * scale
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_err = np.where(abs_err == 0, 0.0, abs_err / np.maximum(np.abs(r), floor))
        rel_err = np.where(both_finite, rel_err, -1.0)
        ulp_err = abs_err / spacing(scale, fmt)
        for name, err in (("abs", abs_err), ("rel", rel_err), ("ulp", ulp_err)):
            maxima[name] = float(np.fmax(maxima[name], np.max(err)))
        i = int(np.argmax(rel_err))
        if worst is None or (worst[0] != math.inf and rel_err[i] > worst[0]):
            worst = (float(rel_err[i]), k, i)
    row = CompareRow(fmt.name, maxima["abs"], maxima["rel"], maxima["ulp"], nonfinite)
    if worst is None:
        return row
    _, k, i = worst
    shape = truths[k].shape
    at = tuple(int(j) for j in np.unravel_index(i, shape)) if shape else ()
    return dataclasses.replace(
        row,
        worst_output=k,
        worst_index=at,
        worst_input=tuple(float(x.reshape(-1)[i]) for x in inputs if x.shape == shape),
        worst_value=float(results[k].reshape(-1)[i]),
        worst_reference=float(truths[k].reshape(-1)[i]),
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
    rel_floor: float = 2.0**-12,
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
    be dtype-generic (no hard-coded ``float32``). Special values first: elements where the result
    is NaN or ±inf and the reference is not (or the reverse) are counted in ``nonfinite``, make the
    row read FAILED (`CompareRow.failed`) and are left out of the error maxima (NaN, shown as ``-``,
    where no element is finite on both sides: never a zero error); equal infinities and NaN against
    NaN agree.

    The errors, per output array, over the elements finite on both sides (``scale`` is the
    largest ``|reference|`` of that output):

    - absolute: ``|result - reference|``;
    - relative: ``|result - reference| / max(|reference|, rel_floor * scale)``. The floor keeps
      cancellation noise out: every precision computes in float32, whose rounding leaves absolute
      errors of about ``2**-24 * scale`` that are 100% of an output near zero; against the floor
      (by default ``2**-12 * scale``) they read at most about ``2**-12``, less than the relative
      error of any precision narrower than float32. ``rel_floor=0`` gives the plain elementwise
      relative error (a nonzero error against a zero reference is inf), ``rel_floor=1`` the
      normwise one, ``max|error| / scale``;
    - in ulps of the precision at the output scale: ``|result - reference| / ulp(scale)``, where
      ``ulp(scale)`` is the precision's spacing at ``scale`` (about 0.5 when the rounding of the
      output dominates).

    Each row also says where its worst element is (`CompareRow.worst_output`, ``worst_index``,
    ``worst_input``, ``worst_value``, ``worst_reference``): the first non-finite mismatch of a
    failed row, else the element of the largest relative error.

    Args:
      fn: A JAX function of positional array (or pytree) arguments.
      inputs: The arguments: a tuple or list of them, or a single array.
      precisions: Formats to run in (names, `Format`s or dtypes), each of at most float32's range
        and precision.
      reference: ``"fp64"`` (default) or ``"fp32"``.
      intermediates: Also round every intermediate result (see above).
      rounding: The rounding mode for every rounding (not ``"stochastic"``).
      saturate: Saturating conversion (overflow gives ±max instead of inf/NaN).
      rel_floor: The relative error's floor, as a fraction of each output's scale (see above).

    Returns:
      A `CompareReport`: ``print`` it for the table, ``.rows`` for the numbers (`CompareRow`:
      ``max_abs_error``, ``max_rel_error``, ``max_ulp_error``, ``nonfinite``, ``failed`` and the
      worst element), ``.plot(path)`` for a chart (needs matplotlib).

    Raises:
      ValueError: for a precision wider than float32, an unknown reference, stochastic rounding,
        a negative or non-finite ``rel_floor``, or a reference run that does not compute in float64.
      TypeError: if ``fn`` is not callable.

    Example:
      >>> import numpy as np
      >>> def f(x):
      ...     return x * x - 1  # cancels near 1: relative errors grow there
      >>> report = compare(f, np.linspace(0.5, 1.5, 11), precisions=["fp32", "bf16", "e4m3fn"])
      >>> print(report)
      f against a fp64 reference, 11 output elements; inputs and output rounded to each precision, arithmetic in float32
        precision  max abs err  max rel err  max ulp err  nonfinite  status  worst at  input  result       reference
        fp32       1.81e-07     3.01e-07     1.52         0          ok      [4]       0.9    -0.19000006  -0.19
        bf16       0.00727      0.0184       0.93         0          ok      [6]       1.1    0.21386719   0.21
        e4m3fn     0.128        0.278        1.02         0          ok      [7]       1.2    0.5625       0.44
      rel err: |error| / max(|reference|, 0.000244 * max|reference|); ulp err: in ulps of the precision at max|reference|
      >>> row = report.row("e4m3fn")  # its worst element: x = 1.2 -> 1.25 in e4m3fn, 1.25**2 - 1 -> 0.5625
      >>> row.worst_index, round(row.worst_input[0], 12), row.worst_value, row.failed
      ((7,), 1.2, 0.5625, False)
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
    if isinstance(rel_floor, bool) or not isinstance(rel_floor, (int, float, np.integer, np.floating)):
        raise TypeError(f"rel_floor must be a number, got {type(rel_floor).__name__} {rel_floor!r}")
    if not 0 <= rel_floor < math.inf:
        raise ValueError(f"rel_floor must be a finite number >= 0, got {rel_floor!r}")
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
    truths = [leaf.astype(np.float64) for leaf in truth_leaves]
    # The float inputs, as float64 values, for the worst element's row (those of an output's shape).
    input_values = [widen(np.asarray(a)) for a in jax.tree.leaves(args) if _is_float(np.asarray(a))]

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
        results = [leaf.astype(np.float64) for leaf in leaves]
        rows.append(_errors(results, truths, fmt, float(rel_floor), input_values))
    return CompareReport(
        rows=tuple(rows),
        reference=ref_fmt.name,
        size=sum(t.size for t in truths),
        intermediates=intermediates,
        name=name,
        rel_floor=float(rel_floor),
        outputs=len(truths),
    )
