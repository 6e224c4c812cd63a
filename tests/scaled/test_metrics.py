"""QSNR and relative errors against float64 NumPy, and the QSNR table script (bench/qsnr_table.py)."""

import importlib.util
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled

RNG = np.random.default_rng(0)


def _load_qsnr_table():
    path = Path(__file__).resolve().parents[2] / "bench" / "qsnr_table.py"
    spec = importlib.util.spec_from_file_location("bench_qsnr_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


qsnr_table = _load_qsnr_table()


def test_qsnr_matches_float64():
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    y = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), "mxfp4"))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    expected = 10 * np.log10(np.sum(x64**2) / np.sum((x64 - y64) ** 2))
    assert abs(float(scaled.qsnr(x, y)) - expected) < 1e-3
    rows = np.asarray(scaled.qsnr(x, y, axis=-1))
    np.testing.assert_allclose(rows, 10 * np.log10(np.sum(x64**2, -1) / np.sum((x64 - y64) ** 2, -1)), atol=1e-3)


def test_qsnr_special_cases():
    x = jnp.array([1.0, 2.0])
    assert float(scaled.qsnr(x, x)) == np.inf
    assert float(scaled.qsnr(jnp.zeros(2), jnp.zeros(2))) == np.inf
    assert float(scaled.qsnr(jnp.zeros(2), x)) == -np.inf
    assert np.isnan(float(scaled.qsnr(x, jnp.array([1.0, np.nan]))))
    assert scaled.qsnr(x.astype(jnp.bfloat16), x).dtype == jnp.float32


@pytest.mark.parametrize("ord", [1, 2, np.inf])
def test_relative_error(ord):
    x = RNG.standard_normal(1000).astype(np.float32)
    y = x + RNG.standard_normal(1000).astype(np.float32) * 1e-2
    expected = np.linalg.norm((x - y).astype(np.float64), ord) / np.linalg.norm(x.astype(np.float64), ord)
    np.testing.assert_allclose(float(scaled.relative_error(x, y, ord=ord)), expected, rtol=1e-5)
    assert float(scaled.relative_error(x, x, ord=ord)) == 0
    assert float(scaled.relative_error(np.zeros(3, np.float32), np.ones(3, np.float32), ord=ord)) == np.inf
    with_nan = x.copy()
    with_nan[7] = np.nan
    assert np.isnan(float(scaled.relative_error(with_nan, x, ord=ord)))
    assert np.isnan(float(scaled.relative_error(x, with_nan, ord=ord)))


@pytest.mark.parametrize("axis", [(0, 2), [2, 0], (-1, 0), (1,), -2])
def test_metrics_over_several_axes_match_float64(axis):
    """A tuple or list of axes (negative ones counted from the end) reduces over each of them, as NumPy does."""
    x = np.random.default_rng(1).standard_normal((4, 6, 32)).astype(np.float32)  # this test's own data
    y = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), "mxfp6_e2m3", axis=-1))
    x64, y64, ax = x.astype(np.float64), y.astype(np.float64), tuple(axis) if isinstance(axis, list) else axis
    expected = 10 * np.log10(np.sum(x64**2, ax) / np.sum((x64 - y64) ** 2, ax))
    np.testing.assert_allclose(np.asarray(scaled.qsnr(x, y, axis=axis)), expected, atol=1e-3)
    d, a = np.abs(x64 - y64), np.abs(x64)
    for ord, norm in ((1, np.sum), (np.inf, np.max)):
        got = np.asarray(scaled.relative_error(x, y, ord=ord, axis=axis))
        np.testing.assert_allclose(got, norm(d, ax) / norm(a, ax), rtol=1e-5)


def test_relative_error_inf_of_an_empty_reduction_is_zero():
    """No element: no error (jnp.max's ``initial=0``), not -inf or NaN."""
    empty = np.zeros((3, 0), np.float32)
    assert np.asarray(scaled.relative_error(empty, empty, ord=np.inf, axis=1)).tolist() == [0.0, 0.0, 0.0]


def test_errors():
    with pytest.raises(ValueError, match=r"axis=2 is out of range for x of rank 2 \(valid: -2..1\)"):
        scaled.qsnr(jnp.ones((3, 4)), jnp.ones((3, 4)), axis=2)
    with pytest.raises(ValueError, match="axis must name each axis once"):
        scaled.relative_error(jnp.ones((3, 4)), jnp.ones((3, 4)), axis=(1, -1))
    with pytest.raises(TypeError, match="axis must be an int"):
        scaled.qsnr(jnp.ones(3), jnp.ones(3), axis=0.0)
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf, got True"):
        scaled.relative_error(jnp.ones(3), jnp.ones(3), ord=True)
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf, got '2'"):
        scaled.relative_error(jnp.ones(3), jnp.ones(3), ord="2")
    with pytest.raises(ValueError, match="same shape"):
        scaled.qsnr(jnp.ones(3), jnp.ones(4))
    with pytest.raises(TypeError, match="float array"):
        scaled.qsnr(jnp.ones(3, jnp.int32), jnp.ones(3))
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf"):
        scaled.relative_error(jnp.ones(3), jnp.ones(3), ord=3)


def test_qsnr_from_relative_error():
    assert scaled.qsnr_from_relative_error(0.01) == 40.0
    assert scaled.qsnr_from_relative_error(0.0) == math.inf
    assert scaled.qsnr_from_relative_error(math.inf) == -math.inf
    assert math.isnan(scaled.qsnr_from_relative_error(math.nan))
    with pytest.raises(ValueError, match="relative_error must be >= 0"):
        scaled.qsnr_from_relative_error(-0.5)


def test_qsnr_is_qsnr_from_relative_error_of_relative_error():
    x = RNG.standard_normal((64, 128)).astype(np.float32)
    y = np.asarray(scaled.quantize_dequantize(jnp.asarray(x), "mxfp6_e2m3"))
    from_rel = scaled.qsnr_from_relative_error(float(scaled.relative_error(x, y)))
    assert float(scaled.qsnr(x, y)) == pytest.approx(from_rel, abs=1e-3)


def test_qsnr_table_rows_cover_every_block_format():
    names = {r.name for _, _, r, _ in qsnr_table.rows()}
    assert set(scaled.block_formats()) <= names


def test_qsnr_table_header_is_the_one_in_the_docs():
    """docs/scaling.md holds the script's table: its header names the same columns."""
    header = [*qsnr_table.COLUMNS, *qsnr_table.inputs(shape=(1, 1))]
    line = qsnr_table.text_table([["-"] * len(header)], header, markdown=True).splitlines()[0]
    doc = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
    assert line in doc.read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_qsnr_table_runs():
    table = qsnr_table.table(shape=(4, 64))
    assert table.count("\n") == len(qsnr_table.rows()) + 1 + 3
