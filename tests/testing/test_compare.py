"""compare: its numbers agree with hand computation on tiny examples, intermediate rounding happens
where documented, and the report reads well."""

from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu.testing import CompareReport, CompareRow, compare


def _mul(x, y):
    return x * y


def test_hand_computed_product():
    """1.1 * 3.0. bf16: 1.1 -> 141/128, the product 423/128 is a tie in [2, 4) (spacing 1/64) and
    goes to the even 212/64 = 3.3125. e4m3fn: 1.1 -> 1.125, 3.375 is a tie (spacing 1/4) -> 3.5.
    The float64 reference is 1.1 * 3.0 = 3.3000000000000003."""
    report = compare(_mul, (np.array([1.1]), np.array([3.0])), precisions=["fp32", "bf16", "e4m3fn"])
    truth = Fraction(1.1 * 3.0)
    f32 = Fraction(float(np.float32(1.1) * np.float32(3.0)))
    for name, result, spacing in (("fp32", f32, Fraction(1, 2**22)), ("bf16", Fraction(53, 16), Fraction(1, 64)),
                                  ("e4m3fn", Fraction(7, 2), Fraction(1, 4))):  # fmt: skip
        row = report.row(name)
        error = abs(result - truth)
        assert row.max_abs_error == float(error)  # exact: the float64 difference is exact (Sterbenz)
        assert row.max_rel_error == float(Fraction(row.max_abs_error) / truth)  # one correctly rounded division
        assert math.isclose(row.max_ulp_error, float(error / spacing), rel_tol=1e-9)
        assert row.nonfinite == 0
    assert report.row("bfloat16").max_ulp_error == pytest.approx(0.8)  # (3.3125 - 3.3) * 64
    assert report.size == 1 and report.reference == "fp64" and not report.intermediates


@pytest.mark.long
def test_maxima_over_elements_and_outputs():
    """Two outputs, several elements: each maximum is over all of them."""

    def two(x):
        return x, {"neg": -2 * x}

    x = np.array([1.0, 1.1, 1.3])
    row = compare(two, x, precisions=["e4m3fn"]).row("e4m3fn")
    # e4m3fn: 1.1 -> 1.125 (err 0.025), 1.3 -> 1.25 (err 0.05); -2x: -2.25 (0.05), -2.5 (0.1).
    assert row.max_abs_error == pytest.approx(0.1, abs=1e-15)
    assert row.max_rel_error == pytest.approx(0.05 / 1.3, rel=1e-12)
    assert row.max_ulp_error == pytest.approx(0.4, rel=1e-9)  # 0.05 / 0.125 and 0.1 / 0.25
    # The worst relative error, 0.05 / 1.3 = 0.1 / 2.6, first in the first output: x[2] = 1.3 -> 1.25.
    assert (row.worst_output, row.worst_index, row.worst_input) == (0, (2,), (1.3,))
    assert (row.worst_value, row.worst_reference) == (1.25, 1.3)
    report = compare(two, x, precisions=["e4m3fn"])
    assert report.outputs == 2 and "out0[2]" in str(report)


def _cube(x):
    return (x * x) * x


def test_intermediates_are_rounded():
    """x = 1.3 in e4m3fn: 1.25. Output rounding only: 1.25**3 = 1.953125 -> 2.0. Every result
    rounded: 1.25 * 1.25 = 1.5625 (a tie) -> 1.5, then 1.5 * 1.25 = 1.875."""
    x = np.array([1.3])
    truth = 1.3 * 1.3 * 1.3
    assert compare(_cube, x, ["e4m3fn"]).row("e4m3fn").max_abs_error == abs(2.0 - truth)
    assert compare(_cube, x, ["e4m3fn"], intermediates=True).row("e4m3fn").max_abs_error == abs(1.875 - truth)

    @jax.custom_jvp
    def cube_jvp(x):
        return (x * x) * x

    cube_jvp.defjvp(lambda primals, tangents: (cube_jvp(primals[0]), 3 * primals[0] ** 2 * tangents[0]))

    @jax.custom_vjp
    def cube_vjp(x):
        return (x * x) * x

    cube_vjp.defvjp(lambda x: (cube_vjp(x), x), lambda x, g: (3 * x**2 * g,))

    for nested in (jax.jit(_cube), cube_jvp, cube_vjp, jax.checkpoint(_cube), lambda v: jax.jit(jax.jit(_cube))(v)):
        report = compare(nested, x, ["e4m3fn"], intermediates=True)
        assert report.row("e4m3fn").max_abs_error == abs(1.875 - truth), nested
    assert "every intermediate result" in str(report)


def test_control_flow_bodies_are_rounded():
    """Inside a loop body every result is rounded too: 1.25 * 1.25 -> 1.5, 1.5 * 1.25 = 1.875
    (rounding only the loop's result would give 1.953125 -> 2.0)."""

    def loop_cube(x):
        return jax.lax.fori_loop(0, 1, lambda i, c: (c * c) * c, x)

    x = np.array([1.3])
    assert compare(loop_cube, x, ["e4m3fn"], intermediates=True).row("e4m3fn").max_abs_error == abs(
        1.875 - 1.3 * 1.3 * 1.3
    )


def test_constants_are_rounded():
    """With intermediates=True the constant 0.0635 is rounded to e4m3fn first (0.0625, spacing
    2**-7 there), and 1 + 0.0625 is a tie between 1 and 1.125 that goes to even: 1. Without, the
    sum 1.0635 is rounded once, above the tie: 1.125."""
    x = np.array([1.0])
    truth = 1.0 + 0.0635
    assert compare(lambda v: v + 0.0635, x, ["e4m3fn"]).row("e4m3fn").max_abs_error == abs(1.125 - truth)
    report = compare(lambda v: v + 0.0635, x, ["e4m3fn"], intermediates=True)
    assert report.row("e4m3fn").max_abs_error == abs(1.0 - truth)


def test_float64_inputs_are_rounded_once():
    """1 + 2**-8 + 2**-40 is just above the bf16 tie 1 + 2**-8: it rounds up to 1 + 2**-7. Rounding
    to float32 first would land on the tie and go down to 1 (double rounding)."""
    x = np.array([1 + 2**-8 + 2**-40])
    row = compare(lambda v: v, x, ["bf16"]).row("bf16")
    assert row.max_abs_error == 2**-8 - 2**-40


@pytest.mark.long
def test_special_values():
    x = np.array([500.0, np.inf, np.nan, 1.0])
    e4m3fn = compare(lambda v: v, x, ["e4m3fn", "e5m2"])
    assert e4m3fn.row("e4m3fn").nonfinite == 2  # 500 and inf become NaN; NaN against NaN agrees
    assert e4m3fn.row("e5m2").nonfinite == 0  # 500 -> 512 (finite), inf -> inf
    assert e4m3fn.row("e5m2").max_abs_error == 12.0
    saturated = compare(lambda v: v, x, ["e4m3fn"], saturate=True).row("e4m3fn")
    assert saturated.nonfinite == 1 and saturated.max_abs_error == 52.0  # inf -> 448 against inf
    zero_truth = compare(lambda v: v - 0.1, np.array([0.1]), ["bf16"]).row("bf16")
    assert zero_truth.max_rel_error == math.inf  # nonzero against a zero reference


def test_float32_reference_and_rounding_modes():
    report = compare(_mul, (np.float32([1.1]), np.float32([3.0])), ["fp32", "e4m3fn"], reference="fp32")
    assert report.row("fp32").max_abs_error == 0.0 and report.reference == "fp32"
    down = compare(lambda v: v, np.array([1.1]), ["e4m3fn"], rounding="toward_zero").row("e4m3fn")
    assert down.max_abs_error == pytest.approx(0.1, abs=1e-15)  # 1.1 -> 1.0


@pytest.mark.long
def test_inputs_forms():
    x = jnp.arange(3, dtype=jnp.float32)
    assert compare(lambda v: v * 2, x, ["bf16"]).size == 3  # a single array
    assert compare(lambda v, n: v * n, [x, 2], ["bf16"]).size == 3  # a list of arguments, an int kept
    tree = compare(lambda p: p["w"] * p["b"], {"w": np.ones(4), "b": np.float16(2)}, ["fp16"])
    assert tree.row("fp16").max_abs_error == 0.0


@pytest.mark.long
def test_report_text_and_rows():
    report = compare(jnp.sqrt, np.array([2.0, 3.0]), ["bf16", "e5m2"])
    text = str(report).splitlines()
    assert text[0] == (
        "sqrt against a fp64 reference, 2 output elements; inputs and output rounded to each precision, "
        "arithmetic in float32"
    )
    assert text[1].split() == ["precision", "max", "abs", "err", "max", "rel", "err", "max", "ulp", "err", "nonfinite",
                               "status", "worst", "at", "input", "result", "reference"]  # fmt: skip
    assert [line.split()[0] for line in text[2:4]] == ["bf16", "e5m2"]
    assert text[4].startswith("rel err: |error| / max(|reference|, 0.000244 * max|reference|)")
    assert isinstance(report, CompareReport) and all(isinstance(r, CompareRow) for r in report.rows)
    with pytest.raises(KeyError, match="no row for 'e4m3fn'; rows: bf16, e5m2"):
        report.row("e4m3fn")


def test_argument_errors():
    x = np.array([1.0])
    with pytest.raises(ValueError, match="fp64 does not fit in float32"):
        compare(_mul, (x, x), ["fp64"])
    with pytest.raises(ValueError, match="reference must be 'fp64' or 'fp32'"):
        compare(_mul, (x, x), reference="bf16")
    with pytest.raises(ValueError, match="deterministic"):
        compare(_mul, (x, x), rounding="stochastic")
    with pytest.raises(ValueError, match="at least one"):
        compare(_mul, (x, x), precisions=[])
    with pytest.raises(TypeError, match="fn must be a callable"):
        compare(None, x)
    with pytest.raises(ValueError, match="returned float32: make fn dtype-generic"):
        compare(lambda v: v.astype(jnp.float32), x)
    with pytest.raises(ValueError, match="no floating-point arrays"):
        compare(lambda v: jnp.int32(1), x)


@pytest.mark.long
def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = compare(_mul, (np.array([1.1]), np.array([3.0]))).plot(tmp_path / "errors.png")
    assert path.stat().st_size > 0


def test_plot_without_matplotlib_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib...` fail
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        compare(_mul, (np.array([1.1]), np.array([3.0])), ["bf16"]).plot("unused.png")


def _gelu_tanh(x):
    return 0.5 * x * (1 + jnp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


@pytest.mark.long
def test_gelu_tanh_fp32_is_not_the_worst_row():
    """The issue's example: 1 + tanh cancels for x << 0, so float32 arithmetic (every row's) leaves
    results of 0 where the reference is ~1e-7. Against the floor, that noise no longer makes fp32
    look worse than bf16, and the row says where its worst element is."""
    x = np.linspace(-8, 8, 512)
    report = compare(_gelu_tanh, x, ["fp32", "bf16", "fp16", "e4m3fn"])
    rows = {r.precision: r for r in report.rows}
    fp32 = rows.pop("fp32")
    assert all(fp32.max_rel_error < r.max_rel_error for r in rows.values())
    assert all(fp32.max_abs_error < r.max_abs_error for r in rows.values())
    assert fp32.max_rel_error < 2.0**-11  # cancellation noise of float32, measured against 2**-12 * scale
    assert not any(r.failed for r in report.rows)
    # The worst fp32 element, recomputed independently: NumPy float64 for the reference, JAX float32 for
    # the result (what compare runs), the element chosen by the documented relative error.
    truth = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    result = np.asarray(_gelu_tanh(jnp.asarray(x, jnp.float32))).astype(np.float64)
    floor = 2.0**-12 * np.abs(truth).max()
    rel = np.abs(result - truth) / np.maximum(np.abs(truth), floor)
    i = int(np.argmax(rel))
    assert fp32.worst_index == (i,) and fp32.worst_input == (x[i],) and fp32.worst_value == result[i]
    assert fp32.worst_reference == pytest.approx(truth[i], rel=1e-12)
    assert fp32.max_rel_error == pytest.approx(rel[i], rel=1e-9)
    assert abs(truth[i]) < floor  # a tiny output after cancellation
    assert f"[{i}]" in str(report).splitlines()[2]


@pytest.mark.long
def test_rel_floor():
    """x - 1 at x = 1 + 2**-14 and 3 in bf16: x rounds to 1, the result is 0 against 2**-14 (scale 2)."""
    x = np.array([1 + 2.0**-14, 3.0])

    def row(**kw):
        return compare(lambda v: v - 1, x, ["bf16"], **kw).row("bf16")

    assert row(rel_floor=0).max_rel_error == 1.0  # elementwise: the whole value is lost
    assert row().max_rel_error == 2.0**-14 / (2.0**-12 * 2)  # against the floor 2**-12 * scale
    assert row(rel_floor=1).max_rel_error == 2.0**-15  # normwise: max|error| / max|reference|
    worst = row()
    assert (worst.worst_index, worst.worst_input, worst.worst_value, worst.worst_reference) == (
        (0,), (1 + 2.0**-14,), 0.0, 2.0**-14,
    )  # fmt: skip
    with pytest.raises(ValueError, match="rel_floor must be a finite number >= 0"):
        row(rel_floor=-1)
    with pytest.raises(TypeError, match="rel_floor must be a number"):
        row(rel_floor="small")


@pytest.mark.long
def test_nonfinite_outputs_read_as_failed(tmp_path):
    """x * 1e5 overflows e5m2 (to inf) and e4m3fn (to NaN) everywhere: FAILED rows, no '0 error'."""
    x = np.linspace(1, 2, 16)
    report = compare(lambda v: v * 1e5, x, ["bf16", "e5m2", "e4m3fn"])
    assert not report.row("bf16").failed
    for name, value in (("e5m2", math.inf), ("e4m3fn", math.nan)):
        row = report.row(name)
        assert row.failed and row.nonfinite == 16
        assert all(math.isnan(e) for e in (row.max_abs_error, row.max_rel_error, row.max_ulp_error))
        assert row.worst_index == (0,) and row.worst_input == (1.0,) and row.worst_reference == 1e5
        assert row.worst_value == value or (math.isnan(value) and math.isnan(row.worst_value))
    lines = {line.split()[0]: line.split() for line in str(report).splitlines()[2:5]}
    assert lines["e5m2"][1:6] == ["-", "-", "-", "16", "FAILED"] and lines["bf16"][5] == "ok"
    # Partly finite: the finite elements' errors are shown, and the row still fails.
    partly = compare(lambda v: v * 100, np.array([1.0, 1000.0]), ["e4m3fn"]).row("e4m3fn")
    assert partly.failed and partly.nonfinite == 1 and partly.max_abs_error == 4.0  # 100 -> 96
    assert partly.worst_index == (1,)
    if importlib.util.find_spec("matplotlib"):
        assert report.plot(tmp_path / "failed.png").stat().st_size > 0
