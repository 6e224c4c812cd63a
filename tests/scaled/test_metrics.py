"""QSNR and relative errors against float64 NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest

from fpemu import scaled

RNG = np.random.default_rng(0)


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


def test_errors():
    with pytest.raises(ValueError, match="same shape"):
        scaled.qsnr(jnp.ones(3), jnp.ones(4))
    with pytest.raises(TypeError, match="float array"):
        scaled.qsnr(jnp.ones(3, jnp.int32), jnp.ones(3))
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf"):
        scaled.relative_error(jnp.ones(3), jnp.ones(3), ord=3)


def test_qsnr_table_rows_cover_every_recipe():
    from fpemu.scaled import _qsnr_table

    names = {r.name for _, _, r, _ in _qsnr_table.rows()}
    assert set(scaled.recipes()) <= names


@pytest.mark.slow
def test_qsnr_table_runs():
    from fpemu.scaled import _qsnr_table

    table = _qsnr_table.table(shape=(4, 64))
    assert table.count("\n") == len(_qsnr_table.rows()) + 1 + 3
