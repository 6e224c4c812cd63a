"""The ``fpemu`` command line: list formats, inspect one, cast a value, run the demo, time, draw.

Usage::

    fpemu formats [--aliases]
    fpemu info FORMAT
    fpemu cast VALUE --to FORMAT [--rounding MODE] [--saturate] [--no-subnormals] [--seed N] [--random-bits K]
    fpemu demo
    fpemu bench [--quick] [--json FILE] [--plot DIR] [--no-progress]
    fpemu plot {values,rounding-error,qsnr,matmul-error,all} [--formats A,B,...] [--recipes R,S,...]
               [--sizes N,M,...] [--out DIR]

This module is the parser and `main`; the commands are `fpemu.tools.commands`, the exact rendering of
numbers and codes `fpemu.tools.numbers`. ``bench`` times a representative subset beside its peers
(`fpemu.tools.bench`); ``plot`` writes PNG files (`fpemu.tools.plot`, needs matplotlib:
``pip install 'fpemu[plot]'``). docs/benchmarks.md describes both.

Every number is printed exactly: as a decimal when that is exact and short, as ``2^k`` for powers of two,
as ``odd*2^k`` or ``(2-2^-n)*2^k`` otherwise, and as a hex float (``0x1.cp+8``) beside it where space allows.
``formats``/``info``/``cast``/``demo`` turn on ``jax_enable_x64`` while they run, so ``cast`` rounds from the
exact float64 value.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import jax

import fpemu
from fpemu.tools import commands, plot

# -- argument types --------------------------------------------------------------------------------


def _format_arg(name: str) -> fpemu.Format:
    """argparse ``type=``: a registered format; the error names the closest ones."""
    try:
        return fpemu.get_format(name)
    except fpemu.UnknownFormatError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _value_arg(text: str) -> float:
    """argparse ``type=``: a float from ``float()`` or ``float.fromhex()`` (``0x1.8p3``)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        if "0x" not in text.lower():  # float.fromhex would also read "abc" as 0xabc
            raise ValueError(text)
        return float.fromhex(text)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is beyond float64's range") from None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a number: {text.strip()!r} (write a decimal like 0.1 or 1e6, a hex float like 0x1.8p3, "
            "nan, inf or -0)"
        ) from None


def _int_arg(text: str) -> int:
    """argparse ``type=``: an integer (its range is checked where it is used, by fpemu itself)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text.strip()!r}") from None


_STDLIB_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _protect_negative_numbers(argv: list[str]) -> list[str]:
    """Let ``-1e6``, ``-inf``, ``-0x1p3`` be values: argparse would take them for options.

    argparse accepts only ``-12`` and ``-1.5`` as negative numbers; any other token that starts with
    ``-`` and parses as a number gets a leading space, which argparse reads as a positional (or option
    value) and ``float``/``int`` ignore.
    """
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        if token.startswith("-") and not _STDLIB_NEGATIVE_NUMBER.match(token):
            try:
                _value_arg(token)
            except argparse.ArgumentTypeError:
                pass
            else:
                token = " " + token
        out.append(token)
    return out


def _split_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list without empty items, got {text!r}")
    return items


def _format_list_arg(text: str) -> list[fpemu.Format]:
    """argparse ``type=``: ``e4m3fn,bf16``; an unknown name gives get_format's message (closest names)."""
    return [_format_arg(name) for name in _split_list(text)]


def _sizes_arg(text: str) -> list[int]:
    sizes = []
    for item in _split_list(text):
        try:
            size = int(item)
        except ValueError:
            size = 0
        if size < 1:
            raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {item!r}")
        sizes.append(size)
    return sizes


# -- entry point -----------------------------------------------------------------------------------

_COMMANDS = {
    "formats": commands.cmd_formats, "info": commands.cmd_info, "cast": commands.cmd_cast,
    "demo": commands.cmd_demo, "bench": commands.cmd_bench, "plot": commands.cmd_plot,
}  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fpemu",
        description="Bit-exact low-precision floating-point formats: list them, inspect one, cast a value, time and "
        "draw them.",
    )
    parser.add_argument("--version", action="version", version=f"fpemu {fpemu.__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    formats = subcommands.add_parser("formats", help="table of all registered formats")
    formats.add_argument("--aliases", action="store_true", help="also list every accepted name")

    info = subcommands.add_parser("info", help="facts about one format, and its code table (<= 8 bits)")
    info.add_argument("format", type=_format_arg, metavar="FORMAT", help="a format name, e.g. e4m3fn or bf16")

    cast = subcommands.add_parser(
        "cast",
        help="round one value to a format",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Round VALUE, from its exact float64 value, to a format; show the result, its code and\n"
        "the rounding error.",
        epilog="examples:\n"
        "  fpemu cast 464 --to e4m3fn\n"
        "  fpemu cast 0x1.8p3 --to e2m1fn\n"
        "  fpemu cast -1e6 --to e5m2 --rounding toward_zero\n"
        "  fpemu cast 0.1 --to bf16 --rounding stochastic --seed 3",
    )
    cast.set_defaults(cast_parser=cast)
    cast.add_argument(
        "value", type=_value_arg, metavar="VALUE", help="a decimal (0.1, 1e6, -0), a hex float (0x1.8p3), nan or inf"
    )
    cast.add_argument("--to", type=_format_arg, required=True, metavar="FORMAT", help="the target format")
    cast.add_argument(
        "--rounding",
        default="nearest_even",
        choices=fpemu.ROUNDING_MODES,
        metavar="MODE",
        help=f"one of {', '.join(fpemu.ROUNDING_MODES)} (default nearest_even)",
    )
    cast.add_argument("--saturate", action="store_true", help="clamp overflow and infinities to +-max")
    cast.add_argument("--no-subnormals", action="store_true", help="flush subnormal results to zero")
    cast.add_argument("--seed", type=int, default=None, help="stochastic rounding: jax.random.key(SEED), default 0")
    cast.add_argument(
        "--random-bits",
        type=_int_arg,
        default=None,
        metavar="K",
        help=f"stochastic rounding: random bits per value, 1 to 32 (default {fpemu.DEFAULT_RANDOM_BITS})",
    )

    subcommands.add_parser("demo", help="a quick tour: formats, quantization error per mode, overflow")

    timer = subcommands.add_parser(
        "bench",
        help="time fpemu beside its peers (a representative subset; docs/benchmarks.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time fpemu.quantize, encode/pack, scaled quantization and matmuls beside lax.reduce_precision,\n"
        "jitted astype round trips, the ml_dtypes NumPy round trip, gfloat (if installed) and a NumPy copy.\n"
        "Prints ns/element, GB/s and the ratios to the copy and to fpemu, with the device and versions.",
        epilog="examples:\n  fpemu bench --quick\n  fpemu bench --json bench.json --plot bench-plots",
    )
    timer.add_argument(
        "--quick",
        action="store_true",
        help="2^18 elements, 256^3 matmuls, few repeats (seconds); default: 2^24 and 2048^3 (minutes)",
    )
    timer.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the results as JSON (schema in docs/benchmarks.md)",
    )
    timer.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write bar charts (PNG) into DIR; needs matplotlib (pip install 'fpemu[plot]')",
    )
    timer.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr (it is only drawn on a terminal anyway)"
    )

    draw = subcommands.add_parser(
        "plot",
        help="draw formats, rounding errors, recipe QSNR or matmul errors as PNG files",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write one PNG per picture into --out and print its path (needs matplotlib:\n"
        "pip install 'fpemu[plot]').\n"
        "  values          every finite positive value of each format on a log2 axis (--formats)\n"
        "  rounding-error  relative rounding error against magnitude, with eps/2 (--formats)\n"
        "  qsnr            QSNR of scaling recipes on Gaussian and heavy-tailed data (--recipes)\n"
        "  matmul-error    relative error of quantized matmuls against size (--recipes, --sizes)\n"
        "  all             the four of them",
        epilog="examples:\n"
        "  fpemu plot values --formats e4m3fn,e5m2,e2m1fn\n"
        "  fpemu plot qsnr --recipes mxfp8_e4m3,mxfp4,nvfp4 --out plots\n"
        "  fpemu plot all --out plots",
    )
    draw.set_defaults(plot_parser=draw)
    draw.add_argument(
        "kind",
        choices=(*commands.PLOT_KINDS, "all"),
        metavar="KIND",
        help=f"one of {', '.join(commands.PLOT_KINDS)}, all",
    )
    draw.add_argument(
        "--formats",
        type=_format_list_arg,
        default=None,
        metavar="A,B,...",
        help=f"formats, comma-separated (default {','.join(plot.DEFAULT_FORMATS)})",
    )
    draw.add_argument(
        "--recipes",
        type=_split_list,
        default=None,
        metavar="R,S,...",
        help="qsnr: fpemu.scaled recipes (default all); matmul-error: names from "
        "fpemu.tools.accuracy.MATMUL_RECIPES (default all)",
    )
    draw.add_argument(
        "--sizes",
        type=_sizes_arg,
        default=None,
        metavar="N,M,...",
        help="matmul-error: matmul sizes n (default 64,128,256,512)",
    )
    draw.add_argument(
        "--out",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the folder to write into (created if missing; default: the current folder)",
    )
    return parser


def _refuse_unknown_global_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """``fpemu --bogus``: name the flag (argparse would only say that COMMAND is missing)."""
    known = {flag for action in parser._actions for flag in action.option_strings}
    for arg in argv:
        if not arg.startswith("-"):
            return  # the command: its own parser checks its flags
        if arg.split("=", 1)[0] not in known:
            parser.error(
                f"unrecognized argument: {arg} (fpemu's own flags: {', '.join(sorted(known))}; "
                "command flags go after the command)"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fpemu`` command line.

    ``formats``, ``info``, ``cast`` and ``demo`` turn on ``jax_enable_x64`` while they run (and restore
    the previous setting after, for callers that run them in-process), so that values are rounded from
    their exact float64 value. ``bench`` and ``plot`` leave it as it is: they time and draw float32 work
    (``plot rounding-error`` rounds from float64 inside a ``jax.enable_x64`` context).

    Args:
      argv: the arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
      The exit status: 0 on success, 1 when an optional dependency is missing (matplotlib for
      ``plot`` and ``bench --plot``). Usage errors (unknown command, format, recipe or rounding mode)
      raise ``SystemExit(2)`` with argparse's message.

    Example:
      >>> main(["cast", "464", "--to", "e4m3fn"])  # doctest: +ELLIPSIS
      input     464.0  (0x1.dp+8)
      ...
      0
    """
    parser = _parser()
    args_list = _protect_negative_numbers(list(sys.argv[1:] if argv is None else argv))
    _refuse_unknown_global_flags(parser, args_list)
    args = parser.parse_args(args_list)
    previous_x64 = jax.config.read("jax_enable_x64")
    exact = args.command in ("formats", "info", "cast", "demo")
    if exact:
        jax.config.update("jax_enable_x64", True)
    try:
        status = _COMMANDS[args.command](args) or 0
        sys.stdout.flush()
    except BrokenPipeError:  # `fpemu info e4m3fn | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    finally:
        if exact:
            jax.config.update("jax_enable_x64", previous_x64)
    return status
