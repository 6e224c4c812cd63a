"""``fpemu bench``: one quick run (module-scoped), its table, JSON and charts; the timing engine."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import types

import jax
import numpy as np
import pytest

import fpemu
from fpemu.tools import bench as _bench
from fpemu.tools import plot as _plot
from fpemu.tools.cli import main
from fpemu.tools.measure import ProgressBar
from tests.tools.test_cli import table_row

pytestmark = pytest.mark.long  # run first (tests/conftest.py)

try:
    import matplotlib.colors
    import matplotlib.image
except ImportError:  # the charts are checked only where matplotlib is installed (the `plot` extra)
    matplotlib = None

# Every row of `fpemu bench --quick` on any backend (gfloat and Pallas rows are added below).
QUICK_ROWS = [
    "reference/numpy_copy",
    "reference/xla_times2",
    *(
        f"{fmt}/{row}"
        for fmt in ("e4m3fn", "e5m2", "bf16", "e2m1fn")
        for row in (
            "fpemu-nearest_even",
            "fpemu-stochastic",
            "reduce_precision",
            "astype_roundtrip",
            "ml_dtypes_roundtrip",
        )  # fmt: skip
    ),
    "e2m1fn/fpemu-encode",
    "e2m1fn/fpemu-encode+pack",
    "mxfp8_e4m3/scaled-qdq",
    "nvfp4/scaled-qdq",
    "matmul/fp32",
    "matmul/bf16xbf16-f32",
    "matmul/fpemu-e4m3fn",
    "matmul/native-fp8xfp8-f32",
    "matmul/scaled-mxfp8_e4m3",
    "matmul/scaled-nvfp4",
]
GFLOAT_ROWS = [f"{fmt}/gfloat" for fmt in ("e4m3fn", "e5m2", "bf16", "e2m1fn")]
ROW_FIELDS = {
    "name", "group", "row", "what", "kind", "elements", "shape", "bytes_moved", "repeats", "first_call_s",
    "median_s", "min_s", "ns_per_element", "gb_per_s", "ratio_to_copy", "baseline", "ratio_to_fpemu",
}  # fmt: skip


def _strict_json(path) -> dict:
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_constant=refuse)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """``fpemu bench --quick --json FILE [--plot DIR] --no-progress``, run once in-process."""
    out = tmp_path_factory.mktemp("bench")
    argv = ["bench", "--quick", "--json", str(out / "bench.json"), "--no-progress"]
    if matplotlib is not None:
        argv += ["--plot", str(out / "plots")]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main(argv)
    return types.SimpleNamespace(
        status=status, out=out, stdout=stdout.getvalue(), stderr=stderr.getvalue(),
        data=_strict_json(out / "bench.json"),
    )  # fmt: skip


def test_quick_run_succeeds(quick):
    """The run's wall-clock limit (60 s) is checked in bench/test_fpemu_bench.py: no unit test depends on time."""
    assert quick.status == 0
    assert quick.stderr == ""  # --no-progress, and no stray XLA or warning output


def test_json_has_every_expected_row(quick):
    data = quick.data
    assert set(data) == {"meta", "rows"}
    names = [row["name"] for row in data["rows"]]
    skipped = {entry["name"]: entry["reason"] for entry in data["meta"]["skipped"]}
    assert len(names) == len(set(names))
    expected = list(QUICK_ROWS)
    if jax.default_backend() == "gpu":
        expected += ["e4m3fn/pallas-kernel", "matmul/pallas-kernel-e4m3fn"]
    assert set(expected) <= set(names), f"missing rows: {set(expected) - set(names)}; skipped: {skipped}"
    optional = set(GFLOAT_ROWS) if _bench.gfloat_version() is not None else set()
    assert set(names) - set(expected) <= optional
    for name in optional:  # gfloat, where installed, either ran or says why not
        assert (name in names) != (name in skipped)
    if _bench.gfloat_version() is None:
        assert not skipped


def test_json_meta(quick):
    meta = quick.data["meta"]
    assert meta["schema"] == _bench.SCHEMA == "fpemu.bench/1"
    assert meta["mode"] == "quick"
    assert meta["settings"]["elements"] == 1 << 18 and meta["settings"]["matmul_size"] == 256
    assert meta["device"]["platform"] == jax.devices()[0].platform
    assert meta["device"]["device_kind"] == jax.devices()[0].device_kind
    assert set(meta["versions"]) == {"python", "jax", "jaxlib", "numpy", "ml_dtypes", "fpemu", "gfloat"}
    assert meta["versions"]["jax"] == jax.__version__
    assert meta["versions"]["numpy"] == np.__version__
    assert meta["date"].endswith("+00:00")
    assert meta["seconds"] > 0


def test_json_rows_are_consistent(quick):
    rows = {row["name"]: row for row in quick.data["rows"]}
    copy = rows["reference/numpy_copy"]
    for name, row in rows.items():
        assert set(row) == ROW_FIELDS, name
        assert name == f"{row['group']}/{row['row']}"
        assert row["kind"] in ("fpemu", "peer", "reference")
        assert row["repeats"] >= 5
        for key in ("median_s", "min_s", "first_call_s", "ns_per_element", "gb_per_s", "ratio_to_copy",
                    "ratio_to_fpemu"):  # fmt: skip
            assert math.isfinite(row[key]) and row[key] > 0, (name, key, row[key])
        assert row["min_s"] <= row["median_s"]
        assert row["ns_per_element"] == pytest.approx(row["median_s"] / row["elements"] * 1e9, rel=1e-12)
        assert row["gb_per_s"] == pytest.approx(row["bytes_moved"] / row["median_s"] / 1e9, rel=1e-12)
        assert row["ratio_to_copy"] == pytest.approx(row["ns_per_element"] / copy["ns_per_element"], rel=1e-12)
        if row["elements"] == copy["elements"]:  # every elementwise row: the ratio of median times
            assert row["ratio_to_copy"] == pytest.approx(row["median_s"] / copy["median_s"], rel=1e-12)
        baseline = rows[row["baseline"]]
        assert baseline["kind"] == "fpemu"
        assert row["ratio_to_fpemu"] == pytest.approx(row["ns_per_element"] / baseline["ns_per_element"], rel=1e-12)
    assert copy["ratio_to_copy"] == 1.0
    assert rows["e4m3fn/fpemu-nearest_even"]["ratio_to_fpemu"] == 1.0
    assert rows["e4m3fn/reduce_precision"]["baseline"] == "e4m3fn/fpemu-nearest_even"
    assert rows["nvfp4/scaled-qdq"]["baseline"] == "e2m1fn/fpemu-nearest_even"
    assert rows["matmul/fp32"]["baseline"] == "matmul/fpemu-e4m3fn"
    assert rows["matmul/fp32"]["elements"] == 256**3 and rows["matmul/fp32"]["shape"] == [256, 256]
    assert rows["e4m3fn/fpemu-nearest_even"]["bytes_moved"] == 8 << 18
    assert rows["e2m1fn/fpemu-encode"]["bytes_moved"] == 5 << 18


def test_table_shows_every_row_and_the_header(quick):
    out = quick.stdout
    header = table_row(out, "group")
    assert header == ["group", "row", "elements", "ns/element", "GB/s", "x copy", "x fpemu", "baseline"]
    for row in quick.data["rows"]:
        cells = dict(zip(header, table_row_for(out, row["group"], row["row"])))
        assert float(cells["ns/element"]) == pytest.approx(row["ns_per_element"], rel=6e-3)
        assert float(cells["x copy"]) == pytest.approx(row["ratio_to_copy"], rel=6e-3)
        assert float(cells["x fpemu"]) == pytest.approx(row["ratio_to_fpemu"], rel=6e-3)
    device = jax.devices()[0]
    assert table_row(out, "device")[1].startswith(f"{device.device_kind} ({device.platform}")
    versions = table_row(out, "versions")[1]
    for lib in ("python", "jax", "jaxlib", "numpy", "ml_dtypes", "fpemu", "gfloat"):
        assert f"{lib} " in versions
    assert table_row(out, "commit") and table_row(out, "date")
    assert "Bench done in" in out
    assert f"wrote {quick.out / 'bench.json'}" in out


def table_row_for(output: str, group: str, row: str) -> list[str]:
    for line in output.splitlines():
        cells = line.split()
        if cells[:2] == [group, row]:
            return cells
    raise AssertionError(f"no row {group} {row} in:\n{output}")


def assert_png_has_content(path, *, min_height=200, min_width=300, colors=(), min_share=0.002) -> np.ndarray:
    """Open a PNG and check its size, that it is not blank, and that each colour of ``colors`` covers
    at least ``min_share`` of its pixels (bars, lines: what was drawn, not just the axes)."""
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] >= min_height and image.shape[1] >= min_width, image.shape
    rgb = image[..., :3]
    assert rgb.var() > 0.001, "blank image"
    for color in colors:
        target = np.array(matplotlib.colors.to_rgb(color))
        share = np.mean(np.all(np.abs(rgb - target) < 0.02, axis=-1))
        assert share > min_share, f"colour {color} covers only {share:.4%} of {path}"
    return image


@pytest.mark.skipif(matplotlib is None, reason="matplotlib is not installed")
def test_charts_render(quick):
    written = [line.removeprefix("wrote ") for line in quick.stdout.splitlines() if line.endswith(".png")]
    assert sorted(written) == sorted(str(quick.out / "plots" / n) for n in ("bench.png", "bench_ratio_to_fpemu.png"))
    rows = len(quick.data["rows"])
    for path in written:  # fpemu rows in C0, peers in C1, the references in C7
        assert_png_has_content(path, min_height=20 * rows, min_width=800, colors=("C0", "C1", "C7"))
    for name, metric in (("bench.csv", "ns_per_element"), ("bench_ratio_to_fpemu.csv", "ratio_to_fpemu")):
        assert f"wrote {quick.out / 'plots' / name}" in quick.stdout
        with open(quick.out / "plots" / name, encoding="utf-8") as f:
            table = [line.split(",") for line in f.read().splitlines()]
        assert table[0] == ["name", "kind", "baseline", metric]  # the numbers of the chart: the JSON's, exactly
        assert [(n, k, b, float(v)) for n, k, b, v in table[1:]] == [
            (r["name"], r["kind"], r["baseline"], r[metric]) for r in quick.data["rows"]
        ]


# -- choosing formats, block formats, modes and sizes ------------------------------------------------------


def test_select_defaults():
    quick, full = _bench.select(_bench.QUICK), _bench.select(_bench.FULL)
    assert quick.formats == _bench.QUICK_FORMATS and full.formats == _bench.FULL_FORMATS
    assert quick.block_formats == _bench.QUICK_BLOCK_FORMATS and full.block_formats == _bench.FULL_BLOCK_FORMATS
    assert quick.modes == ("nearest_even", "stochastic") and full.modes == ("nearest_even", "toward_zero", "stochastic")
    assert (quick.sizes, quick.matmul_sizes, full.sizes, full.matmul_sizes) == ((1 << 18,), (256,), (1 << 24,), (2048,))
    chosen = _bench.select(_bench.QUICK, formats=["float8_e4m3fn", "e4m3fn"], block_formats=["mxfp8"], modes=["to_odd"])
    assert (chosen.formats, chosen.block_formats, chosen.modes) == (
        ("e4m3fn",), ("mxfp8_e4m3",), ("nearest_even", "to_odd"))  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        (dict(formats=["e4m3"]), None, None),  # the IEEE-like format exists: no error
        (dict(formats=["e4m3f"]), fpemu.UnknownFormatError, "did you mean 'e4m3fn'"),
        (dict(formats=["fp64"]), ValueError, "fp64 does not fit in float32; choose from: fp32, tf32"),
        (dict(formats=[]), ValueError, "no formats given"),
        (dict(block_formats=["mxfp9"]), fpemu.scaled.UnknownBlockFormatError, "block formats: mxfp8_e4m3"),
        (dict(modes=["nearest"]), ValueError, "did you mean 'nearest_even', 'nearest_away'? choose from: nearest_even"),
        (dict(sizes=[0]), ValueError, "sizes must be positive integers"),
        (dict(matmul_sizes=[2.5]), ValueError, "matmul sizes must be positive integers"),
    ],
)
def test_select_refuses_bad_choices(kwargs, error, says):
    if error is None:
        _bench.select(_bench.QUICK, **kwargs)
        return
    with pytest.raises(error, match=re.escape(says)):
        _bench.select(_bench.QUICK, **kwargs)


def test_plan_with_choices():
    selection = _bench.select(_bench.QUICK, formats=["e2m1fn", "tf32"], block_formats=["mxfp4", "fp8_e4m3"],
                              modes=["to_odd"], sizes=[1024, 2048], matmul_sizes=[16])  # fmt: skip
    cases = {case.name: case for case in _bench.plan(_bench.QUICK, selection=selection, backend="cpu")}
    for n in (1024, 2048):
        for row in ("reference/numpy_copy", "reference/xla_times2", "e2m1fn/fpemu-nearest_even", "e2m1fn/fpemu-to_odd",
                    "tf32/fpemu-nearest_even", "tf32/fpemu-to_odd", "tf32/astype_roundtrip", "mxfp4/scaled-qdq",
                    "fp8_e4m3/scaled-qdq", "e4m3fn/fpemu-nearest_even"):  # fmt: skip
            case = cases[f"{row}@{n}"]
            assert case.elements == n and case.copy == f"reference/numpy_copy@{n}"
        assert cases[f"fp8_e4m3/scaled-qdq@{n}"].baseline == f"e4m3fn/fpemu-nearest_even@{n}"  # added: the baseline
        assert cases[f"tf32/fpemu-to_odd@{n}"].baseline == f"tf32/fpemu-nearest_even@{n}"
    assert not any("stochastic" in name or "e4m3fn/reduce_precision" in name for name in cases)
    matmuls = [name for name in cases if name.startswith("matmul/")]  # one matmul size: no suffix
    assert matmuls == ["matmul/fp32", "matmul/bf16xbf16-f32", "matmul/fpemu-e4m3fn", "matmul/native-fp8xfp8-f32",
                       "matmul/scaled-mxfp4", "matmul/scaled-fp8_e4m3"]  # fmt: skip
    assert all(cases[m].copy == "reference/numpy_copy@1024" and cases[m].elements == 16**3 for m in matmuls)
    with pytest.raises(ValueError, match="x_np must have the shape"):
        _bench.plan(_bench.QUICK, selection=selection, x_np=np.zeros(1024, np.float32))


def test_cli_runs_the_chosen_rows(tmp_path, capsys):
    """A small run with every option: the JSON has exactly the chosen rows, each compared with its own size's copy."""
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--formats", "e2m1fn", "--block-formats", "mxfp4", "--modes", "toward_zero",
                 "--sizes", "2^10,2^11", "--matmul-sizes", "16", "--json", str(out), "--no-progress"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "quick: 2^10, 2^11 float32 elements per elementwise row, matmul 16x16x16" in text
    result = _strict_json(out)
    rows = {row["name"]: row for row in result["rows"]}
    per_size = ["reference/numpy_copy", "reference/xla_times2", "e2m1fn/fpemu-nearest_even", "e2m1fn/fpemu-toward_zero",
                "e2m1fn/reduce_precision", "e2m1fn/astype_roundtrip", "e2m1fn/ml_dtypes_roundtrip", "e2m1fn/fpemu-encode",
                "e2m1fn/fpemu-encode+pack", "mxfp4/scaled-qdq"]  # fmt: skip
    expected = [f"{row}@{n}" for n in (1024, 2048) for row in per_size]
    expected += ["matmul/fp32", "matmul/bf16xbf16-f32", "matmul/fpemu-e4m3fn", "matmul/native-fp8xfp8-f32",
                 "matmul/scaled-mxfp4"]  # fmt: skip
    optional = {f"e2m1fn/gfloat@{n}" for n in (1024, 2048)} if _bench.gfloat_version() else set()
    assert set(expected) <= set(rows) <= set(expected) | optional
    for name, row in rows.items():
        n = name.rsplit("@", 1)[1] if "@" in name else "1024"
        copy = rows[f"reference/numpy_copy@{n}"]
        assert row["ratio_to_copy"] == pytest.approx(row["ns_per_element"] / copy["ns_per_element"], rel=1e-12)
        assert row["baseline"].endswith(f"@{n}") or row["group"] == "matmul"
    settings = result["meta"]["settings"]
    assert (settings["formats"], settings["block_formats"], settings["modes"]) == (
        ["e2m1fn"], ["mxfp4"], ["nearest_even", "toward_zero"])  # fmt: skip
    assert settings["recipes"] == settings["block_formats"]  # the key of earlier releases, while the schema is /1
    assert (settings["sizes"], settings["matmul_sizes"], settings["elements"], settings["matmul_size"]) == (
        [1024, 2048], [16], 1024, 16)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--formats", "e4m3f"], "argument --formats: unknown format 'e4m3f'; did you mean 'e4m3fn'"),
        (["--formats", "fp64"], "argument --formats: the bench rounds float32 inputs and fp64 does not fit"),
        (
            ["--block-formats", "nv"],
            "argument --block-formats: unknown block format 'nv'; did you mean 'nvfp4'? block formats: mxfp8_e4m3",
        ),
        (
            ["--modes", "stoch"],
            "argument --modes: unknown rounding mode 'stoch'; did you mean 'stochastic'? choose from",
        ),
        (["--sizes", "2^"], "argument --sizes: sizes must be positive integers (like 4096 or 2^12), got '2^'"),
        (["--matmul-sizes", "-5"], "argument --matmul-sizes: sizes must be positive integers"),
        (["--sizes", "64,,128"], "argument --sizes: expected a comma-separated list without empty items"),
    ],
)
def test_cli_bad_choices_name_the_flag(capsys, argv, says):
    with pytest.raises(SystemExit) as exc_info:
        main(["bench", "--quick", *argv])
    assert exc_info.value.code == 2
    assert says in capsys.readouterr().err


# -- without matplotlib, the progress bar, errors -----------------------------------------------------


def test_plot_without_matplotlib_fails_before_timing(monkeypatch, tmp_path, capsys):
    def missing():
        raise _plot.MissingMatplotlibError(f"no matplotlib; install it with: {_plot.INSTALL_HINT}")

    monkeypatch.setattr(_plot, "require_matplotlib", missing)
    monkeypatch.setattr(_bench, "run", lambda *a, **k: pytest.fail("the bench ran without matplotlib"))
    assert main(["bench", "--quick", "--plot", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "pip install 'fpemu[plot]'" in err and err.startswith("fpemu bench: error: --plot:")


@pytest.mark.parametrize("argv", [["bench", "--bogus"], ["bench", "--json"], ["bench", "quick"]])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc_info:
        main(argv)
    assert exc_info.value.code == 2
    assert capsys.readouterr().err


def test_progress_bar():
    stream = io.StringIO()
    bar = ProgressBar(stream, width=10)
    bar(0, 4, "e4m3fn/fpemu-nearest_even")
    bar(2, 4, "bf16/reduce_precision")
    bar(4, 4, "")
    text = stream.getvalue()
    assert "\r[..........] 0/4" in text and "e4m3fn/fpemu-nearest_even" in text
    assert "\r[#####.....] 2/4" in text and "bf16/reduce_precision" in text
    assert text.endswith("\r")  # the finished bar is erased
    assert "\n" not in text


def test_timeit_excludes_warmup_and_reports_medians(monkeypatch):
    """On a fake clock (no test depends on wall-clock time): call k takes k ms, the first one 50 ms (it "compiles")."""
    clock = [0.0]
    monkeypatch.setattr(_bench, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    calls = []

    def fn():
        calls.append(None)
        clock[0] += 0.05 if len(calls) == 1 else 0.001 * len(calls)
        return jax.numpy.zeros(4)

    timing = _bench.timeit(fn, warmup=2, min_repeats=5, max_repeats=7, max_time=0.0)
    assert timing.repeats == 5 and len(calls) == 7
    assert timing.first_call_s == pytest.approx(0.05)  # the first call, apart from the statistics
    assert timing.median_s == pytest.approx(0.005) and timing.min_s == pytest.approx(0.003)  # calls 3 to 7
    with pytest.raises(ValueError, match="min_repeats"):
        _bench.timeit(fn, min_repeats=3, max_repeats=2)


def test_run_needs_the_copy_row():
    cases = [case for case in _bench.plan(_bench.QUICK, x_np=np.zeros(1 << 18, np.float32))
             if case.name != "reference/numpy_copy"]  # fmt: skip
    with pytest.raises(ValueError, match="reference/numpy_copy"):
        _bench.run(_bench.QUICK, cases=cases)


def test_make_input_spans_the_float32_range():
    x = _bench.make_input(1 << 12)
    assert x.dtype == np.float32 and np.isfinite(x).all()
    magnitudes = np.abs(x[::16][x[::16] != 0])
    assert magnitudes.min() < 2.0**-100 and magnitudes.max() > 2.0**100
    np.testing.assert_array_equal(x, _bench.make_input(1 << 12))  # deterministic


# -- names of earlier releases ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"), [("QUICK_RECIPES", "QUICK_BLOCK_FORMATS"), ("FULL_RECIPES", "FULL_BLOCK_FORMATS")]
)
def test_the_old_module_names_warn_with_their_new_names_and_are_the_same_objects(old, new):
    with pytest.warns(
        DeprecationWarning, match=rf"^fpemu\.tools\.bench\.{old} is deprecated.*; use fpemu\.tools\.bench\.{new}$"
    ):
        assert getattr(_bench, old) is getattr(_bench, new)
    assert not hasattr(_bench, "QUICK_RECIPE")  # other names are still unknown


def test_the_old_recipes_keyword_and_attribute_warn_and_give_the_same():
    new = _bench.select(_bench.QUICK, block_formats=["mxfp4", "nvfp4"])
    with pytest.warns(DeprecationWarning, match=r"bench\.select\(recipes=\.\.\.\) is deprecated.*use block_formats="):
        assert _bench.select(_bench.QUICK, recipes=["mxfp4", "nvfp4"]) == new
    with pytest.warns(
        DeprecationWarning, match=r"Selection\.recipes is deprecated.*use fpemu\.tools\.bench\.Selection\.block_formats"
    ):
        assert new.recipes == new.block_formats == ("mxfp4", "nvfp4")
    fields = dict(formats=("e4m3fn",), modes=("nearest_even",), sizes=(8,), matmul_sizes=(4,))
    with pytest.warns(
        DeprecationWarning, match=r"bench\.Selection\(recipes=\.\.\.\) is deprecated.*use block_formats="
    ):
        assert _bench.Selection(recipes=("mxfp4",), **fields) == _bench.Selection(block_formats=("mxfp4",), **fields)


def test_the_old_and_the_new_keyword_together_are_refused():
    with pytest.raises(TypeError, match=r"bench\.select: pass block_formats= only \(recipes= is its deprecated name\)"):
        _bench.select(_bench.QUICK, recipes=["mxfp4"], block_formats=["mxfp4"])
    fields = dict(formats=("e4m3fn",), modes=("nearest_even",), sizes=(8,), matmul_sizes=(4,))
    with pytest.raises(TypeError, match=r"bench\.Selection: pass block_formats= only"):
        _bench.Selection(recipes=("mxfp4",), block_formats=("mxfp4",), **fields)
