"""The pictures behind ``fpemu plot`` and ``fpemu bench --plot``: one PNG per function.

matplotlib is optional (``pip install 'fpemu[plot]'``) and imported on first use; without it every
function raises `MissingMatplotlibError` (a RuntimeError) with that hint. Figures are drawn on
`matplotlib.figure.Figure` objects with the Agg canvas, never through pyplot: no display is needed,
no global backend is switched and no figure is left open.

- `plot_values`: every finite positive value of each format on a log2 axis, one row per format.
- `plot_rounding_error`: the relative rounding error ``|q(x) - x| / |x|`` against ``|x|`` (log axes),
  with each format's unit roundoff ``eps / 2``.
- `plot_qsnr`: the QSNR of scaling recipes (`fpemu.scaled`) on Gaussian and heavy-tailed data.
- `plot_matmul_error`: the relative error of quantized matmuls against their size
  (`fpemu.tools.accuracy.matmul_accuracy`).
- `plot_bench`: a bar chart of ``fpemu bench`` rows.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.tools import accuracy

INSTALL_HINT = "pip install 'fpemu[plot]'"
DEFAULT_FORMATS = ("e4m3fn", "e5m2", "e3m2fn", "e2m1fn", "bf16", "fp16")
DEFAULT_MATMUL_SIZES = (64, 128, 256, 512)
MAX_VALUES_CODES = 1 << 20  # plot_values draws every value: formats with at most this many positive codes
_DPI = 100
_KIND_COLORS = {"fpemu": "C0", "peer": "C1", "reference": "C7"}
_MARKERS = "osD^v<>ph*"


class MissingMatplotlibError(RuntimeError):
    """Raised when a plot is asked for and matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise `MissingMatplotlibError` (with the install hint) unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError as error:
        raise MissingMatplotlibError(
            f"fpemu's plots need matplotlib, which is not installed ({error}); install it with: {INSTALL_HINT}"
        ) from None


def _figure(width: float, height: float):
    """A Figure on an Agg canvas, with constrained layout."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def _formats(formats: Iterable[Any]) -> list[fpemu.Format]:
    fmts = [fpemu.get_format(f) for f in formats]  # UnknownFormatError names the closest formats
    if not fmts:
        raise ValueError("no formats given")
    return fmts


def check_drawable(fmt: fpemu.Format) -> None:
    """Raise ValueError if ``fmt`` has too many values for `plot_values` (more than 2**20)."""
    if fmt.max_code >= MAX_VALUES_CODES:
        raise ValueError(
            f"{fmt.name} has {fmt.max_code:,} positive finite values, too many to draw one by one; the values "
            "plot takes formats of at most 2^20 values (bf16, fp16, tf32 and every narrower format)"
        )


def positive_values(fmt: Any) -> np.ndarray:
    """Every finite positive value of ``fmt``, ascending, as float64 (exact: at most 53 significant bits).

    Example:
      >>> positive_values("e2m1fn").tolist()
      [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    """
    fmt = fpemu.get_format(fmt)
    check_drawable(fmt)
    m = fmt.mantissa_bits
    codes = np.arange(1 if fmt.has_zero else 0, fmt.max_code + 1, dtype=np.int64)
    exponent, mantissa = codes >> m, codes & ((1 << m) - 1)
    subnormal = (exponent == 0) & fmt.has_zero
    significand = np.where(subnormal, mantissa, mantissa | (1 << m)).astype(np.float64)
    power = np.where(subnormal, fmt.min_subnormal_exponent, exponent - fmt.bias - m)
    return np.ldexp(significand, power.astype(np.int32))


def plot_values(formats: Sequence[Any] = DEFAULT_FORMATS, path: str | Path = "values.png") -> Path:
    """Every finite positive value of each format as a tick on a log2 axis, one row per format.

    Subnormals are drawn in a second colour. The density of ticks per octave is ``2**mantissa_bits``:
    the picture shows range (width) against precision (density) at a glance.

    Args:
      formats: names, dtypes or `fpemu.Format` objects with at most 2**20 positive values (bf16, fp16, tf32
        and every narrower format; not fp32 or fp64).
      path: the PNG to write (parent folders are created).

    Returns:
      ``path`` as a `Path`.

    Raises:
      fpemu.UnknownFormatError: for an unknown name (the message lists the closest ones).
      ValueError: for a format too wide to draw value by value.
      MissingMatplotlibError: without matplotlib.
    """
    fmts = _formats(formats)
    values = [positive_values(fmt) for fmt in fmts]
    fig = _figure(10, 1.5 + 0.55 * len(fmts))
    ax = fig.subplots()
    ax.set_xscale("log", base=2)
    labels = []
    for i, (fmt, v) in enumerate(zip(fmts, values)):
        row = len(fmts) - 1 - i
        subnormal = v < fmt.min_normal
        style = dict(lineoffsets=row, linelengths=0.7, linewidths=0.6)
        ax.eventplot(v[~subnormal], colors="C0", **style)
        if subnormal.any():
            ax.eventplot(v[subnormal], colors="C1", **style)
        labels.append(f"{fmt.name}\n{v.size:,} values")
    ax.set_yticks(range(len(fmts)), labels=labels[::-1])
    ax.set_ylim(-0.6, len(fmts) - 0.4)
    ax.set_xlabel("positive finite values (log2 axis)")
    ax.set_title("Every finite positive value of each format (blue: normal, orange: subnormal)")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_rounding_error(
    formats: Sequence[Any] = DEFAULT_FORMATS,
    path: str | Path = "rounding_error.png",
    *,
    samples: int = 20000,
    seed: int = 0,
) -> Path:
    """The relative error ``|q(x) - x| / |x|`` of round-to-nearest-even against ``|x|``, log axes.

    ``samples`` values per format are drawn log-uniformly from half the smallest subnormal to the
    largest finite value (float64, with ``jax_enable_x64`` on inside this function, so each value is
    rounded once from float64). The dashed lines are each format's unit roundoff ``eps / 2``: the
    bound in the normal range. Below ``min_normal`` the absolute error is fixed, so the relative error
    grows, up to 1 where values round to zero. Exact results (error 0) cannot be drawn on a log axis
    and are left out.

    Raises:
      fpemu.UnknownFormatError, MissingMatplotlibError: as `plot_values`.
    """
    fmts = _formats(formats)
    require_matplotlib()
    rng = np.random.default_rng(seed)
    points = []
    with jax.enable_x64(True):
        for fmt in fmts:
            low, high = max(fmt.min_subnormal_exponent - 1, -1074), math.log2(fmt.max)  # float64 holds 2**-1074
            x = np.exp2(rng.uniform(low, high, samples))
            q = np.asarray(fpemu.quantize(jnp.asarray(x, jnp.float64), fmt), np.float64)
            error = np.abs(q - x) / x
            keep = np.isfinite(error) & (error > 0)
            points.append((x[keep], error[keep]))
    fig = _figure(10, 6)
    ax = fig.subplots()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for i, (fmt, (x, error)) in enumerate(zip(fmts, points)):
        color = f"C{i % 10}"
        ax.scatter(x, error, s=1, color=color, alpha=0.5, linewidths=0, rasterized=True,
                   label=f"{fmt.name} (eps/2 = 2^{-fmt.precision})")  # fmt: skip
        ax.axhline(fmt.eps / 2, color=color, linestyle="--", linewidth=0.8)
    ax.set_xlabel("|x| (log2 axis)")
    ax.set_ylabel("relative error |q(x) - x| / |x| (log2 axis)")
    ax.set_title("Relative rounding error, nearest even (dashed: unit roundoff eps/2)")
    ax.legend(loc="lower left", markerscale=8, fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _heavy_tailed(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_t(accuracy.HEAVY_TAILED_DF, size=shape).astype(np.float32)


# The distributions of the matmul accuracy benchmark (fpemu.tools.accuracy), drawn as one array.
QSNR_DISTRIBUTIONS = {
    "Gaussian": lambda rng, shape: rng.standard_normal(shape, dtype=np.float32),
    f"Student-t (df={accuracy.HEAVY_TAILED_DF})": _heavy_tailed,
}


def qsnr_table(
    recipes: Sequence[Any], *, shape: tuple[int, ...] = (256, 1024), seed: int = 0
) -> dict[str, dict[str, float]]:
    """QSNR in dB of ``scaled.quantize_dequantize(x, recipe)`` for each data distribution and recipe.

    Returns:
      ``{distribution: {recipe name: dB}}``, the distributions of `QSNR_DISTRIBUTIONS`, blocks and
      scales along the last axis (each recipe's default).
    """
    recipe_list = [fpemu.scaled.get_recipe(r) for r in recipes]  # UnknownRecipeError lists the names
    if not recipe_list:
        raise ValueError("no recipes given")
    rng = np.random.default_rng(seed)
    table: dict[str, dict[str, float]] = {}
    for label, draw in QSNR_DISTRIBUTIONS.items():
        x = jnp.asarray(draw(rng, shape))
        table[label] = {
            recipe.name: float(fpemu.scaled.qsnr(x, fpemu.scaled.quantize_dequantize(x, recipe)))
            for recipe in recipe_list
        }
    return table


def plot_qsnr(
    recipes: Sequence[Any] | None = None,
    path: str | Path = "qsnr.png",
    *,
    shape: tuple[int, ...] = (256, 1024),
    seed: int = 0,
) -> Path:
    """Bar chart of the QSNR (dB, higher is better) of scaling recipes on Gaussian and heavy-tailed data.

    Args:
      recipes: recipe names or `fpemu.scaled.Recipe` objects; every built-in recipe when None.
      path: the PNG to write.
      shape, seed: the float32 test data (`qsnr_table`).

    Raises:
      fpemu.scaled.UnknownRecipeError: for an unknown name (the message lists the closest ones).
      MissingMatplotlibError: without matplotlib.
    """
    require_matplotlib()
    table = qsnr_table(fpemu.scaled.recipes() if recipes is None else recipes, shape=shape, seed=seed)
    names = list(next(iter(table.values())))
    fig = _figure(max(6.0, 1.1 * len(names) + 2), 5)
    ax = fig.subplots()
    width = 0.8 / len(table)
    positions = np.arange(len(names))
    for i, (label, by_recipe) in enumerate(table.items()):
        heights = [by_recipe[name] if math.isfinite(by_recipe[name]) else 0.0 for name in names]
        bars = ax.bar(positions + (i - (len(table) - 1) / 2) * width, heights, width, label=label, color=f"C{i}")
        ax.bar_label(bars, labels=[f"{by_recipe[n]:.1f}" for n in names], fontsize="x-small", padding=2)
    ax.set_xticks(positions, labels=names, rotation=30, ha="right")
    ax.set_ylabel("QSNR (dB), higher is better")
    ax.set_title(f"QSNR of fpemu.scaled.quantize_dequantize on {'x'.join(map(str, shape))} float32 values")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.12)
    return _save(fig, path)


def names_of(collection: Iterable[Any]) -> list[str]:
    """The names of recipes or formats (their ``name`` attribute), or the strings themselves."""
    return [str(getattr(item, "name", item)) for item in collection]


def plot_matmul_error(
    recipes: Sequence[str] | None = None,
    sizes: Sequence[int] = DEFAULT_MATMUL_SIZES,
    path: str | Path = "matmul_error.png",
    *,
    distribution: str = "gaussian",
    seed: int = 0,
) -> Path:
    """Relative error of quantized matmuls against their size (log-log), one line per recipe.

    The numbers come from `fpemu.tools.accuracy.matmul_accuracy` (recipes from its ``MATMUL_RECIPES``,
    data from its ``DISTRIBUTIONS``). Errors of exactly 0 cannot be drawn on a log axis; such points
    are left out and the recipe is marked "exact" in the legend.

    Args:
      recipes: names from ``MATMUL_RECIPES``; all of them when None.
      sizes: the matmul sizes ``n`` (n x n times n x n).
      path: the PNG to write.
      distribution: one of ``DISTRIBUTIONS``.
      seed: passed to ``matmul_accuracy``.

    Raises:
      ValueError: for an unknown recipe or distribution, or no sizes (the message lists the choices).
      MissingMatplotlibError: without matplotlib.
    """
    require_matplotlib()
    known = names_of(accuracy.MATMUL_RECIPES)
    recipe_names = known if recipes is None else [str(r) for r in recipes]
    check_choices("matmul recipe", recipe_names, known)
    check_choices("distribution", [distribution], names_of(accuracy.DISTRIBUTIONS))
    size_list = list(sizes)
    if not size_list or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in size_list):
        raise ValueError(f"sizes must be positive integers, got {list(sizes)!r}")
    results = accuracy.matmul_accuracy(recipes=recipe_names, distributions=[distribution], sizes=size_list, seed=seed)
    fig = _figure(9.5, 5.5)
    ax = fig.subplots()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    for i, name in enumerate(recipe_names):
        points = sorted((r.size, r.relative_error) for r in results if r.recipe == name)
        drawn = [(s, e) for s, e in points if e > 0 and math.isfinite(e)]
        label = name + ("" if drawn or not points else " (exact)")
        style = dict(color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)], linestyle="-" if i < 10 else "--")
        ax.plot(*(zip(*drawn) if drawn else ([], [])), label=label, **style)  # no points: the legend entry
    ax.set_xticks(sorted(set(size_list)), labels=[str(s) for s in sorted(set(size_list))])
    ax.set_xlabel("n (n x n @ n x n, log2 axis)")
    ax.set_ylabel("relative error ||C - C_exact|| / ||C_exact||")
    ax.set_title(f"Error of quantized matmuls against size ({distribution} data, seed {seed})")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def check_choices(what: str, names: Sequence[str], choices: Sequence[str]) -> None:
    """Raise ValueError naming the unknown ``names`` and listing the valid ``choices``."""
    unknown = [name for name in names if name not in choices]
    if unknown:
        close = [c for name in unknown for c in difflib.get_close_matches(name, choices, n=2, cutoff=0.6)]
        hint = f"did you mean {', '.join(map(repr, dict.fromkeys(close)))}? " if close else ""
        raise ValueError(
            f"unknown {what}{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"{hint}choose from: {', '.join(choices)}"
        )
    if not names:
        raise ValueError(f"no {what}s given; choose from: {', '.join(choices)}")


def _field(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


BENCH_METRICS = {
    "ns_per_element": "median ns per element (log axis; per multiply-add for matmul rows)",
    "ratio_to_fpemu": "time per element / the row's fpemu baseline (log axis)",
    "ratio_to_copy": "time per element / NumPy copy (log axis)",
    "gb_per_s": "effective GB/s (input + output bytes / median time)",
}


def plot_bench(
    rows: Sequence[Any], path: str | Path = "bench.png", *, metric: str = "ns_per_element", title: str | None = None
) -> Path:
    """Horizontal bars of one metric for every ``fpemu bench`` row, coloured by kind.

    Args:
      rows: `fpemu.tools.bench.BenchRow` objects, or their JSON dicts (``"rows"`` of ``--json`` output).
      path: the PNG to write.
      metric: a key of `BENCH_METRICS`.
      title: the figure title (a default names the metric).

    Raises:
      ValueError: for an unknown metric or no rows. MissingMatplotlibError: without matplotlib.
    """
    check_choices("metric", [metric], list(BENCH_METRICS))
    if not rows:
        raise ValueError("no bench rows to plot")
    require_matplotlib()
    names = [_field(r, "name") for r in rows]
    values = [float(_field(r, metric)) for r in rows]
    kinds = [_field(r, "kind") for r in rows]
    fig = _figure(10, 1.5 + 0.24 * len(rows))
    ax = fig.subplots()
    positions = np.arange(len(rows))[::-1]
    bars = ax.barh(positions, values, color=[_KIND_COLORS.get(k, "C3") for k in kinds])
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize="x-small", padding=2)
    ax.set_yticks(positions, labels=names, fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    if metric != "gb_per_s":
        ax.set_xscale("log")
    if metric.startswith("ratio"):
        ax.axvline(1.0, color="black", linewidth=0.8)
    ax.margins(x=0.15)
    ax.set_xlabel(BENCH_METRICS[metric])
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in _KIND_COLORS.items() if k in kinds],
              loc="lower right", fontsize="small")  # fmt: skip
    ax.set_title(title or f"fpemu bench: {metric}")
    ax.grid(axis="x", alpha=0.3, which="both")
    return _save(fig, path)
