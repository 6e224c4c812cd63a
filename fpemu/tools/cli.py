"""The ``fpemu`` command line: list formats, inspect one, cast a value, run the demo, time, draw.

Usage::

    fpemu formats [--aliases]
    fpemu info FORMAT
    fpemu cast VALUE --to FORMAT [--rounding MODE] [--saturate] [--no-subnormals] [--seed N] [--random-bits K]
    fpemu demo
    fpemu bench [--quick] [--formats A,B,...] [--block-formats R,S,...] [--modes M,N,...] [--sizes N,M,...]
                [--matmul-sizes N,M,...] [--json FILE] [--plot DIR] [--no-progress]
    fpemu plot {values,rounding-error,qsnr,matmul-error,all} [--formats A,B,...] [--modes M,N,...]
               [--block-formats R,S,...] [--distributions D,E,...] [--data A.npy,B.npy] [--sizes K,L,...]
               [--outer M] [--seed S] [--out DIR]
    fpemu sweep [--model mlp|transformer] [--recipes R,S,...] [--forms dot,bf16+dot] [--rounds N] [--compiles N]
                [--json FILE]

This module is the parser and `main`; the commands are `fpemu.tools.commands`, the exact rendering of
numbers and codes `fpemu.tools.numbers`. ``bench`` times a representative subset beside its peers
(`fpemu.tools.bench`); ``plot`` writes PNG files and the CSV of their numbers (`fpemu.tools.plot`, needs
matplotlib: ``pip install 'fpemu[plot]'``). Their options and handlers are `fpemu.tools.measure`;
``sweep`` times every training recipe's step on a small model (`fpemu.tools.sweep`). docs/benchmarks.md
describes the three.

Every number is printed exactly: as a decimal when that is exact and short, as ``2^k`` for powers of two,
as ``odd*2^k`` or ``(2-2^-n)*2^k`` otherwise, and as a hex float (``0x1.cp+8``) beside it where space allows.
``formats``/``info``/``cast``/``demo`` turn on ``jax_enable_x64`` while they run. ``cast`` reads VALUE exactly
(``1e999``, ``0.1`` and ``0x1p2000`` are exact rationals, not float64 values) and rounds it once; ``fpemu cast -h``
says how. Ctrl-C stops any command with the one line ``interrupted`` and exit status 130.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax

import fpemu
from fpemu.tools import commands, measure, numbers, sweep

# -- argument types --------------------------------------------------------------------------------


def _format_arg(name: str) -> fpemu.Format:
    """argparse ``type=``: a registered format; the error names the closest ones."""
    try:
        return fpemu.get_format(name)
    except fpemu.UnknownFormatError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _value_arg(text: str) -> numbers.Number:
    """argparse ``type=``: a number read exactly (`fpemu.tools.numbers.parse_number`), never through float64."""
    try:
        return numbers.parse_number(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _int_arg(text: str) -> int:
    """argparse ``type=``: an integer (its range is checked where it is used, by fpemu itself)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text.strip()!r}") from None


def _int_range_arg(low: int, high: int, what: str) -> Callable[[str], int]:
    """argparse ``type=``: an integer from ``low`` to ``high``; the message gives the range and what it is for."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high} ({what}), got {text.strip()!r}")
        return value

    return parse


_MAX_RANDOM_BITS = 32  # what fpemu.quantize and fpemu.stochastic_bits accept (tests/tools/test_cli.py pins it)

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


# -- entry point -----------------------------------------------------------------------------------

_COMMANDS = {
    "formats": commands.cmd_formats, "info": commands.cmd_info, "cast": commands.cmd_cast,
    "demo": commands.cmd_demo, "bench": measure.cmd_bench, "plot": measure.cmd_plot, "sweep": sweep.cmd_sweep,
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
        help="round one value, read exactly, to a format",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Round VALUE to a format, once, from its exact value; show the result, its code and the\n"
        "rounding error.\n\n"
        "VALUE is read exactly, never through float64: a decimal (0.1, 1e999, -0,\n"
        "123456789012345678901234567890) or a hex float (0x1.8p3, 0x1p2000, -0x1p-1100) becomes an exact\n"
        f"rational (exponents up to +-{numbers.MAX_DECIMAL_EXPONENT} in decimal, +-{numbers.MAX_BINARY_EXPONENT} "
        "in hex); nan, inf and -inf\nare the special values. The 'input' line shows it exactly and, when it is not "
        "a float64,\nwhat a float64 parser would have made of it: '1e999  (exact; beyond float64's range, which\n"
        "would read it as inf)'. A float64 value is rounded by fpemu.quantize and fpemu.encode; any other\n"
        "value by the exact oracle fpemu.testing.reference (the same semantics, bit for bit), and the\n"
        "'rounded by' line says which. Stochastic rounding draws its random bits with\n"
        "fpemu.stochastic_bits(jax.random.key(SEED), ()), the bits fpemu.quantize draws for one value,\n"
        "whichever rounds it.",
        epilog="examples:\n"
        "  fpemu cast 464 --to e4m3fn\n"
        "  fpemu cast 0x1.8p3 --to e2m1fn\n"
        "  fpemu cast -1e6 --to e5m2 --rounding toward_zero\n"
        "  fpemu cast 1e999 --to e4m3fn --rounding toward_zero     # 448\n"
        "  fpemu cast 1e-999 --to e4m3fn --rounding toward_positive  # 2^-9, the smallest subnormal\n"
        "  fpemu cast 0.1 --to bf16 --rounding stochastic --seed 3",
    )
    cast.set_defaults(cast_parser=cast)
    cast.add_argument(
        "value", type=_value_arg, metavar="VALUE", help=f"the number, read exactly: {numbers.NUMBER_SPELLINGS}"
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
    cast.add_argument(
        "--seed",
        type=_int_range_arg(-(2**63), 2**63 - 1, "a jax.random.key seed"),
        default=None,
        help="stochastic rounding: jax.random.key(SEED), default 0",
    )
    cast.add_argument(
        "--random-bits",
        type=_int_range_arg(1, _MAX_RANDOM_BITS, "random bits per value"),
        default=None,
        metavar="K",
        help=f"stochastic rounding: random bits per value, 1 to {_MAX_RANDOM_BITS} "
        f"(default {fpemu.DEFAULT_RANDOM_BITS})",
    )

    subcommands.add_parser("demo", help="a quick tour: formats, quantization error per mode, overflow")

    measure.add_bench_parser(subcommands)  # fpemu.tools.measure: the options of bench and plot
    measure.add_plot_parser(subcommands)
    sweep.add_sweep_parser(subcommands)  # fpemu.tools.sweep: the training recipes' compile and step times
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


def _refuse_unknown_command_flags(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """``fpemu cast 1 --to bf16 --bogus``: name the argument and list the command's own flags."""
    choices = next(action.choices for action in parser._actions if isinstance(action.choices, dict))
    command_parser = choices[command]
    flags = sorted(
        {flag for action in command_parser._actions for flag in action.option_strings if flag.startswith("--")}
    )
    plural = "s" if len(unknown) > 1 else ""
    listed = ", ".join(flags)
    command_parser.error(f"unrecognized argument{plural}: {' '.join(unknown)} (the flags of fpemu {command}: {listed})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fpemu`` command line.

    ``formats``, ``info``, ``cast`` and ``demo`` turn on ``jax_enable_x64`` while they run (and restore
    the previous setting after, for callers that run them in-process), so that a float64 VALUE of ``cast``
    is rounded from its own value (any other VALUE is rounded exactly by `fpemu.testing.reference`).
    ``bench`` and ``plot`` leave it as it is: they time and draw float32 work (``plot rounding-error``
    rounds from float64 inside a ``jax.enable_x64`` context).

    Ctrl-C stops every command with one line, ``interrupted``, on stderr and exit status 130 (128 + SIGINT),
    as shells report it. ``main`` installs its own SIGINT handler while a command runs (when called from the
    main thread): the handler records the interrupt and raises KeyboardInterrupt. Where that exception is
    swallowed (the signal landed in a garbage-collection callback or a ``__del__``, which JAX has), the record
    stays: the demo checks it between its steps, and every command checks it when it ends.

    Args:
      argv: the arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
      The exit status: 0 on success, 1 when an optional dependency is missing (matplotlib for
      ``plot`` and ``bench --plot``), 130 after Ctrl-C. Usage errors (unknown command, flag, format,
      block format or rounding mode, a VALUE that is not a number) raise ``SystemExit(2)`` with argparse's
      message, which names the argument and what it accepts.

    Example:
      >>> main(["cast", "464", "--to", "e4m3fn"])  # doctest: +ELLIPSIS
      input       464.0  (0x1.dp+8)
      ...
      0
    """
    parser = _parser()
    args_list = _protect_negative_numbers(list(sys.argv[1:] if argv is None else argv))
    _refuse_unknown_global_flags(parser, args_list)
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        _refuse_unknown_command_flags(parser, args.command, unknown)
    previous_x64 = jax.config.read("jax_enable_x64")
    exact = args.command in ("formats", "info", "cast", "demo")
    if exact:
        jax.config.update("jax_enable_x64", True)
    restore_interrupts = _catch_interrupts()
    try:
        status = _COMMANDS[args.command](args) or 0
        commands.check_interrupted()
        sys.stdout.flush()
    except KeyboardInterrupt:
        restore_interrupts()  # a second Ctrl-C from here on stops at once
        _flush_quietly()
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `fpemu info e4m3fn | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    finally:
        restore_interrupts()
        if exact:
            jax.config.update("jax_enable_x64", previous_x64)
    return status


# -- Ctrl-C ----------------------------------------------------------------------------------------


def on_interrupt(signum: int, frame: object) -> None:
    """The SIGINT handler `main` installs: record the interrupt (`fpemu.tools.commands.INTERRUPTED`), then raise."""
    commands.INTERRUPTED.set()
    raise KeyboardInterrupt


def _catch_interrupts() -> Callable[[], None]:
    """Install `on_interrupt` and a ``sys.unraisablehook`` that keeps quiet about a swallowed interrupt (it is
    recorded, and reported as ``interrupted`` later); return the function that puts the previous ones back."""
    commands.INTERRUPTED.clear()
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            commands.INTERRUPTED.set()
            return
        previous_hook(unraisable)

    sys.unraisablehook = hook
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        previous_handler = signal.signal(signal.SIGINT, on_interrupt)
    restored = False

    def restore() -> None:
        nonlocal restored
        if restored:
            return
        restored = True
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
        sys.unraisablehook = previous_hook

    return restore


def _flush_quietly() -> None:
    """Flush stdout before the ``interrupted`` line, ignoring a closed pipe."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
