"""The pictures behind ``fpemu plot`` and ``fpemu bench --plot``: one PNG per function, its numbers beside it.

matplotlib is optional (``pip install 'fpemu[plot]'``) and imported on first use; without it every
function raises `MissingMatplotlibError` (a RuntimeError) with that hint. Figures are drawn on
`matplotlib.figure.Figure` objects with the Agg canvas, never through pyplot: no display is needed,
no global backend is switched and no figure is left open.

Every function writes the PNG and, next to it with the same stem, a CSV file holding the numbers the
figure shows (`table_path`), one row per drawn point or bar, floats written with ``repr`` so that
they read back exactly.

- `plot_values`: every finite positive value of each format on a log2 axis, one row per format.
- `plot_rounding_error`: the largest relative rounding error per binade against magnitude, one
  panel per family of formats (`fpemu.tools.rounding`).
- `plot_qsnr`: the QSNR of block formats (`fpemu.scaled`) on each data distribution (`fpemu.tools.data`).
- `plot_matmul_error`: the QSNR of quantized matmuls against the inner dimension, one panel per
  distribution (`fpemu.tools.accuracy.matmul_accuracy`).
- `plot_bench`: a bar chart of ``fpemu bench`` rows.
"""

from __future__ import annotations

import csv
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.deprecation import renamed_keyword, warn_renamed
from fpemu.tools import accuracy, choices, rounding
from fpemu.tools import data as datasets

INSTALL_HINT = "pip install 'fpemu[plot]'"
#: The formats of ``values`` (each at most 2**20 values) and of ``rounding-error`` (every family).
DEFAULT_FORMATS = ("e4m3fn", "e5m2", "e3m2fn", "e2m1fn", "bf16", "fp16")
ROUNDING_ERROR_FORMATS = ("fp32", "tf32", "bf16", "fp16", "e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")
#: The inner dimensions K and the outer ones (M = N) of ``matmul-error``.
DEFAULT_MATMUL_SIZES = (32, 128, 512, 2048)
DEFAULT_OUTER = 128
MIN_QSNR_SPAN = 20.0  # dB: the least y range of a row of matmul-error
MAX_VALUES_CODES = 1 << 20  # plot_values draws every value: formats with at most this many positive codes
_DPI = 120
_KIND_COLORS = {"fpemu": "C0", "peer": "C1", "reference": "C7"}
#: Colour and marker of each matmul format (`fpemu.tools.accuracy.MATMUL_FORMATS`): no two share either, in
#: every figure.
MATMUL_FORMAT_STYLES: dict[str, tuple[str, str]] = {
    "fp32": ("#000000", "o"),
    "bf16": ("#1f77b4", "s"),
    "fp16": ("#17becf", "D"),
    "fp8_e4m3": ("#d62728", "^"),
    "fp8_e5m2": ("#8c564b", "v"),
    "mxfp8_e4m3": ("#ff7f0e", "<"),
    "mxfp8_e5m2": ("#bcbd22", ">"),
    "mxfp6_e3m2": ("#9467bd", "p"),
    "mxfp6_e2m3": ("#e377c2", "h"),
    "mxfp4": ("#2ca02c", "*"),
    "nvfp4": ("#7f7f7f", "X"),
    "mxint8": ("#b8860b", "P"),
}
_EXTRA_MARKERS = "o^sDv*<>phXP"
_DODGE = 0.25  # plot_matmul_error spreads a row's formats over +-0.25 binade of K, so that equal values stay visible
#: Colours of formats and of distributions (bars), one per series in a figure: Okabe-Ito's colour-blind-safe
#: colours first (without its yellow), then four of matplotlib's tab10.
SERIES_COLORS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000", "#8c564b", "#9467bd",
                 "#7f7f7f", "#bcbd22")  # fmt: skip
#: The matmul formats drawn in the upper row of `plot_matmul_error` (errors far below the narrow formats').
WIDE_MATMUL_FORMATS = ("fp32", "bf16", "fp16")
_MODE_STYLES: tuple[Any, ...] = ("-", "--", "-.", ":")


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


def table_path(path: str | Path) -> Path:
    """The CSV file written next to the PNG ``path``: same folder and stem, suffix ``.csv``.

    Example:
      >>> table_path("plots/matmul_error.png").as_posix()
      'plots/matmul_error.csv'
    """
    return Path(path).with_suffix(".csv")


def _text(value: Any) -> str:
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)


def write_table(path: str | Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """Write ``rows`` under ``header`` as CSV; floats as ``repr`` (``inf``, ``nan`` included: exact on reading back)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([_text(v) for v in row] for row in rows)
    return path


def _fit_titles(fig) -> None:
    """Wrap the figure's title and every axes title onto more lines until each lies inside the canvas."""
    texts = [t for t in [fig._suptitle, *(ax.title for ax in fig.axes)] if t is not None and t.get_text()]
    for _ in range(4):
        fig.canvas.draw()  # lays the figure out: the titles' places are final
        renderer, width = fig.canvas.get_renderer(), fig.bbox.width
        wide = [(t, t.get_window_extent(renderer)) for t in texts]
        wide = [(t, box) for t, box in wide if box.x0 < 0 or box.x1 > width]
        if not wide:
            return
        for text, box in wide:
            center = (box.x0 + box.x1) / 2
            room = 2 * min(center, width - center) * 0.95  # the title is centred on its axes
            longest = max(len(line) for line in text.get_text().split("\n"))
            chars = min(longest - 1, int(longest * room / max(box.width, 1.0)))
            text.set_text(textwrap.fill(" ".join(text.get_text().split()), max(chars, 16)))


def _save(fig, path: str | Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _fit_titles(fig)
    fig.savefig(path, format="png", dpi=_DPI)
    write_table(table_path(path), header, rows)
    return path


def _formats(formats: Iterable[Any]) -> list[fpemu.Format]:
    fmts = list(dict.fromkeys(fpemu.get_format(f) for f in formats))  # UnknownFormatError names the closest
    if not fmts:
        raise ValueError("no formats given")
    return fmts


def format_label(name: str) -> str:
    """A block format's name and how it scales: ``(per tensor)``, ``(blocks of N)``; a plain format's name as it is.

    Example:
      >>> [format_label(b) for b in ("fp8_e4m3", "nvfp4", "bf16")]
      ['fp8_e4m3 (per tensor)', 'nvfp4 (blocks of 16)', 'bf16']
    """
    try:
        block_format = fpemu.scaled.get_block_format(name)
    except fpemu.scaled.UnknownBlockFormatError:  # fp32, bf16, fp16: a cast, no scale
        return name
    size = block_format.block_size
    return f"{name} ({'per tensor' if size is None else f'blocks of {size}'})"


def matmul_format_style(name: str, index: int = 0) -> tuple[str, str]:
    """The colour and marker of a matmul format (`MATMUL_FORMAT_STYLES`; others by their position ``index``)."""
    return MATMUL_FORMAT_STYLES.get(name) or (SERIES_COLORS[index % len(SERIES_COLORS)], _EXTRA_MARKERS[index % 12])


def log2_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Powers of two ``2**k`` spanning ``[low, high]``, ``k`` a multiple of the smallest power-of-two step
    that gives at most ``most + 1`` ticks.

    Example:
      >>> [math.log2(t) for t in log2_ticks(2.0**-150, 2.0**128)]
      [-128.0, -64.0, 0.0, 64.0, 128.0]
      >>> [math.log2(t) for t in log2_ticks(0.25, 6.0)]
      [-2.0, -1.0, 0.0, 1.0, 2.0]
    """
    (m_low, e_low), e_high = math.frexp(low), math.frexp(high)[1]  # exact: log2 of a float64 may round up
    lo, hi = (e_low - 1 if m_low == 0.5 else e_low), e_high - 1
    step = 1
    while (hi - lo) // step > most:
        step *= 2
    return [math.ldexp(1.0, k) for k in range(-(-lo // step) * step, hi + 1, step)]


def _set_log2_ticks(axis, low: float, high: float) -> None:
    from matplotlib.ticker import NullLocator

    axis.set_ticks(log2_ticks(low, high))
    axis.set_minor_locator(NullLocator())


# -- the values --------------------------------------------------------------------------------------


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
    the picture shows range (width) against precision (density) at a glance. The CSV has one row per
    value: ``format, value, subnormal``.

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
    values = {fmt: positive_values(fmt) for fmt in fmts}
    families = [f for f in rounding.FAMILIES if any(rounding.family(fmt) == f for fmt in fmts)]
    members = {fam: [fmt for fmt in fmts if rounding.family(fmt) == fam] for fam in families}
    fig = _figure(10, 1.2 + sum(0.5 + 0.55 * len(m) for m in members.values()))
    axes = fig.subplots(len(families), 1, squeeze=False, height_ratios=[0.5 + len(m) for m in members.values()])
    rows = []
    for ax, fam in zip(axes[:, 0], families):
        labels = []
        for i, fmt in enumerate(members[fam]):
            v = values[fmt]
            row = len(members[fam]) - 1 - i
            subnormal = v < fmt.min_normal
            style = dict(lineoffsets=row, linelengths=0.7, linewidths=0.6)
            ax.eventplot(v[~subnormal], colors="C0", **style)
            if subnormal.any():
                ax.eventplot(v[subnormal], colors="C1", **style)
            labels.append(f"{fmt.name}\n{v.size:,} values")
            rows += [(fmt.name, value, int(sub)) for value, sub in zip(v.tolist(), subnormal.tolist())]
        ax.set_xscale("log", base=2)
        low = min(values[fmt][0] for fmt in members[fam])
        high = max(values[fmt][-1] for fmt in members[fam])
        ax.set_xlim(low / 2 ** (0.03 * math.log2(high / low) + 0.5), high * 2 ** (0.03 * math.log2(high / low) + 0.5))
        _set_log2_ticks(ax.xaxis, low, high)
        ax.set_yticks(range(len(labels)), labels=labels[::-1])
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_title(rounding.FAMILY_TITLES[fam], fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("positive finite values (log2 axis)")
    fig.suptitle("Every finite positive value of each format (blue: normal, orange: subnormal)")
    return _save(fig, path, ("format", "value", "subnormal"), rows)


# -- rounding error ----------------------------------------------------------------------------------


def plot_rounding_error(
    formats: Sequence[Any] = ROUNDING_ERROR_FORMATS,
    path: str | Path = "rounding_error.png",
    *,
    modes: Sequence[str] = ("nearest_even",),
    samples_per_binade: int = 1000,
    seed: int = 0,
) -> Path:
    """The largest relative rounding error ``|q(x) - x| / |x|`` in each binade against ``|x|``, log2 axes.

    One panel per family (`fpemu.tools.rounding.family`: 9 to 64 bits, 8 bits, 6 bits and fewer),
    each with its own x axis, so that bf16's range does not squeeze the narrow formats, and one y
    axis shared by all, so that the panels' errors compare at a glance. Each format is
    one colour and marker; each rounding mode one line style. A step spans its binade; the dotted
    horizontal line of a format's colour is its unit roundoff ``u = eps / 2``, the bound of
    round-to-nearest in the normal range. Left of the normal range the error doubles per binade, up to
    1 where values round to zero. The numbers come from `fpemu.tools.rounding.rounding_error_table`
    and the CSV has its rows (``format, family, mode, exponent, low, high, samples,
    max_relative_error, mean_relative_error, unit_roundoff``). A format whose samples all round
    exactly (fp64: they are float64) has nothing to draw; its legend entry says so.

    Raises:
      fpemu.UnknownFormatError: for an unknown format. ValueError: for an unknown rounding mode.
      MissingMatplotlibError: without matplotlib.
    """
    fmts = _formats(formats)
    require_matplotlib()
    from matplotlib.lines import Line2D

    table = rounding.rounding_error_table(fmts, modes=modes, samples_per_binade=samples_per_binade, seed=seed)
    modes = list(dict.fromkeys(modes))
    families = [f for f in rounding.FAMILIES if any(rounding.family(fmt) == f for fmt in fmts)]
    fig = _figure(5.2 * len(families), 5.4 + 0.2 * len(modes))
    axes = fig.subplots(1, len(families), squeeze=False, sharey=True)[0]  # one error scale: the panels compared
    for ax, fam in zip(axes, families):
        members = [fmt for fmt in fmts if rounding.family(fmt) == fam]
        handles = []
        for fmt in members:
            i = fmts.index(fmt)  # one colour and marker per format in the whole figure
            color, marker = SERIES_COLORS[i % len(SERIES_COLORS)], _EXTRA_MARKERS[i % 12]
            drawn = False
            for j, mode in enumerate(modes):
                rows = [r for r in table if r.format == fmt.name and r.mode == mode and r.max_relative_error > 0]
                if not rows:
                    continue
                drawn = True
                edges = [math.ldexp(1.0, r.exponent) for r in rows] + [rows[-1].high]
                ax.stairs([r.max_relative_error for r in rows], edges, color=color,
                          linestyle=_MODE_STYLES[j % len(_MODE_STYLES)], linewidth=1.6, baseline=None)  # fmt: skip
                middle = [math.sqrt(math.ldexp(1.0, r.exponent) * r.high) for r in rows]
                every = max(1, len(rows) // 8)
                ax.plot(middle[j % every :: every], [r.max_relative_error for r in rows][j % every :: every],
                        linestyle="none", marker=marker, color=color, markersize=5)  # fmt: skip
            if drawn:
                ax.axhline(fmt.eps / 2, color=color, linestyle=":", linewidth=0.9)
            label = f"{fmt.name} ($u = 2^{{-{fmt.precision}}}$)" if drawn else f"{fmt.name} (exact on float64 samples)"
            handles.append(Line2D([], [], color=color, marker=marker, label=label))
        if len(modes) > 1:
            handles += [Line2D([], [], color="0.3", linestyle=_MODE_STYLES[j % len(_MODE_STYLES)], label=mode)
                        for j, mode in enumerate(modes)]  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        shown = [r for r in table if r.family == fam and r.max_relative_error > 0]
        shown = shown or [r for r in table if r.family == fam]  # nothing drawn (fp64): the samples' range
        _set_log2_ticks(ax.xaxis, min(math.ldexp(1.0, r.exponent) for r in shown), max(r.high for r in shown))
        ax.set_ylim(top=2.0)
        ax.set_title(rounding.FAMILY_TITLES[fam], fontsize="medium")
        ax.set_xlabel("|x| (log2 axis)")
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize="small",
                  frameon=False)  # fmt: skip
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("largest relative error |q(x) - x| / |x| in the binade")
    mode_text = modes[0] if len(modes) == 1 else ", ".join(modes)
    fig.suptitle(f"Relative rounding error per binade ({mode_text}; dotted: unit roundoff u = eps/2)")
    header = ("format", "family", "mode", "exponent", "low", "high", "samples", "max_relative_error",
              "mean_relative_error", "unit_roundoff")  # fmt: skip
    rows_out = [(r.format, r.family, r.mode, r.exponent, math.ldexp(1.0, r.exponent), r.high, r.samples,
                 r.max_relative_error, r.mean_relative_error, r.unit_roundoff) for r in table]  # fmt: skip
    return _save(fig, path, header, rows_out)


# -- QSNR of the block formats -------------------------------------------------------------------------


@renamed_keyword("recipes", "block_formats", "fpemu.tools.plot.qsnr_table")
def qsnr_table(
    block_formats: Sequence[Any],
    *,
    shape: tuple[int, ...] = (256, 1024),
    seed: int = 0,
    distributions: Sequence[str] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
) -> dict[str, dict[str, float]]:
    """QSNR in dB (`fpemu.scaled.qsnr`) of ``scaled.quantize_dequantize(x, block_format)`` for each data set and
    block format.

    Args:
      block_formats: block format names (aliases accepted) or `fpemu.scaled.BlockFormat` objects;
        ``recipes=`` is its deprecated name.
      shape: the float32 values of each distribution.
      seed: distribution ``d`` is drawn with ``numpy.random.default_rng([seed, DISTRIBUTIONS.index(d)])``.
      distributions: names from `fpemu.tools.data.DISTRIBUTIONS` (default: all; ``()``: none).
      arrays: a user's own float32 arrays by name (`fpemu.tools.data.load_array`), measured as they are.

    Returns:
      ``{data set: {block format name: dB}}``: the distributions in order, then ``arrays``. Blocks and
      scales run along the last axis (each block format's default); where its length is not a multiple of
      the block size, the last block is shorter (``pad=True``).

    Raises:
      fpemu.scaled.UnknownBlockFormatError, ValueError: for an unknown block format or distribution (listing them).
    """
    format_list = [fpemu.scaled.get_block_format(r) for r in block_formats]  # UnknownBlockFormatError lists the names
    if not format_list:
        raise ValueError("no block formats given")
    names = datasets.DISTRIBUTIONS if distributions is None else tuple(distributions)
    if names:
        choices.check_names("distribution", names, datasets.DISTRIBUTIONS)
    sets = {d: datasets.sample(d, shape, np.random.default_rng([seed, datasets.DISTRIBUTIONS.index(d)])) for d in names}
    sets.update(arrays or {})
    if not sets:
        raise ValueError("no distributions or arrays given")
    table: dict[str, dict[str, float]] = {}
    for label, values in sets.items():
        x = jnp.asarray(values)
        table[label] = {
            fmt.name: float(fpemu.scaled.qsnr(x, fpemu.scaled.quantize_dequantize(x, fmt, pad=True)))
            for fmt in format_list
        }
    return table


def _data_label(name: str) -> str:
    return datasets.DISTRIBUTION_LABELS.get(name, name)


@renamed_keyword("recipes", "block_formats", "fpemu.tools.plot.plot_qsnr")
def plot_qsnr(
    block_formats: Sequence[Any] | None = None,
    path: str | Path = "qsnr.png",
    *,
    shape: tuple[int, ...] = (256, 1024),
    seed: int = 0,
    distributions: Sequence[str] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """Bars of the QSNR (dB, higher is better) of block formats, one bar per data set in each block format's group.

    The numbers are `qsnr_table`'s; the CSV has one row per bar: ``data, block_format, qsnr_db``.

    Args:
      block_formats: block format names or `fpemu.scaled.BlockFormat` objects; every built-in block format
        when None. ``recipes=`` is its deprecated name.
      path: the PNG to write.
      shape, seed, distributions, arrays: the data (`qsnr_table`).

    Raises:
      fpemu.scaled.UnknownBlockFormatError, ValueError: for an unknown block format or distribution.
      MissingMatplotlibError: without matplotlib.
    """
    require_matplotlib()
    table = qsnr_table(fpemu.scaled.block_formats() if block_formats is None else block_formats, shape=shape, seed=seed,
                       distributions=distributions, arrays=arrays)  # fmt: skip
    names = list(next(iter(table.values())))
    fig = _figure(max(7.0, 0.45 * len(names) * len(table) + 3), 5)
    ax = fig.subplots()
    width = 0.8 / len(table)
    positions = np.arange(len(names))
    rows = []
    for i, (label, by_format) in enumerate(table.items()):
        heights = [by_format[name] if math.isfinite(by_format[name]) else 0.0 for name in names]
        bars = ax.bar(positions + (i - (len(table) - 1) / 2) * width, heights, width, label=_data_label(label),
                      color=SERIES_COLORS[i % len(SERIES_COLORS)])  # fmt: skip
        ax.bar_label(bars, labels=[f"{by_format[n]:.1f}" for n in names], fontsize="x-small", padding=2,
                     rotation=90 if len(table) > 2 else 0)  # fmt: skip
        rows += [(label, name, by_format[name]) for name in names]
    ax.set_xticks(positions, labels=[format_label(n) for n in names], rotation=30, ha="right")
    ax.set_ylabel("QSNR (dB), higher is better")
    about = [f"{'x'.join(map(str, shape))} values per distribution, seed {seed}"] if any(
        name in datasets.DISTRIBUTIONS for name in table) else []  # fmt: skip
    about += ["your arrays as given"] if arrays else []
    ax.set_title(f"QSNR of fpemu.scaled.quantize_dequantize (blocks along the last axis; {'; '.join(about)})",
                 fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), title="data")
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.15)
    return _save(fig, path, ("data", "block_format", "qsnr_db"), rows)


# -- matmul error ------------------------------------------------------------------------------------


def qsnr_limits(values: Iterable[float]) -> tuple[float, float]:
    """The y range of a row of `plot_matmul_error`: from 0 dB (an error as large as the signal; lower if a
    value is) to above the highest value, in whole tens of dB, at least `MIN_QSNR_SPAN` dB: a row of
    nearly equal values is drawn flat, not zoomed into a slope.

    Example:
      >>> qsnr_limits([52.5, 55.0]), qsnr_limits([-3.0, 140.2])
      ((0.0, 60.0), (-10.0, 150.0))
    """
    values = list(values)
    low, high = min(0.0, *values), max(values)
    bottom = 0.0 if low == 0 else 10.0 * math.floor((low - 2) / 10)
    top = 10.0 * math.ceil((high + max(2.0, 0.05 * (high - bottom))) / 10)
    return bottom, max(top, bottom + MIN_QSNR_SPAN)


@renamed_keyword("recipes", "matmul_formats", "fpemu.tools.plot.plot_matmul_error")
def plot_matmul_error(
    matmul_formats: Sequence[str] | None = None,
    sizes: Sequence[int] = DEFAULT_MATMUL_SIZES,
    path: str | Path = "matmul_error.png",
    *,
    distributions: Sequence[str] | None = None,
    data: accuracy.MatmulData | Sequence[accuracy.MatmulData] | None = None,
    outer: int | None = DEFAULT_OUTER,
    seed: int = 0,
) -> Path:
    """The QSNR (dB) of quantized matmuls against the inner dimension K, one panel per distribution.

    Each panel is one distribution of `fpemu.tools.accuracy.DISTRIBUTIONS` (and one per `MatmulData`),
    all on the same y axis; each format is one line with its own colour and marker (`MATMUL_FORMAT_STYLES`),
    named in the legend to the right. The numbers come from `fpemu.tools.accuracy.matmul_accuracy`
    (``M = N = outer``, K = each size); the CSV has one row per point: ``matmul_format, distribution,
    m, k, n, qsnr_db, relative_error, max_abs_error``. A QSNR of +inf (an exact product) cannot be drawn:
    the legend marks the format "exact"; -inf (a non-finite product) is marked "overflow".

    Args:
      matmul_formats: names from ``MATMUL_FORMATS``; all of them when None. ``recipes=`` is its deprecated
        name.
      sizes: the inner dimensions K.
      path: the PNG to write.
      distributions: names from ``DISTRIBUTIONS``; all when None, none with ``()`` (then ``data``).
      data: a user's operands, measured at the sizes below their K and at K.
      outer: ``M = N`` of the drawn operands; None: square (``M = N = K``).
      seed: passed to ``matmul_accuracy``.

    Raises:
      ValueError: for an unknown block format or distribution, or no sizes (the message lists the choices).
      MissingMatplotlibError: without matplotlib.
    """
    require_matplotlib()
    from matplotlib.lines import Line2D

    known = list(accuracy.MATMUL_FORMATS)
    format_names = (
        known if matmul_formats is None else choices.matmul_format_names([str(r) for r in matmul_formats], known)
    )
    names = list(accuracy.DISTRIBUTIONS if distributions is None else distributions)
    if names:
        choices.check_names("distribution", names, accuracy.DISTRIBUTIONS)
    operands = [] if data is None else [data] if isinstance(data, accuracy.MatmulData) else list(data)
    size_list = list(sizes)
    if not size_list or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in size_list):
        raise ValueError(f"sizes must be positive integers, got {list(sizes)!r}")
    results = accuracy.matmul_accuracy(matmul_formats=format_names, distributions=names, sizes=size_list, seed=seed,
                                       outer=outer, data=operands or None)  # fmt: skip
    panels = [*names, *(d.name for d in operands)]
    groups = [g for g in ([f for f in format_names if f in WIDE_MATMUL_FORMATS], [f for f in format_names
              if f not in WIDE_MATMUL_FORMATS]) if g]  # fmt: skip
    fig = _figure(3.7 * len(panels) + 2.4, 3.3 * len(groups) + 0.9)
    axes = fig.subplots(len(groups), len(panels), squeeze=False, sharey="row", sharex="col")
    handles = []
    for g, group in enumerate(groups):
        for j, name in enumerate(group):
            index = format_names.index(name)
            color, marker = matmul_format_style(name, index)
            face = "none" if index % 2 else color  # alternate hollow and filled markers
            dodge = 2.0 ** (_DODGE * (j - (len(group) - 1) / 2) / max(1, (len(group) - 1) / 2))
            suffix = ""
            for p, panel in enumerate(panels):
                points = sorted(
                    (r.size, r.qsnr_db) for r in results if r.matmul_format == name and r.distribution == panel
                )
                drawn = [(k * dodge, q) for k, q in points if math.isfinite(q)]
                if len(drawn) < len(points):
                    suffix = " (exact)" if any(q > 0 and math.isinf(q) for _, q in points) else " (overflow)"
                if drawn:
                    axes[g][p].plot(*zip(*drawn), color=color, marker=marker, markersize=6, linewidth=1.3,
                                    markerfacecolor=face, markeredgewidth=1.3)  # fmt: skip
            handles.append(Line2D([], [], color=color, marker=marker, markerfacecolor=face, markeredgewidth=1.3,
                                  label=format_label(name) + suffix))  # fmt: skip
        which = "16- and 32-bit formats" if group[0] in WIDE_MATMUL_FORMATS else "8-bit and narrower formats"
        axes[g][0].set_ylabel(f"QSNR (dB)\n{which}")
        shown = [r.qsnr_db for r in results if r.matmul_format in group and math.isfinite(r.qsnr_db)]
        if shown:
            axes[g][0].set_ylim(*qsnr_limits(shown))
    for p, panel in enumerate(panels):
        ks = sorted({r.size for r in results if r.distribution == panel})
        title = _data_label(panel)
        if panel not in names:  # a user's data: its own M and N
            title += f"\n(M = {operands[p - len(names)].lhs.shape[0]}, N = {operands[p - len(names)].rhs.shape[1]})"
        axes[0][p].set_title(title, fontsize="medium")
        axes[-1][p].set_xlabel("inner dimension K (log2 axis)")
        for row in axes[:, p]:
            row.set_xscale("log", base=2)
            row.set_xticks(ks, labels=[str(k) for k in ks])
            row.minorticks_off()
            row.set_xlim(ks[0] / 2**0.6, ks[-1] * 2**0.6)
            row.grid(alpha=0.3)
    fig.legend(handles=handles, loc="outside right center", title="block format", fontsize="small")
    shape = f"drawn data: M = N = {outer}" if outer is not None else "drawn data: M = N = K"
    fig.suptitle(f"QSNR of quantized matmuls C = A B against the float64 product ({shape}; higher is better)")
    header = ("matmul_format", "distribution", "m", "k", "n", "qsnr_db", "relative_error", "max_abs_error")
    table = [(r.matmul_format, r.distribution, r.m, r.size, r.n, r.qsnr_db, r.relative_error, r.max_abs_error)
             for r in results]  # fmt: skip
    return _save(fig, path, header, table)


# -- bench chart ---------------------------------------------------------------------------------------


def _field(row: Any, key: str, default: Any = None) -> Any:
    value = row.get(key, default) if isinstance(row, Mapping) else getattr(row, key, default)
    if value is None:
        raise ValueError(f"a bench row has no {key!r}: {row!r}")
    return value


BENCH_METRICS = {
    "ns_per_element": "median ns per element",
    "ratio_to_fpemu": "time per element / the baseline's",
    "ratio_to_copy": "time per element / the NumPy copy's",
    "gb_per_s": "effective GB/s (input + output bytes / median time)",
}
#: The axis label of ``ns_per_element`` on matmul rows, whose elements are multiply-adds.
MATMUL_NS_LABEL = "median ns per multiply-add"
_KIND_LINES: dict[str, Any] = {"fpemu": "-", "peer": "--", "reference": ":"}


def bench_case(name: str) -> tuple[str, int | None]:
    """A bench row's name split into the case and the size after ``@`` (None: the run had one size).

    Example:
      >>> bench_case("e4m3fn/fpemu-nearest_even@65536"), bench_case("matmul/fp32")
      (('e4m3fn/fpemu-nearest_even', 65536), ('matmul/fp32', None))
    """
    case, at, size = name.partition("@")
    return case, int(size) if at else None


def _size_label(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n > 1 and n & (n - 1) == 0 else f"{n:,}"


def plot_bench(
    rows: Sequence[Any], path: str | Path = "bench.png", *, metric: str = "ns_per_element", title: str | None = None
) -> Path:
    """One metric of ``fpemu bench`` rows, a panel per baseline: the rows compared with one fpemu row.

    Every panel is titled with its baseline (``ratio_to_fpemu`` divides by it) and each axis has one
    unit: the matmul rows' elements are multiply-adds, so they get panels of their own, and panels of
    one unit share their value axis. With one size per row the panels hold horizontal bars coloured
    by kind; with several (``--sizes``, ``--matmul-sizes``) the size is the x axis (log2) and each
    case is a line (solid: fpemu, dashed: a peer, dotted: a reference). The CSV has one row per bar
    or point: ``name, kind, baseline, <metric>``.

    Args:
      rows: `fpemu.tools.bench.BenchRow` objects, or their JSON dicts (``"rows"`` of ``--json`` output;
        without ``baseline`` and ``group``, a row's group, the part of its name before ``/``, is both).
      path: the PNG to write.
      metric: a key of `BENCH_METRICS`.
      title: the figure title (a default names the metric).

    Raises:
      ValueError: for an unknown metric or no rows. MissingMatplotlibError: without matplotlib.
    """
    choices.check_names("metric", [metric], list(BENCH_METRICS))
    if not rows:
        raise ValueError("no bench rows to plot")
    require_matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    table = []
    for r in rows:
        name = _field(r, "name")
        group = _field(r, "group", name.partition("/")[0])
        baseline = bench_case(_field(r, "baseline", group))[0]
        table.append((name, _field(r, "kind"), baseline, float(_field(r, metric)), group == "matmul"))
    panels = list(dict.fromkeys((baseline, matmul) for _, _, baseline, _, matmul in table))
    sizes = {bench_case(name)[1] for name, *_ in table}
    lines = len(sizes) > 1
    ratio = metric.startswith("ratio")

    def unit(matmul: bool) -> str:
        return MATMUL_NS_LABEL if matmul and metric == "ns_per_element" else BENCH_METRICS[metric]

    def members(panel: tuple[str, bool]) -> list[tuple[str, str, str, float, bool]]:
        return [row for row in table if (row[2], row[4]) == panel]

    if lines:
        ncols = min(2, len(panels))
        nrows = -(-len(panels) // ncols)
        fig = _figure(6.2 * ncols + 0.4, 4.6 * nrows + 0.8)
        grid = fig.subplots(nrows, ncols, squeeze=False)
        axes = list(grid.flat)
        for ax in axes[len(panels) :]:
            ax.remove()
    else:
        fig = _figure(10, 1.6 + 0.26 * len(table) + 0.55 * len(panels))
        axes = list(fig.subplots(len(panels), 1, squeeze=False, height_ratios=[len(members(p)) + 1.2 for p in panels])
                    [:, 0])  # fmt: skip
    first_of_unit: dict[str, Any] = {}
    styles: dict[str, int] = {}
    for ax, panel in zip(axes, panels):
        baseline, matmul = panel
        mine = members(panel)
        label = unit(matmul)
        value_axis = "y" if lines else "x"
        shared = first_of_unit.setdefault(label, ax)  # panels of one unit share their value axis
        if shared is not ax:
            (ax.sharey if lines else ax.sharex)(shared)
        if lines:
            for case in dict.fromkeys(bench_case(name)[0] for name, *_ in mine):
                i = styles.setdefault(case.partition("/")[2] or case, len(styles))  # a row: one style in every panel
                points = sorted((bench_case(n)[1], v, k) for n, k, _, v, _ in mine if bench_case(n)[0] == case)
                ax.plot([p[0] for p in points], [p[1] for p in points], color=SERIES_COLORS[i % len(SERIES_COLORS)],
                        marker=_EXTRA_MARKERS[i % 12], linestyle=_KIND_LINES.get(points[0][2], "-."),
                        label=case.partition("/")[2] or case)  # fmt: skip
            drawn = sorted({bench_case(name)[1] or 0 for name, *_ in mine})
            ax.set_xscale("log", base=2)
            ax.set_xticks(drawn, labels=[_size_label(n) for n in drawn])
            ax.minorticks_off()
            ax.set_xlabel("n of the n x n x n matmul (log2 axis)" if matmul else "elements per call (log2 axis)")
            ax.set_ylabel(label)
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, frameon=False)
        else:
            positions = np.arange(len(mine))[::-1]
            values = [v for _, _, _, v, _ in mine]
            bars = ax.barh(positions, values, color=[_KIND_COLORS.get(k, "C3") for _, k, *_ in mine])
            ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize="x-small", padding=2)
            ax.set_yticks(positions, labels=[name for name, *_ in mine], fontsize="small")
            ax.set_ylim(-0.7, len(mine) - 0.3)
            ax.margins(x=0.15)
            ax.set_xlabel(label)
        if metric != "gb_per_s":
            ax.set_yscale("log") if lines else ax.set_xscale("log")
        if ratio:
            (ax.axhline if lines else ax.axvline)(1.0, color="black", linewidth=0.8)
        rows_text = "matmul rows" if matmul else "rows"
        ax.set_title(f"{rows_text} / baseline {baseline}" if metric == "ratio_to_fpemu" else
                     f"{rows_text} compared with baseline {baseline}", fontsize="medium")  # fmt: skip
        ax.grid(axis=value_axis, alpha=0.3, which="both")
    kinds = [k for _, k, *_ in table]
    handles: list[Any]
    if lines:
        handles = [Line2D([], [], color="0.3", linestyle=s, label=k) for k, s in _KIND_LINES.items() if k in kinds]
    else:
        handles = [Patch(color=c, label=k) for k, c in _KIND_COLORS.items() if k in kinds]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize="small", title="kind")
    fig.suptitle(title or f"fpemu bench: {metric}")
    return _save(fig, path, ("name", "kind", "baseline", metric), [row[:4] for row in table])


_RENAMED = {
    "RECIPE_STYLES": "MATMUL_FORMAT_STYLES",
    "WIDE_RECIPES": "WIDE_MATMUL_FORMATS",
    "recipe_label": "format_label",
    "recipe_style": "matmul_format_style",
}


def __getattr__(name: str) -> Any:
    """``RECIPE_STYLES``, ``WIDE_RECIPES``, ``recipe_label`` and ``recipe_style``, this module's names of
    `MATMUL_FORMAT_STYLES`, `WIDE_MATMUL_FORMATS`, `format_label` and `matmul_format_style` in earlier
    releases: kept for one release, with a `DeprecationWarning`."""
    if name in _RENAMED:
        warn_renamed(f"fpemu.tools.plot.{name}", f"fpemu.tools.plot.{_RENAMED[name]}")
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'fpemu.tools.plot' has no attribute {name!r}")
