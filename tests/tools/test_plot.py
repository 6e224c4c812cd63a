"""``fpemu plot`` and `fpemu.tools.plot`: every picture at small settings, opened and checked, its CSV read back
and compared with the numbers computed directly; the options and their errors."""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
import types
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.tools import accuracy, data, rounding
from fpemu.tools import plot as _plot
from fpemu.tools.cli import main

pytest.importorskip("matplotlib")

from tests.tools.test_bench_cli import assert_png_has_content


def run_cli(capsys, *argv: str) -> list[str]:
    """Run ``fpemu ARGV`` in-process; return the printed lines (the written paths)."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc_info:
        main(list(argv))
    assert exc_info.value.code == 2
    return capsys.readouterr().err


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


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


@pytest.mark.long
def test_plot_values_and_its_csv(tmp_path):
    path = _plot.plot_values(["e4m3fn", "e2m1fn", "fp16"], tmp_path / "sub" / "values.png")
    assert path == tmp_path / "sub" / "values.png"
    assert_png_has_content(path, colors=("C0", "C1"))  # normal values in C0, subnormals in C1
    rows = read_csv(tmp_path / "sub" / "values.csv")
    for name in ("e4m3fn", "e2m1fn", "fp16"):
        fmt = fpemu.get_format(name)
        mine = [r for r in rows if r["format"] == name]
        values = np.array([float(r["value"]) for r in mine])
        np.testing.assert_array_equal(values, _plot.positive_values(name))
        assert [r["subnormal"] == "1" for r in mine] == (values < fmt.min_normal).tolist()
    assert len(rows) == 126 + 7 + 0x7BFF


def test_log2_ticks():
    assert [math.log2(t) for t in _plot.log2_ticks(2.0**-149, 2.0**127)] == [-128, -64, 0, 64]
    assert [math.log2(t) for t in _plot.log2_ticks(2.0**-9, 448)] == [-8, -4, 0, 4, 8]


# -- rounding error -----------------------------------------------------------------------------------


def test_rounding_error_table_facts():
    """Independent facts: S = 40 evenly spaced values put one exactly on e4m3fn's tie 1 + 1/16 of every normal
    binade ((2 + 0.5) / 40 = 1/16), which rounds to even (down): the largest relative error is (1/16) / (17/16)
    in every normal binade. Below the smallest subnormal 2**-9, toward_zero gives 0: relative error 1."""
    table = rounding.rounding_error_table(["e4m3fn"], modes=["nearest_even", "toward_zero"], samples_per_binade=40)
    fmt = fpemu.get_format("e4m3fn")
    nearest = [r for r in table if r.mode == "nearest_even"]
    assert [r.exponent for r in nearest] == list(range(-10, 9))  # from below 2**-9 to max 448 = 1.75 * 2**8
    assert nearest[-1].high == 448 and all(r.high == 2.0 ** (r.exponent + 1) for r in nearest[:-1])
    normal = [r for r in nearest if 2.0**r.exponent >= fmt.min_normal and r.high == 2.0 ** (r.exponent + 1)]
    assert len(normal) == 14  # 2**-6 to 2**8, without the top binade [256, 448)
    assert {r.max_relative_error for r in normal} == {0.0625 / 1.0625}
    assert all(r.mean_relative_error < r.max_relative_error < r.unit_roundoff == 2**-4 for r in normal)
    zero = [r for r in table if r.mode == "toward_zero"]
    assert zero[0].exponent == -10 and zero[0].max_relative_error == zero[0].mean_relative_error == 1.0
    assert all(2**-4 < r.max_relative_error < 2**-3 for r in zero if 2.0**r.exponent >= fmt.min_normal)
    assert [rounding.family(f) for f in ("fp32", "tf32", "e5m2", "e8m0fnu", "e3m2fn", "e2m1fn")] == [
        "wide", "wide", "fp8", "fp8", "fp6_fp4", "fp6_fp4"]  # fmt: skip
    with pytest.raises(ValueError, match="unknown rounding mode 'nearest'; did you mean 'nearest_even'"):
        rounding.rounding_error_table(["e4m3fn"], modes=["nearest"])


@pytest.mark.long
def test_plot_rounding_error_and_its_csv(tmp_path):
    formats = ["e4m3fn", "bf16", "e2m1fn", "fp64"]
    modes = ["nearest_even", "stochastic"]
    path = _plot.plot_rounding_error(formats, tmp_path / "err.png", modes=modes, samples_per_binade=40, seed=2)
    colors = _plot.SERIES_COLORS[:3]  # one colour per format in the whole figure
    assert_png_has_content(path, min_width=1200, colors=colors, min_share=0.0003)
    rows = read_csv(tmp_path / "err.csv")
    table = rounding.rounding_error_table(formats, modes=modes, samples_per_binade=40, seed=2)
    assert len(rows) == len(table)
    for row, expected in zip(rows, table):
        assert (row["format"], row["family"], row["mode"], int(row["exponent"])) == (
            expected.format, expected.family, expected.mode, expected.exponent)  # fmt: skip
        for key in ("high", "max_relative_error", "mean_relative_error", "unit_roundoff"):
            assert float(row[key]) == getattr(expected, key)
        assert float(row["low"]) == 2.0**expected.exponent
    assert {r["family"] for r in rows} == {"wide", "fp8", "fp6_fp4"}
    assert all(float(r["max_relative_error"]) == 0 for r in rows if r["format"] == "fp64")  # float64 samples


# -- QSNR of the block formats ---------------------------------------------------------------------------


@pytest.mark.long
def test_qsnr_table_matches_scaled_qsnr():
    table = _plot.qsnr_table(["mxfp8_e4m3", "nvfp4"], shape=(16, 256), seed=1)
    assert list(table) == list(data.DISTRIBUTIONS)
    for index, name in enumerate(data.DISTRIBUTIONS):  # documented: default_rng([seed, distribution index])
        x = jnp.asarray(data.sample(name, (16, 256), np.random.default_rng([1, index])))
        assert table[name]["nvfp4"] == float(fpemu.scaled.qsnr(x, fpemu.scaled.quantize_dequantize(x, "nvfp4")))
    assert 28 < table["gaussian"]["mxfp8_e4m3"] < 33  # docs/scaling.md: 30.65 dB on 256 x 4096 values
    only = _plot.qsnr_table(["mxfp4"], distributions=(), arrays={"mine": np.ones((2, 64), np.float32)})
    assert only == {"mine": {"mxfp4": math.inf}}  # ones are exact in MXFP4


@pytest.mark.long
def test_plot_qsnr_and_its_csv(tmp_path):
    arrays = {"w.npy": np.random.default_rng(4).laplace(size=(8, 128)).astype(np.float32)}
    path = _plot.plot_qsnr(["mxfp8_e4m3", "mxfp4"], tmp_path / "qsnr.png", shape=(16, 256), arrays=arrays)
    assert_png_has_content(path, colors=_plot.SERIES_COLORS[:4])  # a bar colour per data set
    table = _plot.qsnr_table(["mxfp8_e4m3", "mxfp4"], shape=(16, 256), arrays=arrays)
    rows = read_csv(tmp_path / "qsnr.csv")
    assert [(r["data"], r["block_format"]) for r in rows] == [(d, r) for d in table for r in ("mxfp8_e4m3", "mxfp4")]
    assert all(float(r["qsnr_db"]) == table[r["data"]][r["block_format"]] for r in rows)


def test_unknown_block_format_lists_the_names():
    with pytest.raises(fpemu.scaled.UnknownBlockFormatError, match="mxfp4"):
        _plot.plot_qsnr(["mxfp9"], "unused.png")


# -- matmul error ------------------------------------------------------------------------------------


def test_matmul_format_styles_are_distinct():
    styles = [_plot.matmul_format_style(f) for f in accuracy.MATMUL_FORMATS]
    assert len({color for color, _ in styles}) == len({marker for _, marker in styles}) == len(styles)
    assert set(_plot.MATMUL_FORMAT_STYLES) == set(accuracy.MATMUL_FORMATS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeMatmulError:
    matmul_format: str
    distribution: str
    size: int
    m: int
    n: int
    relative_error: float
    max_abs_error: float
    qsnr_db: float


@pytest.fixture
def fake_accuracy(monkeypatch):
    """A stand-in `fpemu.tools.accuracy` that records its calls (the interface, not the numbers, is tested)."""
    calls = []

    def matmul_accuracy(matmul_formats, distributions, sizes, *, seed, outer, data):
        calls.append(dict(matmul_formats=matmul_formats, distributions=distributions, sizes=sizes, seed=seed, outer=outer,
                          data=data))  # fmt: skip
        error = {"fp32": 0.0, "bf16": 2.0**-9, "mxfp4": 0.15}
        return [
            FakeMatmulError(matmul_format=r, distribution=d, size=s, m=outer, n=outer,
                            relative_error=error[r] * (s / 64) ** 0.5, max_abs_error=0.5,
                            qsnr_db=-20 * math.log10(error[r] * (s / 64) ** 0.5) if error[r] else math.inf)
            for r in matmul_formats for d in distributions for s in sizes
        ]  # fmt: skip

    module = types.ModuleType("fpemu.tools.accuracy")
    module.MATMUL_FORMATS = ("fp32", "bf16", "mxfp4")
    module.DISTRIBUTIONS = ("gaussian", "heavy_tailed")
    module.MatmulData = accuracy.MatmulData
    module.matmul_accuracy = matmul_accuracy
    monkeypatch.setattr(_plot, "accuracy", module)  # the module plot draws its numbers from
    return calls


@pytest.mark.long
def test_plot_matmul_error_calls_accuracy(tmp_path, fake_accuracy):
    path = _plot.plot_matmul_error(None, [16, 64, 256], tmp_path / "mm.png", outer=8, seed=3)
    assert fake_accuracy == [dict(matmul_formats=["fp32", "bf16", "mxfp4"], distributions=["gaussian", "heavy_tailed"],
                                  sizes=[16, 64, 256], seed=3, outer=8, data=None)]  # fmt: skip
    colors = [_plot.MATMUL_FORMAT_STYLES[f][0] for f in ("bf16", "mxfp4")]  # fp32 is exact: a legend entry only
    assert_png_has_content(path, colors=colors, min_share=0.0005)
    rows = read_csv(tmp_path / "mm.csv")
    assert [(r["matmul_format"], r["distribution"], int(r["k"]), int(r["m"]), int(r["n"])) for r in rows] == [
        (r, d, k, 8, 8) for r in ("fp32", "bf16", "mxfp4") for d in ("gaussian", "heavy_tailed") for k in (16, 64, 256)
    ]
    for row in rows:  # the numbers the figure shows, read back exactly
        rel = {"fp32": 0.0, "bf16": 2.0**-9, "mxfp4": 0.15}[row["matmul_format"]] * (int(row["k"]) / 64) ** 0.5
        assert float(row["relative_error"]) == rel
        assert float(row["qsnr_db"]) == (-20 * math.log10(rel) if rel else math.inf)


def test_plot_matmul_error_refuses_bad_arguments(tmp_path, fake_accuracy):
    with pytest.raises(ValueError, match=r"unknown matmul format 'mxfp3'; did you mean 'mxfp4'") as exc_info:
        _plot.plot_matmul_error(["mxfp3"], [16], tmp_path / "no.png")
    assert str(exc_info.value).endswith("choose from: fp32, bf16, mxfp4")
    with pytest.raises(ValueError, match="choose from: gaussian, heavy_tailed"):
        _plot.plot_matmul_error(["bf16"], [16], tmp_path / "no.png", distributions=["uniform"])
    with pytest.raises(ValueError, match="sizes must be positive"):
        _plot.plot_matmul_error(["bf16"], [], tmp_path / "no.png")
    assert not (tmp_path / "no.png").exists() and fake_accuracy == []


def test_plot_matmul_error_takes_fpemu_scaleds_block_format_aliases(tmp_path, fake_accuracy):
    """An alias of `fpemu.scaled.get_block_format` means the same block format here (``"mxfp4_e2m1"`` is ``mxfp4``)."""
    _plot.plot_matmul_error(["mxfp4_e2m1", "bf16", "mxfp4"], [16], tmp_path / "mm.png", outer=8)
    assert [call["matmul_formats"] for call in fake_accuracy] == [["mxfp4", "bf16"]]


@pytest.mark.long
def test_mxfp8_is_one_block_format_in_the_matmul_error_and_qsnr_plots(tmp_path, capsys):
    """``--block-formats mxfp8`` is ``mxfp8_e4m3`` in both kinds, as in `fpemu.scaled` (it was refused by matmul-error)."""
    args = ["--block-formats", "mxfp8", "--distributions", "gaussian", "--out", str(tmp_path)]
    assert main(["plot", "matmul-error", "--sizes", "16", *args]) == 0
    assert main(["plot", "qsnr", *args]) == 0
    assert {r["matmul_format"] for r in read_csv(tmp_path / "matmul_error.csv")} == {"mxfp8_e4m3"}
    assert {r["block_format"] for r in read_csv(tmp_path / "qsnr.csv")} == {"mxfp8_e4m3"}


@pytest.mark.long
def test_plot_matmul_error_with_the_accuracy_module(tmp_path):
    kwargs = dict(distributions=["gaussian", "outlier_channels"], outer=8, seed=1)
    path = _plot.plot_matmul_error(["bf16", "mxfp4"], [16, 32], tmp_path / "mm.png", **kwargs)
    assert_png_has_content(path, colors=[_plot.MATMUL_FORMAT_STYLES[f][0] for f in ("bf16", "mxfp4")], min_share=0.0005)
    expected = accuracy.matmul_accuracy(["bf16", "mxfp4"], sizes=[16, 32], **kwargs)
    rows = read_csv(tmp_path / "mm.csv")
    assert len(rows) == len(expected) == 8
    for row, e in zip(rows, expected):
        assert (row["matmul_format"], row["distribution"], int(row["k"])) == (e.matmul_format, e.distribution, e.size)
        assert (float(row["qsnr_db"]), float(row["relative_error"])) == (e.qsnr_db, e.relative_error)


# -- bench chart ------------------------------------------------------------------------------------------


@pytest.mark.long
def test_plot_bench_from_json_dicts(tmp_path):
    rows = [
        {"name": "reference/numpy_copy", "kind": "reference", "ns_per_element": 0.2, "ratio_to_fpemu": 0.2},
        {"name": "e4m3fn/fpemu-nearest_even", "kind": "fpemu", "ns_per_element": 1.0, "ratio_to_fpemu": 1.0},
        {"name": "e4m3fn/ml_dtypes_roundtrip", "kind": "peer", "ns_per_element": 12.0, "ratio_to_fpemu": 12.0},
    ]
    for metric in ("ns_per_element", "ratio_to_fpemu"):
        path = _plot.plot_bench(rows, tmp_path / f"{metric}.png", metric=metric)
        assert_png_has_content(path, colors=("C0", "C1", "C7"))
        written = read_csv(tmp_path / f"{metric}.csv")
        assert [(r["name"], r["kind"], r["baseline"], float(r[metric])) for r in written] == [
            (r["name"], r["kind"], r["name"].partition("/")[0], r[metric])
            for r in rows  # no baseline: the group
        ]
    with pytest.raises(ValueError, match="choose from: ns_per_element"):
        _plot.plot_bench(rows, tmp_path / "x.png", metric="speed")


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.long
def test_cli_plot_all(tmp_path, capsys):
    out = tmp_path / "plots"
    lines = run_cli(capsys, "plot", "all", "--formats", "e4m3fn,e2m1fn", "--block-formats", "mxfp4", "--sizes", "16,32",
                    "--outer", "8", "--distributions", "gaussian", "--out", str(out))  # fmt: skip
    names = ["values", "rounding_error", "qsnr", "matmul_error"]
    assert lines == [str(out / f"{name}{suffix}") for name in names for suffix in (".png", ".csv")]
    for line in lines[::2]:
        assert_png_has_content(line)
    assert {r["format"] for r in read_csv(out / "rounding_error.csv")} == {"e4m3fn", "e2m1fn"}
    assert {(r["data"], r["block_format"]) for r in read_csv(out / "qsnr.csv")} == {("gaussian", "mxfp4")}
    assert [(r["k"], r["m"]) for r in read_csv(out / "matmul_error.csv")] == [("16", "8"), ("32", "8")]


@pytest.mark.long
def test_cli_data_round_trip(tmp_path, capsys):
    """--data: the .npy files measured as they are, the same numbers as the API on the loaded arrays."""
    rng = np.random.default_rng(9)
    np.save(tmp_path / "x.npy", rng.standard_normal((8, 40), dtype=np.float32))
    np.save(tmp_path / "w.npy", rng.standard_t(3, (40, 6)).astype(np.float32))
    files = f"{tmp_path / 'x.npy'},{tmp_path / 'w.npy'}"
    run_cli(capsys, "plot", "matmul-error", "--data", files, "--distributions", "none", "--block-formats", "bf16",
            "--sizes", "16", "--out", str(tmp_path))  # fmt: skip
    operands = data.load_matmul_data(tmp_path / "x.npy", tmp_path / "w.npy")
    expected = accuracy.matmul_accuracy(["bf16"], (), [16], data=operands)
    rows = read_csv(tmp_path / "matmul_error.csv")
    assert [(r["distribution"], int(r["k"]), int(r["m"]), int(r["n"])) for r in rows] == [
        ("x.npy @ w.npy", 16, 8, 6), ("x.npy @ w.npy", 40, 8, 6)]  # fmt: skip
    assert [float(r["qsnr_db"]) for r in rows] == [e.qsnr_db for e in expected]
    run_cli(capsys, "plot", "qsnr", "--data", files, "--distributions", "none", "--block-formats", "mxfp4",
            "--out", str(tmp_path))  # fmt: skip
    table = _plot.qsnr_table(["mxfp4"], distributions=(), arrays={"x.npy": operands.lhs, "w.npy": operands.rhs})
    assert {(r["data"], float(r["qsnr_db"])) for r in read_csv(tmp_path / "qsnr.csv")} == {
        (name, by_format["mxfp4"]) for name, by_format in table.items()}  # fmt: skip


@pytest.mark.long
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["values", "--formats", "e4m3f"], "argument --formats: unknown format 'e4m3f'; did you mean 'e4m3fn'"),
        (["values", "--formats", "e4m3fn,,bf16"], "argument --formats: expected a comma-separated list"),
        (["rounding-error", "--formats", "bogus"], "registered formats: fp64, fp32"),
        (["values", "--formats", "fp32"], "argument --formats: values: fp32 has 2,139,095,039"),
        (["qsnr", "--block-formats", "mxfp9"], "argument --block-formats: qsnr: unknown block format 'mxfp9'"),
        (["matmul-error", "--block-formats", "mxfp"], "did you mean 'mxfp8_e4m3', 'mxfp8_e5m2'"),  # prefix matches
        (
            ["matmul-error", "--block-formats", "nv"],
            "argument --block-formats: matmul-error: unknown matmul format 'nv'; did you mean 'nvfp4'",
        ),
        (
            ["rounding-error", "--modes", "nearest"],
            "argument --modes: unknown rounding mode 'nearest'; did you mean "
            "'nearest_even', 'nearest_away'? choose from: nearest_even,",
        ),
        (
            ["qsnr", "--distributions", "student"],
            "argument --distributions: unknown distribution 'student'; "
            "choose from: gaussian, heavy_tailed, outlier_channels",
        ),
        (["qsnr", "--distributions", "outliers"], "did you mean 'outlier_channels'"),
        (["matmul-error", "--distributions", "none"], "argument --distributions: 'none' leaves nothing to draw"),
        (["matmul-error", "--data", "a.npy"], "argument --data: matmul-error takes two .npy files"),
        (["matmul-error", "--data", "nope.npy,nope2.npy"], "argument --data: --data file 'nope.npy' is not a readable"),
        (["matmul-error", "--sizes", "0"], "argument --sizes: sizes must be positive integers"),
        (["matmul-error", "--outer", "-4"], "argument --outer: sizes must be positive integers"),
        (["qsnr", "--seed", "x"], "argument --seed: must be a non-negative integer"),
        (["qsnr", "--formats", "e4m3fn"], "--formats is only used by the values and rounding-error plots"),
        (["values", "--sizes", "64"], "--sizes is only used by the matmul-error plot"),
        (["values", "--modes", "toward_zero"], "--modes is only used by the rounding-error plot"),
        (["rounding-error", "--data", "a.npy"], "--data is only used by the qsnr and matmul-error plots"),
        (["sideways"], "invalid choice: 'sideways'"),
    ],
)
def test_cli_usage_errors(capsys, argv, message):
    assert message in usage_error(capsys, "plot", *argv)


def test_cli_unknown_matmul_format_lists_the_formats(capsys):
    err = usage_error(capsys, "plot", "matmul-error", "--block-formats", "bf17")
    assert "unknown matmul format 'bf17'" in err and ", ".join(accuracy.MATMUL_FORMATS) in err


def test_cli_bad_npy_names_the_file(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.array([[np.nan, 1.0]], np.float32))
    err = usage_error(capsys, "plot", "qsnr", "--data", str(tmp_path / "bad.npy"))
    assert "argument --data:" in err and "bad.npy" in err and "holds 1 NaN or infinite values" in err


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


# -- what the figures show: read back from the matplotlib objects ------------------------------------------


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib Figure of every PNG written, by file name, as it was saved."""
    drawn = {}
    save = _plot._save

    def recording(fig, path, header, rows):
        out = save(fig, path, header, rows)
        drawn[Path(path).name] = fig
        return out

    monkeypatch.setattr(_plot, "_save", recording)
    return drawn


def titles(fig) -> list:
    return [t for t in [fig._suptitle, *(ax.title for ax in fig.axes)] if t is not None and t.get_text()]


def assert_titles_inside(fig):
    fig.canvas.draw()
    renderer, width, height = fig.canvas.get_renderer(), fig.bbox.width, fig.bbox.height
    for text in titles(fig):
        box = text.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height, (text.get_text(), box, width)
        for legend in fig.legends:  # and no legend drawn over a title
            assert not box.overlaps(legend.get_window_extent(renderer)), (text.get_text(), legend)


def test_single_panel_rounding_error_title_fits(tmp_path, figures):
    """One family: a narrow figure whose long title was clipped on both sides; now wrapped inside the canvas."""
    _plot.plot_rounding_error(["e4m3fn"], tmp_path / "err.png", samples_per_binade=20)
    fig = figures["err.png"]
    assert len(fig.axes) == 1
    assert_titles_inside(fig)
    assert "\n" in fig._suptitle.get_text()  # wrapped, not shrunk away


@pytest.mark.long
def test_rounding_error_panels_share_their_y_axis(tmp_path, figures):
    _plot.plot_rounding_error(["bf16", "e4m3fn", "e2m1fn"], tmp_path / "err.png", samples_per_binade=20)
    fig = figures["err.png"]
    assert len(fig.axes) == 3
    assert len({ax.get_ylim() for ax in fig.axes}) == 1
    assert_titles_inside(fig)


@pytest.mark.long
def test_qsnr_names_how_each_block_format_scales(tmp_path, figures):
    _plot.plot_qsnr(["fp8_e4m3", "fp8_e5m2", "mxfp4", "nvfp4"], tmp_path / "qsnr.png", shape=(4, 64),
                    distributions=["gaussian"])  # fmt: skip
    labels = [t.get_text() for t in figures["qsnr.png"].axes[0].get_xticklabels()]
    assert labels == ["fp8_e4m3 (per tensor)", "fp8_e5m2 (per tensor)", "mxfp4 (blocks of 32)", "nvfp4 (blocks of 16)"]
    assert_titles_inside(figures["qsnr.png"])
    assert [r["block_format"] for r in read_csv(tmp_path / "qsnr.csv")] == ["fp8_e4m3", "fp8_e5m2", "mxfp4", "nvfp4"]


@pytest.mark.long
def test_matmul_error_rows_show_honest_ranges(tmp_path, fake_accuracy, figures):
    """A row of one format (bf16: 54 to 60 dB here) is drawn from 0 dB, not zoomed into its own few dB."""
    _plot.plot_matmul_error(["bf16", "mxfp4"], [16, 64], tmp_path / "mm.png", outer=8)
    fig = figures["mm.png"]
    wide, narrow = fig.axes[0], fig.axes[len(fig.axes) // 2]
    assert wide.get_ylim() == (0.0, 70.0) and narrow.get_ylim() == (0.0, 30.0)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["bf16", "mxfp4 (blocks of 32)"]
    assert_titles_inside(fig)
    _plot.plot_matmul_error(["bf16", "mxfp4"], [16], tmp_path / "one.png", outer=8, distributions=["gaussian"])
    assert_titles_inside(figures["one.png"])  # one narrow panel: the legend beside it clear of the title


def bench_rows(sizes, matmul_sizes):
    """JSON rows of ``fpemu bench``: two formats, a block format compared with its element format, matmuls."""
    cases = [("reference", "numpy_copy", "reference", "e4m3fn"), ("e4m3fn", "fpemu-nearest_even", "fpemu", "e4m3fn"),
             ("e4m3fn", "ml_dtypes_roundtrip", "peer", "e4m3fn"), ("e2m1fn", "fpemu-nearest_even", "fpemu", "e2m1fn"),
             ("mxfp4", "scaled-qdq", "fpemu", "e2m1fn")]  # fmt: skip
    rows = []
    for n in sizes:
        at = f"@{n}" if len(sizes) > 1 else ""
        rows += [dict(name=f"{g}/{r}{at}", group=g, kind=k, baseline=f"{b}/fpemu-nearest_even{at}",
                      ns_per_element=1.0 + i + 1e-6 * n, ratio_to_fpemu=0.5 + i) for i, (g, r, k, b) in enumerate(cases)]  # fmt: skip
    for n in matmul_sizes:
        at = f"@{n}" if len(matmul_sizes) > 1 else ""
        rows += [dict(name=f"matmul/{r}{at}", group="matmul", kind=k, baseline=f"matmul/fpemu-e4m3fn{at}",
                      ns_per_element=0.1 * (i + 1), ratio_to_fpemu=0.5 * (i + 1))
                 for i, (r, k) in enumerate([("fp32", "peer"), ("fpemu-e4m3fn", "fpemu")])]  # fmt: skip
    return rows


@pytest.mark.long
def test_bench_chart_has_one_unit_per_axis_and_names_every_baseline(tmp_path, figures):
    rows = bench_rows([4096], [64])
    for metric in ("ns_per_element", "ratio_to_fpemu"):
        _plot.plot_bench(rows, tmp_path / f"{metric}.png", metric=metric)
        fig = figures[f"{metric}.png"]
        assert len(fig.axes) == 3  # a panel per baseline
        for ax in fig.axes:
            names = [t.get_text() for t in ax.get_yticklabels()]
            matmul = [n.startswith("matmul/") for n in names]
            assert all(matmul) or not any(matmul), names  # never elements and multiply-adds on one axis
            if metric == "ns_per_element":
                unit = "multiply-add" if all(matmul) else "per element"
                assert unit in ax.get_xlabel()
        title_text = " ".join(ax.get_title() for ax in fig.axes)
        for baseline in ("e4m3fn/fpemu-nearest_even", "e2m1fn/fpemu-nearest_even", "matmul/fpemu-e4m3fn"):
            assert baseline in title_text
        assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()  # the elementwise panels compared on one axis
        assert_titles_inside(fig)
    assert [r["baseline"] for r in read_csv(tmp_path / "ratio_to_fpemu.csv")][-1] == "matmul/fpemu-e4m3fn"


@pytest.mark.long
def test_bench_chart_puts_sizes_on_an_axis(tmp_path, figures):
    """With several sizes, x is the size and each case one line: no size hidden in a label."""
    rows = bench_rows([4096, 65536], [64, 128])
    _plot.plot_bench(rows, tmp_path / "bench.png")
    fig = figures["bench.png"]
    assert len(fig.axes) == 3
    for ax in fig.axes:
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks in (["2^12", "2^16"], ["2^6", "2^7"])
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend and not any("@" in t for t in legend)
        assert all(len(line.get_xdata()) == 2 for line in ax.get_lines() if line.get_label() in legend)
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim() != fig.axes[2].get_ylim()
    assert "multiply-add" in fig.axes[2].get_ylabel() and "per element" in fig.axes[0].get_ylabel()
    assert len(read_csv(tmp_path / "bench.csv")) == len(rows)


def test_the_old_recipes_flag_still_works_and_names_its_new_name(capsys):
    """``--recipes`` is ``--block-formats``'s name of earlier releases: the same values, and a note on stderr."""
    err = usage_error(capsys, "plot", "qsnr", "--recipes", "mxfp9")
    assert "--recipes is deprecated and will be removed in the next release; use --block-formats" in err
    assert "argument --block-formats: qsnr: unknown block format 'mxfp9'" in err
    err = usage_error(capsys, "plot", "values", "--recipes", "mxfp4")
    assert "--block-formats is only used by the qsnr and matmul-error plots" in err


@pytest.mark.long
def test_the_old_recipes_keyword_of_the_plots_warns_and_gives_the_same(tmp_path, fake_accuracy):
    """``recipes=``, the keyword's name of earlier releases: the same result, and a warning naming ``block_formats=``."""
    new = _plot.qsnr_table(block_formats=["mxfp4"], shape=(2, 64))
    with pytest.warns(
        DeprecationWarning, match=r"plot\.qsnr_table\(recipes=\.\.\.\) is deprecated.*use block_formats="
    ):
        assert _plot.qsnr_table(recipes=["mxfp4"], shape=(2, 64)) == new
    _plot.plot_matmul_error(matmul_formats=["bf16"], sizes=[16], path=tmp_path / "new.png", outer=8)
    with pytest.warns(DeprecationWarning, match=r"plot\.plot_matmul_error\(recipes=\.\.\.\).*use matmul_formats="):
        _plot.plot_matmul_error(recipes=["bf16"], sizes=[16], path=tmp_path / "old.png", outer=8)
    assert fake_accuracy[0] == fake_accuracy[1]
    assert read_csv(tmp_path / "old.csv") == read_csv(tmp_path / "new.csv")
    with pytest.raises(TypeError, match=r"pass block_formats= only \(recipes= is its deprecated name\)"):
        _plot.plot_qsnr(recipes=["mxfp4"], block_formats=["mxfp4"], path=tmp_path / "no.png")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("RECIPE_STYLES", "MATMUL_FORMAT_STYLES"),
        ("WIDE_RECIPES", "WIDE_MATMUL_FORMATS"),
        ("recipe_label", "format_label"),
        ("recipe_style", "matmul_format_style"),
    ],
)
def test_the_old_module_names_warn_with_their_new_names_and_are_the_same_objects(old, new):
    with pytest.warns(
        DeprecationWarning, match=rf"^fpemu\.tools\.plot\.{old} is deprecated.*; use fpemu\.tools\.plot\.{new}$"
    ):
        assert getattr(_plot, old) is getattr(_plot, new)
    assert not hasattr(_plot, "RECIPE")  # other names are still unknown
