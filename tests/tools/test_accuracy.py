"""The quantized-matmul accuracy benchmark (fpemu.tools.accuracy) and its data (fpemu.tools.data): bounds,
orderings, semantics, the distributions' documented properties, a user's .npy files, errors, table.

The formats' product itself, `fpemu.scaled.matmul`, is tested in tests/scaled/test_matmul.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

import fpemu
from fpemu import scaled
from fpemu.tools import data
from fpemu.tools.accuracy import (
    DISTRIBUTIONS,
    MATMUL_FORMATS,
    MatmulError,
    data_sizes,
    markdown_table,
    matmul_accuracy,
    matmul_error,
    matmul_inputs,
    reference_matmul,
)

N = 64  # every format, both distributions, at (64 x 64) @ (64 x 64): about 6 s, mostly compilation
U32 = 2.0**-24


@pytest.fixture(scope="module")
def errors() -> dict[tuple[str, str], MatmulError]:
    return {(r.matmul_format, r.distribution): r for r in matmul_accuracy(sizes=(N,))}


# -- sanity bounds from the formats' precision -------------------------------------------------------
#
# With A_q = A + E_A and B_q = B + E_B, C_q - C = E_A B + A E_B + E_A E_B. For independent zero-mean
# random matrices, ||E_A B||_F ≈ ||E_A||_F ||B||_F / sqrt(n) and ||A B||_F ≈ ||A||_F ||B||_F / sqrt(n),
# so the product's relative error is about sqrt(rel_A**2 + rel_B**2) <= sqrt(2) * u_eff, where u_eff
# bounds the relative error of one operand element:
#
# - a float element of p significant bits rounded to nearest: 2**-p (elements that land in the
#   subnormal range have larger relative but negligible absolute errors);
# - the OCP "floor" scale rule maps a block's amax into [2**emax, 2**(emax+1)) and saturates the part
#   above the element max M, a relative error up to (2**(emax+1) - M) / 2**(emax+1): 1/8 for E4M3
#   (448 of 512), E5M2 (57344 of 65536) and E3M2 (28 of 32), 1/16 for E2M3 (7.5 of 8), 1/4 for E2M1
#   (6 of 8);
# - NVFP4 maps each block amax to 6 up to the E4M3 rounding of the block scale (a saturation of at
#   most 2**-4), so its E2M1 elements keep 2**-2;
# - MXINT8 is 8-bit fixed point under the block scale 2**k <= amax: an absolute error of at most
#   2**-7 * amax, and amax / rms of a block of 32 is at most sqrt(32).
#
# The bound is 3 * sqrt(2) * u_eff: a factor 3 over the estimate (the RMS error of round-to-nearest is
# about u / sqrt(3), well below the per-element maximum u, so the margin covers the sampling spread
# at n = 64). fp32 has no operand rounding: its error is float32 accumulation, at most
# gamma_(n+1) |A||B| per element (one rounding per product and per addition), and for random signs
# || |A||B| ||_F is about sqrt(n) ||A B||_F: rel < (n + 1) * 2**-24 * sqrt(n), with the same factor 3.
def _unit_roundoff(fmt) -> float:
    return 2.0 ** -(fmt.mantissa_bits + 1)


def _floor_rule_clip(fmt) -> float:
    """The relative saturation of the OCP floor rule: the amax lands in [2**emax, 2**(emax + 1)) and
    the part above the element max is clipped."""
    top = 2.0 ** (math.floor(math.log2(fmt.max)) + 1)
    return (top - fmt.max) / top


def _u_eff(matmul_format: str) -> float:
    if matmul_format in ("bf16", "fp16"):
        return _unit_roundoff(fpemu.get_format(matmul_format))
    r = scaled.get_block_format(matmul_format)
    if matmul_format == "mxint8":  # fixed point: 2**-(m) * amax absolute, amax / rms <= sqrt(block size)
        return 2.0**-r.element.mantissa_bits * math.sqrt(r.block_size)
    u = _unit_roundoff(r.element)
    return max(u, _floor_rule_clip(r.element)) if r.scale_rule == "ocp" else u


U_EFF = {matmul_format: _u_eff(matmul_format) for matmul_format in MATMUL_FORMATS if matmul_format != "fp32"}


def bound(matmul_format: str) -> float:
    if matmul_format == "fp32":
        return 3 * (N + 1) * U32 * math.sqrt(N)
    return 3 * math.sqrt(2) * U_EFF[matmul_format]


def test_every_block_format_has_a_bound():
    assert set(U_EFF) | {"fp32"} == set(MATMUL_FORMATS)


@pytest.mark.long
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("matmul_format", MATMUL_FORMATS)
def test_error_within_precision_bound(errors, matmul_format, distribution):
    e = errors[matmul_format, distribution]
    assert (e.matmul_format, e.distribution, e.size) == (matmul_format, distribution, N)
    for value in (e.relative_error, e.max_abs_error, e.qsnr_db):
        assert isinstance(value, float) and math.isfinite(value)
    assert 0 < e.relative_error < bound(matmul_format)
    assert 0 < e.max_abs_error < 1
    assert e.qsnr_db == pytest.approx(-20 * math.log10(e.relative_error))


# -- orderings that follow from the formats ----------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_error_ordering(errors, distribution):
    rel = {r: errors[r, distribution].relative_error for r in MATMUL_FORMATS}
    # Each step loses at least one significand bit (u doubles or more) at an unchanged range:
    # fp32 (no operand rounding) < fp16 (11 bits) < bf16 (8) < fp8_e4m3 (4) < fp8_e5m2 (3).
    assert rel["fp32"] < rel["fp16"] < rel["bf16"] < rel["fp8_e4m3"] < rel["fp8_e5m2"]
    # Block formats: 8-bit fixed point < 4-bit significands < 3-bit < 2-bit (E2M1).
    assert rel["mxint8"] < rel["mxfp8_e4m3"] < rel["mxfp8_e5m2"] < rel["mxfp4"]
    assert rel["mxfp6_e2m3"] < rel["mxfp6_e3m2"] < rel["mxfp4"]
    assert rel["nvfp4"] > rel["mxfp8_e4m3"]


# -- semantics ---------------------------------------------------------------------------------------


def test_reference_is_float64():
    # 1 + 2**-24 is a float32 tie that rounds back to 1, so a sequential float32 sum of
    # [1, 2**-24, 2**-24] gives 1; the exact sum 1 + 2**-23 is what a float64 reference returns.
    a = np.array([[1.0, 2.0**-24, 2.0**-24]], np.float32)
    b = np.ones((3, 1), np.float32)
    ref = reference_matmul(a, b)
    assert ref.dtype == np.float64 and ref.tolist() == [[1 + 2.0**-23]]
    c = fpemu.matmul(a, b, accumulate_every=1)  # float32, one addition at a time
    assert c.tolist() == [[1.0]]
    e = MatmulError.from_product(c, ref, matmul_format="fp32", distribution="gaussian", size=3)
    assert e.relative_error == e.max_abs_error == 2.0**-23 / (1 + 2.0**-23)
    assert e.qsnr_db == pytest.approx(20 * math.log10(2.0**23 + 1))


def test_matmul_error_uses_the_float64_reference_of_matmul_inputs():
    a, b = matmul_inputs("gaussian", 32, seed=3)
    c = scaled.matmul(a, b, "fp32")
    expected = MatmulError.from_product(
        c, reference_matmul(a, b), matmul_format="fp32", distribution="gaussian", size=32
    )
    assert matmul_error("fp32", "gaussian", 32, seed=3) == expected
    assert expected.relative_error > 0  # float32 accumulation is measured, not compared with itself


def test_nonfinite_products_are_reported_as_infinite():
    a = np.full((2, 2), 1e5, np.float32)  # beyond float16's max 65504: the fp16 operand is inf
    b = np.eye(2, dtype=np.float32)
    c = scaled.matmul(a, b, "fp16")
    e = MatmulError.from_product(c, reference_matmul(a, b), matmul_format="fp16", distribution="gaussian", size=2)
    assert (e.relative_error, e.max_abs_error, e.qsnr_db) == (math.inf, math.inf, -math.inf)
    nan = np.array([[np.nan, 1.0]], np.float32)
    e = MatmulError.from_product(nan, np.ones((1, 2)), matmul_format="fp16", distribution="gaussian", size=2)
    assert (e.relative_error, e.qsnr_db) == (math.inf, -math.inf)


def test_from_product_checks():
    ok = MatmulError.from_product(np.zeros((2, 2), np.float32), np.zeros((2, 2)), matmul_format="fp32",
                                  distribution="gaussian", size=2)  # fmt: skip
    assert (ok.relative_error, ok.max_abs_error, ok.qsnr_db) == (0.0, 0.0, math.inf)
    with pytest.raises(ValueError, match="same shape"):
        MatmulError.from_product(
            np.zeros((2, 2)), np.zeros((2, 3)), matmul_format="fp32", distribution="gaussian", size=2
        )
    with pytest.raises(TypeError, match="float64"):
        MatmulError.from_product(
            np.zeros(2), np.zeros(2, np.float32), matmul_format="fp32", distribution="gaussian", size=2
        )


def test_inputs():
    a, b = matmul_inputs("gaussian", N)
    assert a.shape == b.shape == (N, N) and a.dtype == b.dtype == np.float32
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(matmul_inputs("gaussian", N)[0], a)  # deterministic
    assert not np.array_equal(matmul_inputs("gaussian", N, seed=1)[0], a)
    t, _ = matmul_inputs("heavy_tailed", N)
    # P(|x| > 6) is 2e-9 for a standard normal and about 0.008 for Student's t with 3 degrees of
    # freedom: about 33 of 4096 draws.
    assert np.sum(np.abs(a) > 6) == 0
    assert np.sum(np.abs(t) > 6) > 10


def test_matmul_accuracy_order_and_shared_reference():
    lines: list[str] = []
    rows = matmul_accuracy(["bf16", "fp32"], "gaussian", (32, 16), progress=lines.append)
    assert [(r.matmul_format, r.distribution, r.size) for r in rows] == [
        ("bf16", "gaussian", 32), ("bf16", "gaussian", 16), ("fp32", "gaussian", 32), ("fp32", "gaussian", 16),
    ]  # fmt: skip
    assert sum("reference" in line for line in lines) == 2  # once per (distribution, size)
    assert len(lines) == 2 + 4
    assert rows[0] == matmul_error("bf16", "gaussian", 32)


# -- the distributions (fpemu.tools.data) -------------------------------------------------------------


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32)


def _column_rms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(np.square(x, dtype=np.float64), axis=0))


def _excess_kurtosis(x: np.ndarray) -> float:
    x = x.astype(np.float64).ravel()
    d = x - x.mean()
    return float(np.mean(d**4) / np.mean(d**2) ** 2 - 3)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_distributions_are_deterministic(distribution):
    first = data.sample(distribution, (64, 256), np.random.default_rng(7))
    again = data.sample(distribution, (64, 256), np.random.default_rng(7))
    assert first.dtype == np.float32 and np.isfinite(first).all()
    np.testing.assert_array_equal(_bits(first), _bits(again))
    assert not np.array_equal(first, data.sample(distribution, (64, 256), np.random.default_rng(8)))
    a, b = matmul_inputs(distribution, 64, seed=5, outer=16)
    assert a.shape == (16, 64) and b.shape == (64, 16)
    np.testing.assert_array_equal(_bits(a), _bits(matmul_inputs(distribution, 64, seed=5, outer=16)[0]))
    # Documented seeding: [seed, distribution index, K] when square, with M = N appended otherwise.
    rng = np.random.default_rng([5, DISTRIBUTIONS.index(distribution), 64, 16])
    expected = data.matmul_operands(distribution, 16, 64, 16, rng)
    np.testing.assert_array_equal(_bits(b), _bits(expected[1]))


def test_student_t_tails_are_heavier_than_gaussian():
    """Student's t with 3 degrees of freedom has an infinite fourth moment; a normal sample's excess kurtosis is
    0 with a standard error of sqrt(24 / n) = 0.01 at n = 2**18."""
    shape = (512, 512)
    gaussian = data.sample("gaussian", shape, np.random.default_rng(0))
    student = data.sample("heavy_tailed", shape, np.random.default_rng(0))
    assert abs(_excess_kurtosis(gaussian)) < 0.1
    assert _excess_kurtosis(student) > 10
    assert abs(float(np.mean(gaussian))) < 0.01 and abs(float(np.std(gaussian)) - 1) < 0.01
    # P(|x| > 6): 2e-9 for a normal value, 0.0082 for Student's t (df = 3): about 2150 of 2**18.
    assert np.sum(np.abs(gaussian) > 6) == 0
    assert 1800 < np.sum(np.abs(student) > 6) < 2500
    assert data.STUDENT_T_DF == 3


@pytest.mark.parametrize(("channels", "outliers"), [(64, 1), (256, 2), (1024, 8)])
def test_outlier_channels_have_the_documented_magnitudes(channels, outliers):
    x = data.sample("outlier_channels", (4096, channels), np.random.default_rng(3))
    rms = _column_rms(x)
    loud = np.flatnonzero(rms > 5)
    assert len(loud) == outliers == max(1, round(channels / data.OUTLIER_EVERY))
    quiet = np.delete(rms, loud)
    assert np.all(np.abs(quiet - 1) < 0.06)  # standard normal columns of 4096 values
    ratio = rms[loud] / np.median(quiet)
    assert np.all((ratio > 10 * 0.94) & (ratio < 100 * 1.06)), ratio  # scales in [10, 100], up to sampling
    index, scale = data.outlier_channels(channels, np.random.default_rng(3))  # drawn first from the generator
    np.testing.assert_array_equal(index, loud)
    np.testing.assert_allclose(ratio, scale, rtol=0.06)


def test_outlier_channels_in_a_matmul_are_the_activations_channels():
    a, b = matmul_inputs("outlier_channels", 512, outer=256)
    loud = np.flatnonzero(_column_rms(a) > 5)  # channels along K, the contraction dimension
    assert len(loud) == 4
    assert np.all(_column_rms(a.T) < 100)  # no outlier rows (tokens)
    assert np.all(np.abs(_column_rms(b.T) - 1) < 0.15) and abs(_excess_kurtosis(b)) < 0.2  # Gaussian weights


def test_unknown_distribution_in_data():
    with pytest.raises(ValueError, match=r"unknown distribution 'outliers'; did you mean 'outlier_channels'"):
        data.sample("outliers", (2, 2), np.random.default_rng(0))


# -- a user's own data (.npy) ------------------------------------------------------------------------


@pytest.fixture
def npy_pair(tmp_path):
    rng = np.random.default_rng(11)
    lhs = rng.standard_normal((2, 12, 96), dtype=np.float32)  # batch x sequence x hidden: flattened to 24 x 96
    rhs = rng.standard_normal((96, 20))  # float64: rounded once to float32
    np.save(tmp_path / "act.npy", lhs)
    np.save(tmp_path / "w.npy", rhs)
    return tmp_path / "act.npy", tmp_path / "w.npy", lhs, rhs


@pytest.mark.long
def test_npy_round_trip(npy_pair):
    lhs_path, rhs_path, lhs, rhs = npy_pair
    d = data.load_matmul_data(lhs_path, rhs_path)
    assert d.name == "act.npy @ w.npy" and d.k == 96
    np.testing.assert_array_equal(_bits(d.lhs), _bits(lhs.reshape(24, 96)))
    np.testing.assert_array_equal(_bits(d.rhs), _bits(rhs.astype(np.float32)))
    assert data_sizes(d, (16, 64, 256)) == (16, 64, 96)
    rows = matmul_accuracy(["mxfp4"], (), (16, 256), data=d)  # 256 > K: K itself
    assert [(r.matmul_format, r.distribution, r.size, r.m, r.n) for r in rows] == [
        ("mxfp4", "act.npy @ w.npy", k, 24, 20) for k in (16, 96)
    ]
    for row in rows:  # the prefix of the contraction, against its own float64 reference
        a, b = d.lhs[:, : row.size], d.rhs[: row.size]
        c = scaled.matmul(a, b, row.matmul_format)
        assert row == MatmulError.from_product(c, reference_matmul(a, b), matmul_format=row.matmul_format,
                                               distribution=d.name, size=row.size)  # fmt: skip


@pytest.mark.long
def test_data_beside_distributions(npy_pair):
    d = data.load_matmul_data(*npy_pair[:2], name="mine")
    rows = matmul_accuracy("fp16", "gaussian", (8,), data=d)
    assert [(r.distribution, r.size) for r in rows] == [("gaussian", 8), ("mine", 8), ("mine", 96)]
    with pytest.raises(ValueError, match="distinct"):
        matmul_accuracy("fp16", "gaussian", (8,), data=data.MatmulData(name="gaussian", lhs=d.lhs, rhs=d.rhs))
    with pytest.raises(TypeError, match="MatmulData"):
        matmul_accuracy("fp16", (), (8,), data=[(d.lhs, d.rhs)])


def test_bad_npy_files(tmp_path):
    def save(name, array):
        np.save(tmp_path / name, array)
        return tmp_path / name

    cases = [
        (save("nan.npy", np.array([[1.0, np.nan], [np.inf, 2.0]], np.float32)), "holds 2 NaN or infinite values"),
        (save("int.npy", np.ones((2, 2), np.int8)), "has dtype int8; expected float16, float32 or float64"),
        (save("empty.npy", np.zeros((0, 4), np.float32)), "is empty"),
        (tmp_path / "missing.npy", "is not a readable .npy array"),
    ]
    np.savez(tmp_path / "two.npz", a=np.ones(2), b=np.ones(2))
    cases.append((tmp_path / "two.npz", "not a .npy array"))
    for path, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            data.load_array(path)
        assert path.name in str(info.value)
    fp16 = save("half.npy", np.array([[0.1, 65504]], np.float16))
    np.testing.assert_array_equal(data.load_array(fp16), np.array([[0.1, 65504]], np.float16).astype(np.float32))


def test_operands_must_multiply():
    lhs, weight = np.ones((4, 8), np.float32), np.ones((3, 8), np.float32)  # a PyTorch Linear weight: out x in
    with pytest.raises(ValueError, match=r"do not multiply: lhs has K = 8 columns, rhs has 3 rows; .*transpose"):
        data.MatmulData(name="x", lhs=lhs, rhs=weight)
    with pytest.raises(ValueError, match="must be float32"):
        data.MatmulData(name="x", lhs=lhs.astype(np.float64), rhs=weight.T)
    with pytest.raises(ValueError, match="M x K"):
        data.MatmulData(name="x", lhs=np.ones(8, np.float32), rhs=weight.T)


def test_qsnr_agrees_with_scaled_qsnr():
    """`qsnr_db` is computed in float64 (qsnr_from_relative_error); fpemu.scaled.qsnr, in float32, agrees."""
    a, b = matmul_inputs("heavy_tailed", 64)
    ref = reference_matmul(a, b)
    for matmul_format in ("mxfp4", "bf16"):
        e = matmul_error(matmul_format, "heavy_tailed", 64)
        assert e.qsnr_db == pytest.approx(float(scaled.qsnr(ref, scaled.matmul(a, b, matmul_format))), abs=0.01)


# -- errors ------------------------------------------------------------------------------------------


def test_unknown_block_format_lists_the_block_formats():
    for call in (
        lambda: matmul_error("mxfp3", "gaussian", N),
        lambda: matmul_accuracy(["bf16", "nope"], sizes=(N,)),
    ):
        with pytest.raises(ValueError, match="unknown matmul format") as info:
            call()
        assert all(name in str(info.value) for name in MATMUL_FORMATS)


def test_unknown_distribution_lists_the_distributions():
    for call in (
        lambda: matmul_error("bf16", "cauchy", N),
        lambda: matmul_inputs("normal", N),
        lambda: matmul_accuracy(distributions=["gaussian", "cauchy"], sizes=(N,)),
    ):
        with pytest.raises(ValueError, match="unknown distribution.*gaussian, heavy_tailed"):
            call()


@pytest.mark.parametrize("size", [0, -8, 2.5, True, "64"])
def test_bad_size(size):
    with pytest.raises(ValueError, match="size must be a positive int"):
        matmul_error("bf16", "gaussian", size)
    with pytest.raises(ValueError, match="size must be a positive int"):
        matmul_accuracy(sizes=(N, size))


def test_bad_seed():
    with pytest.raises(ValueError, match="seed"):
        matmul_inputs("gaussian", N, seed=-1)


def test_validation_before_computation():
    lines: list[str] = []
    with pytest.raises(ValueError):
        matmul_accuracy(["bf16"], ["gaussian"], (N, 0), progress=lines.append)
    assert lines == []


# -- the table ---------------------------------------------------------------------------------------


def _row(matmul_format, distribution, size, rel):
    return MatmulError(matmul_format=matmul_format, distribution=distribution, size=size, m=size, n=size, relative_error=rel,
                       max_abs_error=2 * rel, qsnr_db=-20 * math.log10(rel) if rel else math.inf)  # fmt: skip


def test_markdown_table():
    rows = [
        _row("mxfp4", "heavy_tailed", 256, 0.2),
        _row("fp32", "gaussian", 512, 4e-7),
        _row("mxfp4", "gaussian", 256, 0.1624),
        _row("fp32", "gaussian", 256, 2.87e-7),
        _row("fp16", "heavy_tailed", 256, math.inf),
    ]
    assert markdown_table(rows).splitlines() == [
        "| matmul format | gaussian 256 | gaussian 512 | heavy_tailed 256 |",
        "|---|---:|---:|---:|",
        "| `fp32` | 2.87e-07 | 4.00e-07 | - |",
        "| `fp16` | - | - | inf |",
        "| `mxfp4` | 1.62e-01 | - | 2.00e-01 |",
    ]
    assert markdown_table(rows, metric="qsnr_db").splitlines()[2:5] == [
        "| `fp32` | 130.8 | 128.0 | - |",
        "| `fp16` | - | - | -inf |",
        "| `mxfp4` | 15.8 | - | 14.0 |",
    ]
    assert "| `fp32` | 5.74e-07 |" in markdown_table(rows, metric="max_abs_error")


def test_markdown_table_of_a_run(errors):
    lines = markdown_table(list(errors.values())).splitlines()
    assert lines[0] == f"| matmul format | gaussian {N} | heavy_tailed {N} | outlier_channels {N} |"
    assert [line.split(" | ")[0] for line in lines[2:]] == [f"| `{r}`" for r in MATMUL_FORMATS]


def test_markdown_table_errors():
    with pytest.raises(ValueError, match="two rows"):
        markdown_table([_row("fp32", "gaussian", 8, 0.1)] * 2)
    with pytest.raises(ValueError, match="unknown metric.*relative_error, max_abs_error, qsnr_db"):
        markdown_table([], metric="snr")


# -- the bench script --------------------------------------------------------------------------------


def test_bench_script(capsys, tmp_path):
    path = Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"
    spec = importlib.util.spec_from_file_location("bench_accuracy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out_json = tmp_path / "rows.json"
    args = ["--sizes", "16", "--block-formats", "fp32,bf16", "--distributions", "gaussian", "--json", str(out_json)]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    assert "- versions: " in out and "'jax': " in out and "- git_commit: " in out and "- device: " in out
    assert "| matmul format | gaussian 16 |" in out and "| `bf16` |" in out
    payload = json.loads(out_json.read_text())
    assert [r["matmul_format"] for r in payload["rows"]] == ["fp32", "bf16"]


def test_the_accuracy_tables_old_name_of_the_matmul_formats_warns():
    import fpemu.tools.accuracy as accuracy

    with pytest.warns(DeprecationWarning, match="accuracy.MATMUL_RECIPES is deprecated.*MATMUL_FORMATS"):
        assert accuracy.MATMUL_RECIPES is accuracy.MATMUL_FORMATS


# -- names of earlier releases -----------------------------------------------------------------------


def test_the_old_recipe_names_warn_with_their_new_names_and_give_the_same_results():
    with pytest.warns(
        DeprecationWarning, match=r"accuracy\.matmul_error\(recipe=\.\.\.\) is deprecated.*use matmul_format="
    ):
        old = matmul_error(recipe="bf16", distribution="gaussian", size=16)
    new = matmul_error(matmul_format="bf16", distribution="gaussian", size=16)
    assert old == new
    with pytest.warns(
        DeprecationWarning,
        match=r"MatmulError\.recipe is deprecated.*use fpemu\.tools\.accuracy\.MatmulError\.matmul_format",
    ):
        assert new.recipe == new.matmul_format == "bf16"
    with pytest.warns(
        DeprecationWarning, match=r"matmul_accuracy\(recipes=\.\.\.\) is deprecated.*use matmul_formats="
    ):
        assert matmul_accuracy(recipes=["bf16"], distributions="gaussian", sizes=16) == [new]
    a, b = matmul_inputs("gaussian", 16)
    c, ref = scaled.matmul(a, b, "bf16"), reference_matmul(a, b)
    with pytest.warns(DeprecationWarning, match=r"MatmulError\.from_product\(recipe=\.\.\.\).*use matmul_format="):
        assert MatmulError.from_product(c, ref, recipe="bf16", distribution="gaussian", size=16) == new
    fields = dict(distribution="gaussian", size=8, m=8, n=8, relative_error=0.1, max_abs_error=0.2, qsnr_db=20.0)
    with pytest.warns(DeprecationWarning, match=r"accuracy\.MatmulError\(recipe=\.\.\.\).*use matmul_format="):
        assert MatmulError(recipe="fp16", **fields) == MatmulError(matmul_format="fp16", **fields)


def test_the_old_and_the_new_keyword_together_are_refused():
    with pytest.raises(TypeError, match=r"matmul_error: pass matmul_format= only \(recipe= is its deprecated name\)"):
        matmul_error(matmul_format="bf16", distribution="gaussian", size=16, recipe="bf16")
    with pytest.raises(TypeError, match=r"pass matmul_formats= only \(recipes= is its deprecated name\)"):
        matmul_accuracy(recipes=["bf16"], matmul_formats=["bf16"])
