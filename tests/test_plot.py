"""``fpemu plot`` and `fpemu.tools.plot`: every picture at small settings, opened and checked; errors."""

from __future__ import annotations

import dataclasses
import sys
import types

import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.tools import plot as _plot
from fpemu.tools.cli import main

pytest.importorskip("matplotlib")

from tests.test_bench_cli import assert_png_has_content


def run_cli(capsys, *argv: str) -> list[str]:
    """Run ``fpemu ARGV`` in-process; return the printed lines (the written paths)."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc_info:
        main(list(argv))
    assert exc_info.value.code == 2
    return capsys.readouterr().err


# -- the values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e4m3fnuz", "e3m2fn", "e2m1fn", "e8m0fnu", "bf16", "fp16"])
def test_positive_values_match_decode(name):
    fmt = fpemu.get_format(name)
    codes = np.arange(fmt.max_code + 1, dtype=fmt.code_dtype)
    decoded = np.asarray(fpemu.decode(jnp.asarray(codes), fmt), np.float64)
    expected = np.sort(decoded[decoded > 0])
    np.testing.assert_array_equal(_plot.positive_values(fmt), expected)


def test_positive_values_facts():
    assert _plot.positive_values("e2m1fn").tolist() == [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    e8m0 = _plot.positive_values("e8m0fnu")
    assert e8m0.size == 255 and e8m0[0] == 2.0**-127 and e8m0[-1] == 2.0**127
    fp16 = _plot.positive_values("fp16")
    assert fp16[0] == 2.0**-24 and fp16[-1] == 65504 and fp16.size == 0x7BFF
    with pytest.raises(ValueError, match="fp32 has 2,139,095,039 positive finite values"):
        _plot.positive_values("fp32")


def test_plot_values(tmp_path):
    path = _plot.plot_values(["e4m3fn", "e2m1fn", "fp16"], tmp_path / "sub" / "values.png")
    assert path == tmp_path / "sub" / "values.png"
    assert_png_has_content(path, colors=("C0", "C1"))  # normal values in C0, subnormals in C1


# -- rounding error, QSNR ---------------------------------------------------------------------------------


def test_plot_rounding_error(tmp_path):
    path = _plot.plot_rounding_error(["e4m3fn", "bf16", "fp64"], tmp_path / "err.png", samples=2000)
    assert_png_has_content(path, colors=("C0", "C1", "C2"), min_share=0.0003)  # the dashed eps/2 lines at least


def test_qsnr_table_matches_scaled_qsnr():
    table = _plot.qsnr_table(["mxfp8_e4m3", "nvfp4"], shape=(16, 256), seed=1)
    assert list(table) == list(_plot.QSNR_DISTRIBUTIONS)
    gaussian = np.random.default_rng(1).standard_normal((16, 256), dtype=np.float32)
    x = jnp.asarray(gaussian)
    direct = float(fpemu.scaled.qsnr(x, fpemu.scaled.quantize_dequantize(x, "nvfp4")))
    assert table["Gaussian"]["nvfp4"] == direct
    assert 28 < table["Gaussian"]["mxfp8_e4m3"] < 33  # docs/scaling.md: 30.65 dB on 256 x 4096 values


def test_plot_qsnr(tmp_path):
    path = _plot.plot_qsnr(["mxfp8_e4m3", "mxfp4"], tmp_path / "qsnr.png", shape=(16, 256))
    assert_png_has_content(path, colors=("C0", "C1"))  # Gaussian bars in C0, Student-t in C1


def test_unknown_recipe_lists_the_names():
    with pytest.raises(fpemu.scaled.UnknownRecipeError, match="mxfp4"):
        _plot.plot_qsnr(["mxfp9"], "unused.png")


# -- matmul error ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeMatmulError:
    recipe: str
    distribution: str
    size: int
    relative_error: float
    max_abs_error: float
    qsnr_db: float


@pytest.fixture
def fake_accuracy(monkeypatch):
    """A stand-in `fpemu.tools.accuracy` that records its calls (the interface, not the numbers, is tested)."""
    calls = []

    def matmul_accuracy(recipes, distributions, sizes, *, seed):
        calls.append(dict(recipes=recipes, distributions=distributions, sizes=sizes, seed=seed))
        error = {"fp32": 0.0, "bf16": 2.0**-9, "mxfp4": 0.15}
        return [
            FakeMatmulError(recipe=r, distribution=d, size=s, relative_error=error[r] * (s / 64) ** 0.5,
                            max_abs_error=0.0, qsnr_db=0.0)
            for r in recipes for d in distributions for s in sizes
        ]  # fmt: skip

    module = types.ModuleType("fpemu.tools.accuracy")
    module.MATMUL_RECIPES = ("fp32", "bf16", "mxfp4")
    module.DISTRIBUTIONS = ("gaussian", "heavy_tailed")
    module.MatmulError = FakeMatmulError
    module.matmul_accuracy = matmul_accuracy
    monkeypatch.setattr(_plot, "accuracy", module)  # the module plot draws its numbers from
    return calls


def test_plot_matmul_error_calls_accuracy(tmp_path, fake_accuracy):
    path = _plot.plot_matmul_error(None, [16, 64, 256], tmp_path / "mm.png", seed=3)
    assert fake_accuracy == [dict(recipes=["fp32", "bf16", "mxfp4"], distributions=["gaussian"],
                                  sizes=[16, 64, 256], seed=3)]  # fmt: skip
    assert_png_has_content(path, colors=("C1", "C2"), min_share=0.0005)  # fp32 (C0) is exact: a legend entry
    with pytest.raises(ValueError, match=r"unknown matmul recipe 'mxfp3'; did you mean 'mxfp4'") as exc_info:
        _plot.plot_matmul_error(["mxfp3"], [16], tmp_path / "no.png")
    assert str(exc_info.value).endswith("choose from: fp32, bf16, mxfp4")
    with pytest.raises(ValueError, match="choose from: gaussian, heavy_tailed"):
        _plot.plot_matmul_error(["bf16"], [16], tmp_path / "no.png", distribution="uniform")
    with pytest.raises(ValueError, match="sizes must be positive"):
        _plot.plot_matmul_error(["bf16"], [], tmp_path / "no.png")
    assert not (tmp_path / "no.png").exists()


def test_plot_matmul_error_with_the_accuracy_module(tmp_path):
    accuracy = pytest.importorskip("fpemu.tools.accuracy")
    assert {"fp32", "mxfp4"} <= set(accuracy.MATMUL_RECIPES) and "gaussian" in accuracy.DISTRIBUTIONS
    path = _plot.plot_matmul_error(["bf16", "mxfp4"], [16, 32], tmp_path / "mm.png")
    assert_png_has_content(path, colors=("C0", "C1"), min_share=0.0005)


# -- bench chart ------------------------------------------------------------------------------------------


def test_plot_bench_from_json_dicts(tmp_path):
    rows = [
        {"name": "reference/numpy_copy", "kind": "reference", "ns_per_element": 0.2, "ratio_to_fpemu": 0.2},
        {"name": "e4m3fn/fpemu-nearest_even", "kind": "fpemu", "ns_per_element": 1.0, "ratio_to_fpemu": 1.0},
        {"name": "e4m3fn/ml_dtypes_roundtrip", "kind": "peer", "ns_per_element": 12.0, "ratio_to_fpemu": 12.0},
    ]
    for metric in ("ns_per_element", "ratio_to_fpemu"):
        path = _plot.plot_bench(rows, tmp_path / f"{metric}.png", metric=metric)
        assert_png_has_content(path, colors=("C0", "C1", "C7"))
    with pytest.raises(ValueError, match="choose from: ns_per_element"):
        _plot.plot_bench(rows, tmp_path / "x.png", metric="speed")


# -- the command line ---------------------------------------------------------------------------------


def test_cli_plot_all(tmp_path, capsys):
    pytest.importorskip("fpemu.tools.accuracy")
    out = tmp_path / "plots"
    lines = run_cli(capsys, "plot", "all", "--formats", "e4m3fn,e2m1fn", "--recipes", "mxfp4",
                    "--sizes", "16,32", "--out", str(out))  # fmt: skip
    names = ["values.png", "rounding_error.png", "qsnr.png", "matmul_error.png"]
    assert lines == [str(out / name) for name in names]
    for line in lines:
        assert_png_has_content(line)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["values", "--formats", "e4m3f"], "did you mean 'e4m3fn'"),
        (["values", "--formats", "e4m3fn,,bf16"], "without empty items"),
        (["rounding-error", "--formats", "bogus"], "unknown format 'bogus'"),
        (["values", "--formats", "fp32"], "too many to draw"),
        (["qsnr", "--recipes", "mxfp9"], "mxfp8_e4m3"),  # the names of the recipes
        (["qsnr", "--formats", "e4m3fn"], "--formats is only used by the values and rounding-error plots"),
        (["values", "--sizes", "64"], "--sizes is only used by the matmul-error plot"),
        (["matmul-error", "--sizes", "0"], "sizes must be positive integers"),
        (["sideways"], "invalid choice: 'sideways'"),
    ],
)
def test_cli_usage_errors(capsys, argv, message):
    assert message in usage_error(capsys, "plot", *argv)


def test_cli_unknown_matmul_recipe_lists_the_recipes(capsys):
    accuracy = pytest.importorskip("fpemu.tools.accuracy")
    err = usage_error(capsys, "plot", "matmul-error", "--recipes", "bf17")
    assert "unknown matmul recipe 'bf17'" in err and ", ".join(accuracy.MATMUL_RECIPES) in err


# -- without matplotlib -------------------------------------------------------------------------------


def test_missing_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(_plot.MissingMatplotlibError, match=r"pip install 'fpemu\[plot\]'"):
        _plot.plot_values(["e2m1fn"], tmp_path / "values.png")
    assert isinstance(_plot.MissingMatplotlibError("x"), RuntimeError)
    assert main(["plot", "values", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fpemu plot: error:") and "pip install 'fpemu[plot]'" in err
    assert not (tmp_path / "values.png").exists()
