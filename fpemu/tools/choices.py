"""Names and numbers chosen on the command line: the checks and hints of ``fpemu bench``, ``plot`` and ``sweep``.

Every check raises `ValueError` with a message that names what was wrong, suggests the closest valid
names and lists every valid one; `option` turns such a check into an argparse ``type=``, so that the
usage error also names the flag (``argument --block-formats: unknown matmul format 'mxfp9'; did you mean
'mxfp8_e4m3', 'mxfp8_e5m2'? choose from: ...``).

Suggestions put the valid names that *start with* what was typed first (``mxfp8`` -> ``mxfp8_e4m3``,
``mxfp8_e5m2``), then close spellings (``mxfp9`` -> ``mxfp4``), case-insensitively.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import fpemu

T = TypeVar("T")

_MAX_HINTS = 4


def suggestions(name: str, choices: Iterable[str]) -> list[str]:
    """The valid names closest to ``name``: those that start with it, then close spellings (at most 4).

    Example:
      >>> suggestions("mxfp8", ["fp32", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"])
      ['mxfp8_e4m3', 'mxfp8_e5m2', 'mxfp4']
      >>> suggestions("NVFP", ["mxfp4", "nvfp4"])
      ['nvfp4']
    """
    choices = list(dict.fromkeys(choices))
    key = name.strip().lower()
    if not key:
        return []
    prefixed = [c for c in choices if c.lower().startswith(key)]
    lowered = {c.lower(): c for c in choices}
    close = [lowered[c] for c in difflib.get_close_matches(key, list(lowered), n=_MAX_HINTS, cutoff=0.6)]
    return list(dict.fromkeys(prefixed + close))[: max(_MAX_HINTS, len(prefixed))]


def unknown(what: str, names: Sequence[str], choices: Sequence[str]) -> str:
    """The message for unknown ``names``: what they are, the closest valid names, every valid name.

    Example:
      >>> unknown("distribution", ["normal"], ["gaussian", "heavy_tailed"])
      "unknown distribution 'normal'; choose from: gaussian, heavy_tailed"
    """
    hints = list(dict.fromkeys(h for name in names for h in suggestions(name, choices)))
    hint = f"did you mean {', '.join(map(repr, hints))}? " if hints else ""
    plural = "s" if len(names) > 1 else ""
    return f"unknown {what}{plural} {', '.join(map(repr, names))}; {hint}choose from: {', '.join(choices)}"


def check_names(what: str, names: Sequence[str], choices: Sequence[str]) -> list[str]:
    """``names`` as a list if every one is in ``choices``; else ValueError (`unknown`'s message).

    An empty list is refused too, with the choices.

    Example:
      >>> check_names("rounding mode", ["toward_zero"], fpemu.ROUNDING_MODES)
      ['toward_zero']
    """
    missing = [name for name in names if name not in choices]
    if missing:
        raise ValueError(unknown(what, missing, choices))
    if not names:
        raise ValueError(f"no {what}s given; choose from: {', '.join(choices)}")
    return list(names)


def matmul_format(name: object, what: str = "matmul format", valid: Sequence[str] | None = None) -> str:
    """A `fpemu.scaled.matmul` format's name: one of ``MATMUL_FORMATS``, or an alias that
    `fpemu.scaled.get_block_format` accepts for one (``"mxfp8"`` -> ``"mxfp8_e4m3"``, as `fpemu.scaled.matmul`
    takes it); else ValueError (`unknown`'s message).

    Example:
      >>> matmul_format("mxfp8"), matmul_format("bf16")
      ('mxfp8_e4m3', 'bf16')
    """
    valid = fpemu.scaled.MATMUL_FORMATS if valid is None else valid
    if isinstance(name, str):
        if name in valid:
            return name
        try:
            canonical = fpemu.scaled.get_block_format(name).name
        except fpemu.scaled.UnknownBlockFormatError:
            canonical = ""
        if canonical in valid:
            return canonical
    raise ValueError(unknown(what, [str(name)], valid))


def matmul_format_names(names: Sequence[str], valid: Sequence[str] | None = None) -> list[str]:
    """`matmul_format` of each name (``valid``: the formats, default ``MATMUL_FORMATS``), without repeats;
    an empty list is refused, listing the formats."""
    if not names:
        choices = fpemu.scaled.MATMUL_FORMATS if valid is None else valid
        raise ValueError(f"no matmul formats given; choose from: {', '.join(choices)}")
    return list(dict.fromkeys(matmul_format(name, valid=valid) for name in names))


def split_list(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``; ValueError for an empty item (``"a,,b"``, ``""``)."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(f"expected a comma-separated list without empty items, got {text!r}")
    return items


def integer(minimum: int, what: str = "") -> Callable[[str], int]:
    """A parser, for `option`, of one integer at least ``minimum`` (0 or more); its message names the
    kind of integer and ``what`` it counts, where given.

    Example:
      >>> integer(1, "rounds")("15")
      15
      >>> integer(1, "rounds")("0")
      Traceback (most recent call last):
      ...
      ValueError: must be a positive integer (rounds), got '0'
    """
    kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer of at least {minimum}")
    counted = f" ({what})" if what else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise ValueError(f"must be {kind}{counted}, got {text.strip()!r}")
        return value

    return parse


_POWER = re.compile(r"^2\s*(?:\^|\*\*)\s*(\d+)$")


def size(text: str) -> int:
    """A positive integer: ``4096``, ``2^12`` or ``2**12``.

    Example:
      >>> size("2^10"), size("2**3"), size("96")
      (1024, 8, 96)
    """
    text = text.strip()
    power = _POWER.match(text)
    try:
        value = 1 << int(power.group(1)) if power else int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"sizes must be positive integers (like 4096 or 2^12), got {text!r}")
    return value


def sizes(text: str) -> list[int]:
    """A comma-separated list of `size`, duplicates removed, in the order given.

    Example:
      >>> sizes("64, 2^8,64")
      [64, 256]
    """
    return list(dict.fromkeys(size(item) for item in split_list(text)))


def names(what: str, choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A parser of comma-separated names from ``choices`` (see `check_names`), for `option`."""

    def parse(text: str) -> list[str]:
        return list(dict.fromkeys(check_names(what, split_list(text), choices)))

    parse.__name__ = what.replace(" ", "_") + "s"
    return parse


def format_names(text: str) -> list[fpemu.Format]:
    """Comma-separated format names; an unknown one gives `fpemu.get_format`'s message (close names, all names)."""
    formats = []
    for name in split_list(text):
        try:
            formats.append(fpemu.get_format(name))
        except fpemu.UnknownFormatError as error:
            raise ValueError(str(error)) from None
    return list(dict.fromkeys(formats))


def block_format_names(text: str) -> list[str]:
    """Comma-separated `fpemu.scaled` block formats, as their canonical names (`fpemu.scaled.get_block_format`'s
    aliases are accepted); an unknown one gives get_block_format's message (close names, all of them)."""
    out = []
    for name in split_list(text):
        try:
            out.append(fpemu.scaled.get_block_format(name).name)
        except fpemu.scaled.UnknownBlockFormatError as error:
            raise ValueError(str(error)) from None
    return list(dict.fromkeys(out))


def option(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as an argparse ``type=``: its ValueError becomes the usage error ``argument --FLAG: message``."""

    def arg(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    arg.__name__ = getattr(parse, "__name__", "value")
    return arg
