"""The ``fpemu bench`` and ``fpemu plot`` commands: their options (`add_bench_parser`, `add_plot_parser`) and handlers.

Every option is checked where it is parsed, and a bad value is a usage error (exit status 2) that
names the flag, what was wrong, the closest valid names (those that start with what was typed
first: ``--block-formats mxfp8`` suggests ``mxfp8_e4m3`` and ``mxfp8_e5m2``) and every valid one
(`fpemu.tools.choices`). An option that the chosen plot does not use is refused too.
docs/benchmarks.md describes both commands.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import fpemu
from fpemu.testing import text_table
from fpemu.tools import accuracy, bench, choices, commands, data, plot

WIDTH = 100  # prose is wrapped to this many columns

# The pictures of ``fpemu plot`` (``all`` draws every one) and the file each is written to (a CSV beside it).
PLOT_KINDS = ("values", "rounding-error", "qsnr", "matmul-error")
PLOT_FILES = {kind: kind.replace("-", "_") + ".png" for kind in PLOT_KINDS}
# Which plots use each option of ``fpemu plot``.
PLOT_OPTIONS = {
    "formats": ("values", "rounding-error"),
    "modes": ("rounding-error",),
    "block_formats": ("qsnr", "matmul-error"),
    "distributions": ("qsnr", "matmul-error"),
    "data": ("qsnr", "matmul-error"),
    "sizes": ("matmul-error",),
    "outer": ("matmul-error",),
    "seed": ("rounding-error", "qsnr", "matmul-error"),
}


class _RenamedFlag(argparse.Action):
    """``--block-formats``, and ``--recipes``, its name of earlier releases: kept for one release, with a
    note on stderr that names the new flag ("recipe" now means a training or inference recipe only)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        if option_string == "--recipes":
            print(
                f"{parser.prog}: --recipes is deprecated and will be removed in the next release; use "
                "--block-formats (the same values)",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, values)


def _add_block_formats(parser: argparse.ArgumentParser, parse: Any, help: str) -> None:
    """``--block-formats R,S,...`` (checked by ``parse``), and ``--recipes``, its hidden name of earlier releases."""
    parser.add_argument(
        "--block-formats", type=choices.option(parse), default=None, metavar="R,S,...", help=help
    )  # fmt: skip
    parser.add_argument(
        "--recipes", type=choices.option(parse), dest="block_formats", action=_RenamedFlag, help=argparse.SUPPRESS
    )


def _rounding_modes(text: str) -> list[str]:
    return choices.names("rounding mode", fpemu.ROUNDING_MODES)(text)


def _bench_formats(text: str) -> list[str]:
    """Formats for ``fpemu bench``: registered, and narrow enough to round float32 inputs."""
    fp32 = fpemu.get_format("fp32")
    formats = choices.format_names(text)
    wide = [f.name for f in formats if not f.fits_in(fp32)]
    if wide:
        fitting = [f.name for f in fpemu.formats() if f.fits_in(fp32)]
        raise ValueError(f"the bench rounds float32 inputs and {', '.join(wide)} does not fit in float32; "
                         f"choose from: {', '.join(fitting)}")  # fmt: skip
    return [f.name for f in formats]


def _distributions(text: str) -> list[str]:
    """``--distributions``: names from `fpemu.tools.data.DISTRIBUTIONS`, or ``none`` (only ``--data``)."""
    if text.strip() == "none":
        return []
    return choices.names("distribution", data.DISTRIBUTIONS)(text)


def add_bench_parser(subcommands: Any) -> argparse.ArgumentParser:
    """The ``bench`` subcommand and its options."""
    timer = subcommands.add_parser(
        "bench",
        help="time fpemu beside its peers (a representative subset; docs/benchmarks.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time fpemu.quantize, encode/pack, scaled quantization and matmuls beside lax.reduce_precision,\n"
        "jitted astype round trips, the ml_dtypes NumPy round trip, gfloat (if installed) and a NumPy copy.\n"
        "Prints ns/element, GB/s and the ratios to the copy and to fpemu, with the device and versions.",
        epilog="examples:\n  fpemu bench --quick\n  fpemu bench --json bench.json --plot bench-plots\n"
        "  fpemu bench --quick --formats e4m3fn,e2m1fn --block-formats mxfp4,nvfp4 --modes toward_zero --sizes 2^16,2^20",
    )
    timer.set_defaults(bench_parser=timer)
    timer.add_argument(
        "--quick",
        action="store_true",
        help="2^18 elements, 256^3 matmuls, few repeats (seconds); default: 2^24 and 2048^3 (minutes)",
    )
    timer.add_argument(
        "--formats", type=choices.option(_bench_formats), default=None, metavar="A,B,...",
        help=f"formats of the quantize rows (default {','.join(bench.QUICK_FORMATS)}, and "
        f"{','.join(f for f in bench.FULL_FORMATS if f not in bench.QUICK_FORMATS)} without --quick)",
    )  # fmt: skip
    _add_block_formats(
        timer, choices.block_format_names,
        "fpemu.scaled block formats: a scaled-qdq row each, and a matmul row for fpemu.scaled.matmul's formats "
        f"(default {','.join(bench.QUICK_BLOCK_FORMATS)}; {','.join(bench.FULL_BLOCK_FORMATS)} without --quick)",
    )  # fmt: skip
    timer.add_argument(
        "--modes", type=choices.option(_rounding_modes), default=None, metavar="M,N,...",
        help=f"rounding modes of the quantize rows, from {', '.join(fpemu.ROUNDING_MODES)} (nearest_even, the "
        "baseline, always runs; default stochastic, and toward_zero without --quick)",
    )  # fmt: skip
    timer.add_argument(
        "--sizes", type=choices.option(choices.sizes), default=None, metavar="N,M,...",
        help="elements per elementwise row, like 4096 or 2^20 (default 2^18 with --quick, else 2^24); several "
        "sizes time every row at each, named ROW@SIZE",
    )  # fmt: skip
    timer.add_argument(
        "--matmul-sizes", type=choices.option(choices.sizes), default=None, metavar="N,M,...",
        help="n of the n x n x n matmul rows (default 256 with --quick, else 2048)",
    )  # fmt: skip
    timer.add_argument(
        "--json", type=Path, default=None, metavar="FILE",
        help="also write the results as JSON (schema in docs/benchmarks.md)",
    )  # fmt: skip
    timer.add_argument(
        "--plot", type=Path, default=None, metavar="DIR",
        help="also write bar charts (PNG, each with a CSV of its numbers) into DIR; needs matplotlib "
        "(pip install 'fpemu[plot]')",
    )  # fmt: skip
    timer.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr (it is only drawn on a terminal anyway)"
    )
    return timer


def add_plot_parser(subcommands: Any) -> argparse.ArgumentParser:
    """The ``plot`` subcommand and its options."""
    draw = subcommands.add_parser(
        "plot",
        help="draw formats, rounding errors, block-format QSNR or matmul errors as PNG files (with CSV numbers)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write one PNG per picture into --out, and beside it a CSV file of the numbers it shows; print\n"
        "their paths (needs matplotlib: pip install 'fpemu[plot]').\n"
        "  values          every finite positive value of each format on a log2 axis (--formats)\n"
        "  rounding-error  the largest relative rounding error per binade, a panel per family of\n"
        "                  formats (--formats, --modes)\n"
        "  qsnr            QSNR of block formats on each data distribution (--block-formats, --distributions,\n"
        "                  --data)\n"
        "  matmul-error    QSNR of quantized matmuls against the inner dimension K, a panel per\n"
        "                  distribution (--block-formats, --sizes, --outer, --distributions, --data)\n"
        "  all             the four of them",
        epilog="examples:\n"
        "  fpemu plot values --formats e4m3fn,e5m2,e2m1fn\n"
        "  fpemu plot rounding-error --modes nearest_even,toward_zero,stochastic\n"
        "  fpemu plot qsnr --block-formats mxfp8_e4m3,mxfp4,nvfp4 --out plots\n"
        "  fpemu plot matmul-error --block-formats bf16,mxfp8_e4m3,nvfp4 --sizes 64,256,1024 --distributions heavy_tailed\n"
        "  fpemu plot matmul-error --data activations.npy,weights.npy --distributions none\n"
        "  fpemu plot all --out plots",
    )
    draw.set_defaults(plot_parser=draw)
    kinds = (*PLOT_KINDS, "all")
    draw.add_argument("kind", choices=kinds, metavar="KIND", help=f"one of {', '.join(kinds)}")
    draw.add_argument(
        "--formats", type=choices.option(choices.format_names), default=None, metavar="A,B,...",
        help=f"values: formats (default {','.join(plot.DEFAULT_FORMATS)}); rounding-error: formats (default "
        f"{','.join(plot.ROUNDING_ERROR_FORMATS)})",
    )  # fmt: skip
    draw.add_argument(
        "--modes", type=choices.option(_rounding_modes), default=None, metavar="M,N,...",
        help=f"rounding-error: rounding modes, from {', '.join(fpemu.ROUNDING_MODES)} (default nearest_even)",
    )  # fmt: skip
    _add_block_formats(
        draw, choices.split_list,
        "qsnr: fpemu.scaled block formats (default all); matmul-error: fpemu.scaled.matmul's formats "
        f"({', '.join(accuracy.MATMUL_FORMATS)}; default all)",
    )  # fmt: skip
    draw.add_argument(
        "--distributions", type=choices.option(_distributions), default=None, metavar="D,E,...",
        help=f"qsnr, matmul-error: data distributions, from {', '.join(data.DISTRIBUTIONS)} (default all), or "
        "none (only --data)",
    )  # fmt: skip
    draw.add_argument(
        "--data", type=choices.option(choices.split_list), default=None, metavar="A.npy,B.npy",
        help="qsnr: .npy files, each a data set; matmul-error: two .npy files, LHS (M x K, e.g. activations) "
        "and RHS (K x N, e.g. weights); float16/32/64, finite",
    )  # fmt: skip
    draw.add_argument(
        "--sizes", type=choices.option(choices.sizes), default=None, metavar="K,L,...",
        help=f"matmul-error: inner dimensions K (default {','.join(map(str, plot.DEFAULT_MATMUL_SIZES))}); "
        "with --data, the sizes below the data's K, and K",
    )  # fmt: skip
    draw.add_argument(
        "--outer", type=choices.option(choices.size), default=None, metavar="M",
        help=f"matmul-error: M = N of the drawn operands (default {plot.DEFAULT_OUTER})",
    )  # fmt: skip
    draw.add_argument(
        "--seed", type=choices.option(choices.integer(0)), default=None, metavar="S",
        help="rounding-error: the key of stochastic rounding; qsnr, matmul-error: the seed of the drawn data "
        "(default 0)",
    )  # fmt: skip
    draw.add_argument(
        "--out", type=Path, default=Path("."), metavar="DIR",
        help="the folder to write into (created if missing; default: the current folder)",
    )  # fmt: skip
    return draw


# -- bench ---------------------------------------------------------------------------------------------


class ProgressBar:
    """A one-line textual progress bar, redrawn in place with ``\\r``: ``[######......] 12/29 row``."""

    def __init__(self, stream, width: int = 30):
        self.stream, self.width, self.shown, self.start = stream, width, 0, time.perf_counter()

    def __call__(self, done: int, total: int, name: str) -> None:
        filled = self.width * done // max(total, 1)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {time.perf_counter() - self.start:5.1f} s"
        line += f"  {name}" if name else ""
        line = line[: WIDTH + 20]
        self.stream.write("\r" + line.ljust(self.shown))
        self.shown = len(line)
        if done >= total:  # finished: clear the line
            self.stream.write("\r" + " " * self.shown + "\r")
        self.stream.flush()


def _power(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _elements_text(row) -> str:
    if row.group == "matmul":
        return "x".join(map(str, (*row.shape, row.shape[-1])))
    return _power(row.elements)


def _g3(value: float) -> str:
    return f"{value:.3g}"


def bench_report(result: bench.BenchResult) -> str:
    """The text report of a `fpemu.tools.bench.run`: the machine, one row per timed call, how to read it."""
    meta = result.meta
    settings, device, versions = meta["settings"], meta["device"], meta["versions"]
    sizes = settings.get("sizes", [settings["elements"]])
    matmuls = settings.get("matmul_sizes", [settings["matmul_size"]])
    version_text = ", ".join(f"{lib} {version or 'not installed'}" for lib, version in versions.items())
    count = device["count"]
    head = [
        ["mode", f"{meta['mode']}: {', '.join(map(_power, sizes))} float32 elements per elementwise row, matmul "
                 + ", ".join(f"{m}x{m}x{m}" for m in matmuls)],
        ["device", f"{device['device_kind']} ({device['platform']}, {count} device{'s' if count > 1 else ''}); "
                   f"CPU {device['cpu']}, {device['cpus_usable']} usable"],
        ["versions", version_text],
        ["commit", meta["git_commit"] or "unknown"],
        ["date", meta["date"]],
    ]  # fmt: skip
    header = ["group", "row", "elements", "ns/element", "GB/s", "x copy", "x fpemu", "baseline"]
    rows = [
        [r.group, r.row, _elements_text(r), _g3(r.ns_per_element), _g3(r.gb_per_s), _g3(r.ratio_to_copy),
         _g3(r.ratio_to_fpemu), "itself" if r.baseline == r.name else r.baseline]
        for r in result.rows
    ]  # fmt: skip
    lines = [text_table(head), "", text_table(rows, header, align="llrrrrrl"), ""]
    lines.append(
        textwrap.fill(
            "ns/element is the median time per element (per multiply-add for matmul rows) after two untimed "
            "warm-up calls (the first compiles); each timed call blocks until the result is ready. GB/s counts "
            "the input read and the output written once (8 bytes per element for float32 in and out). "
            "'x copy' is the ratio of ns/element to the NumPy copy's (the memory-bandwidth reference); "
            "'x fpemu' the ratio to the baseline row (fpemu nearest_even of the same format; for a block "
            "format, of its element format). Compare ratios within one run, not absolute times across runs.",
            width=WIDTH,
        )
    )
    for skip in meta["skipped"]:
        lines.append(f"skipped {skip['name']}: {skip['reason']}")
    lines.append(f"Bench done in {meta['seconds']:.1f} s.")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    """``fpemu bench``: time the selected rows, print the report, write the JSON and the charts asked for."""
    if args.plot is not None:
        try:
            plot.require_matplotlib()  # before the run, not after it
        except plot.MissingMatplotlibError as error:
            print(f"fpemu bench: error: --plot: {error}", file=sys.stderr)
            return 1
    settings = bench.QUICK if args.quick else bench.FULL
    selection = bench.select(settings, formats=args.formats, block_formats=args.block_formats, modes=args.modes,
                             sizes=args.sizes, matmul_sizes=args.matmul_sizes)  # fmt: skip
    bar = ProgressBar(sys.stderr) if not args.no_progress and sys.stderr.isatty() else None

    def progress(done: int, total: int, name: str) -> None:
        commands.check_interrupted()  # Ctrl-C between rows, even where JAX swallowed the KeyboardInterrupt
        if bar is not None:
            bar(done, total, name)

    result = bench.run(settings, selection=selection, progress=progress)
    print(bench_report(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, indent=2, allow_nan=False)
            f.write("\n")
        print(f"wrote {args.json}")
    if args.plot is not None:
        for metric, name in (("ns_per_element", "bench.png"), ("ratio_to_fpemu", "bench_ratio_to_fpemu.png")):
            title = f"fpemu bench ({result.meta['mode']}, {result.meta['device']['device_kind']}): {metric}"
            written = plot.plot_bench(result.rows, args.plot / name, metric=metric, title=title)
            print(f"wrote {written}")
            print(f"wrote {plot.table_path(written)}")
    return 0


# -- plot ----------------------------------------------------------------------------------------------


def _check_block_formats(parser: argparse.ArgumentParser, kinds: tuple[str, ...], names: list[str] | None) -> list[str]:
    """The ``--block-formats`` of the chosen plots: fpemu.scaled block formats for qsnr, `fpemu.scaled.matmul`'s
    formats for matmul-error."""
    if names is None:
        return []
    out = names
    if "qsnr" in kinds:
        try:
            out = choices.block_format_names(",".join(names))
        except ValueError as error:
            parser.error(f"argument --block-formats: qsnr: {error}")
    if "matmul-error" in kinds:
        try:
            out = choices.matmul_format_names(names, accuracy.MATMUL_FORMATS)
        except ValueError as error:
            parser.error(f"argument --block-formats: matmul-error: {error}")
    return out


def _load_data(parser: argparse.ArgumentParser, kinds: tuple[str, ...], files: list[str] | None):
    """The ``--data`` files: arrays by name for qsnr, a `MatmulData` for matmul-error."""
    if files is None:
        return None, None
    if "matmul-error" in kinds and len(files) != 2:
        parser.error(f"argument --data: matmul-error takes two .npy files, LHS,RHS (M x K and K x N), got {len(files)}")
    try:
        arrays = {Path(f).name: data.load_array(f, what="--data file") for f in files}
        operands = data.load_matmul_data(*files) if "matmul-error" in kinds else None
    except ValueError as error:
        parser.error(f"argument --data: {error}")
    return arrays, operands


def cmd_plot(args: argparse.Namespace) -> int:
    """``fpemu plot``: check the options against the chosen plots, then draw each one (PNG and CSV)."""
    parser = args.plot_parser
    kinds = PLOT_KINDS if args.kind == "all" else (args.kind,)
    for option, used_by in PLOT_OPTIONS.items():
        if getattr(args, option) is not None and not set(kinds) & set(used_by):
            plural = "s" if len(used_by) > 1 else ""
            flag = option.replace("_", "-")
            parser.error(f"--{flag} is only used by the {' and '.join(used_by)} plot{plural}")
    if args.distributions == [] and args.data is None:
        parser.error("argument --distributions: 'none' leaves nothing to draw without --data")
    values_formats = args.formats or [fpemu.get_format(name) for name in plot.DEFAULT_FORMATS]
    if "values" in kinds:
        for fmt in values_formats:
            try:
                plot.check_drawable(fmt)
            except ValueError as error:
                parser.error(f"argument --formats: values: {error}")
    block_formats = _check_block_formats(parser, kinds, args.block_formats) or None
    arrays, operands = _load_data(parser, kinds, args.data)
    try:
        plot.require_matplotlib()
    except plot.MissingMatplotlibError as error:
        print(f"fpemu plot: error: {error}", file=sys.stderr)
        return 1
    seed = args.seed or 0
    for kind in kinds:
        commands.check_interrupted()
        path = args.out / PLOT_FILES[kind]
        if kind == "values":
            written = plot.plot_values(values_formats, path)
        elif kind == "rounding-error":
            written = plot.plot_rounding_error(args.formats or plot.ROUNDING_ERROR_FORMATS, path,
                                               modes=args.modes or ("nearest_even",), seed=seed)  # fmt: skip
        elif kind == "qsnr":
            written = plot.plot_qsnr(block_formats, path, seed=seed, distributions=args.distributions, arrays=arrays)
        else:
            written = plot.plot_matmul_error(block_formats, args.sizes or plot.DEFAULT_MATMUL_SIZES, path,
                                             distributions=args.distributions, data=operands,
                                             outer=args.outer or plot.DEFAULT_OUTER, seed=seed)  # fmt: skip
        print(written)
        print(plot.table_path(written))
    return 0
