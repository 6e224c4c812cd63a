"""The ``fpemu`` command line: list formats, inspect one, cast a value, run the demo, time, draw.

Usage::

    fpemu formats [--aliases]
    fpemu info FORMAT
    fpemu cast VALUE --to FORMAT [--rounding MODE] [--saturate] [--no-subnormals] [--seed N] [--random-bits K]
    fpemu demo
    fpemu bench [--quick] [--json FILE] [--plot DIR] [--no-progress]
    fpemu plot {values,rounding-error,qsnr,matmul-error,all} [--formats A,B,...] [--recipes R,S,...]
               [--sizes N,M,...] [--out DIR]

``bench`` times a representative subset beside its peers (`fpemu.tools.bench`); ``plot`` writes PNG files
(`fpemu.tools.plot`, needs matplotlib: ``pip install 'fpemu[plot]'``). docs/benchmarks.md describes both.

Every number is printed exactly: as a decimal when that is exact and short, as ``2^k`` for powers of two,
as ``odd*2^k`` or ``(2-2^-n)*2^k`` otherwise, and as a hex float (``0x1.cp+8``) beside it where space allows.
``formats``/``info``/``cast``/``demo`` turn on ``jax_enable_x64`` while they run, so ``cast`` rounds from the
exact float64 value.
"""

from __future__ import annotations

import argparse
import decimal
import json
import math
import os
import re
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.tools import plot as _plot
from fpemu._core import registry as _registry
from fpemu._engine.convert import DEFAULT_RANDOM_BITS, ROUNDING_MODES, fits
from fpemu._core.format import Format

_CODE_TABLE_MAX_BITS = 8
_DEMO_SIZE = 2**14
_DEMO_RANGE_SCALE = 100.0
_WIDTH = 100  # prose is wrapped to this many columns

_SPECIALS_DOC = {
    "ieee": "IEEE 754: the all-ones exponent holds +-inf (mantissa 0) and NaN (mantissa != 0)",
    "fn": "finite: no infinity; only the all-ones magnitude code is NaN",
    "fnuz": "finite, unsigned zero: no infinity, no -0; the -0 code is the only NaN",
    "none": "every code is a finite number: no infinity, no NaN",
}

# -- formatting helpers ----------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[object]], header: Sequence[str] | None = None, align: str = "") -> str:
    """Lay out rows as plain-text columns separated by two spaces.

    Args:
      rows: the cells, one sequence per row; cells are converted with ``str``.
      header: column titles, underlined with dashes; None for a headerless (key/value) table.
      align: one ``"l"`` or ``"r"`` per column (missing columns are left-aligned).

    Returns:
      The table as lines joined by newlines, without trailing spaces.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    if header is not None:
        cells.insert(0, list(header))
    ncols = max((len(row) for row in cells), default=0)
    widths = [max((len(row[i]) for row in cells if i < len(row)), default=0) for i in range(ncols)]

    def line(row: list[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i < len(align) and align[i] == "r" else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return "  ".join(padded).rstrip()

    lines = [line(row) for row in cells]
    if header is not None:
        lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _prose(text: str) -> str:
    """Wrap a paragraph to the output width."""
    return textwrap.fill(" ".join(text.split()), width=_WIDTH)


def _exact_decimal(value: float) -> str | None:
    """The shortest decimal of a finite ``value`` if it is exact and at most 12 significant digits."""
    text = repr(value)
    exact = decimal.Decimal(text)
    if exact != decimal.Decimal(value) or len(exact.normalize().as_tuple().digits) > 12:
        return None
    return text[:-2] if text.endswith(".0") else text


def _num(value: float) -> str:
    """An exact, readable rendering of ``value``.

    NaN (with its sign), infinities and signed zeros are spelled out; powers of two outside ``[2^-4, 2^16]`` print as
    ``2^k``; other values as a short exact decimal when there is one, else as ``(2-2^-n)*2^k`` or
    ``odd*2^k``.

    Example:
      >>> [_num(v) for v in (448.0, -0.0, 2.0**-9, 0.75, float.fromhex("0x1.fffffep127"), 3 * 2.0**-24)]
      ['448', '-0', '2^-9', '0.75', '(2-2^-23)*2^127', '3*2^-24']
    """
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, magnitude = ("-" if value < 0 else ""), abs(value)
    numerator, denominator = magnitude.as_integer_ratio()
    shift = (numerator & -numerator).bit_length() - 1  # strip the power of two from an integer numerator
    odd, exponent = numerator >> shift, shift - (denominator.bit_length() - 1)
    if odd == 1 and not -4 <= exponent <= 16:
        return f"{sign}2^{exponent}"
    text = _exact_decimal(magnitude)
    if text is not None:
        return sign + text
    if odd == 1:
        return f"{sign}2^{exponent}"
    top = odd.bit_length() - 1
    if top >= 4 and odd + 1 == 1 << (top + 1):  # odd = 2^(top+1) - 1: the (2 - 2^-top) * 2^k shape of a max
        return f"{sign}(2-2^-{top})*2^{exponent + top}"
    return f"{sign}{odd}*2^{exponent}"


def _hex(value: float) -> str:
    """``float.hex`` without trailing zeros (``0x1.cp+8``); non-finite values as `_num`."""
    if not math.isfinite(value):
        return _num(value)
    mantissa, exponent = value.hex().split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"


def _num_full(value: float) -> str:
    """`_num`, then the shortest round-trip decimal where different, then the hex float."""
    text = _num(value)
    if not math.isfinite(value):
        return text
    plain = repr(value)
    if text not in (plain, plain.removesuffix(".0")):
        text += f" = {plain}"
    return f"{text}  ({_hex(value)})"


def _approx(value: Fraction) -> str:
    """A rational as its nearest float, marked ``~`` when that float is not exact."""
    as_float = float(value)
    return repr(as_float) if Fraction(as_float) == value else f"~{as_float!r}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _code_hex(code: int, fmt: Format) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}x}"


def _code_bits(code: int, fmt: Format) -> str:
    """The code's fields in binary, ``sign exponent mantissa`` separated by spaces."""
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    fields = [str((code >> (e + m)) & 1)] if fmt.signed else []
    fields.append(format((code >> m) & ((1 << e) - 1), f"0{e}b"))
    if m:
        fields.append(format(code & ((1 << m) - 1), f"0{m}b"))
    return " ".join(fields)


def _layout(fmt: Format) -> str:
    """The field layout as a column title, e.g. ``s eeee mmm``."""
    fields = ["s"] if fmt.signed else []
    fields.append("e" * fmt.exponent_bits)
    if fmt.mantissa_bits:
        fields.append("m" * fmt.mantissa_bits)
    return " ".join(fields)


def _classify(value: float, fmt: Format) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    return "subnormal" if abs(value) < fmt.min_normal else "normal"


def _decode_all(codes: Sequence[int], fmt: Format) -> list[float]:
    """Decode codes with `fpemu.decode` in float64 (the CLI runs with x64 on)."""
    array = jnp.asarray(np.asarray(codes, dtype=fmt.code_dtype))
    return [float(v) for v in np.asarray(fpemu.decode(array, fmt, jnp.float64))]


def _ulp(value: float, fmt: Format) -> float:
    """Spacing of ``fmt``'s values just above ``|value|`` (a finite value of ``fmt``)."""
    exponent = math.frexp(abs(value))[1] - 1 if value else fmt.emin
    return math.ldexp(1.0, max(exponent, fmt.emin) - fmt.mantissa_bits)


def _nan_codes(fmt: Format) -> int:
    if fmt.specials == "ieee":
        return ((1 << fmt.mantissa_bits) - 1) * (2 if fmt.signed else 1)
    return {"fn": 2 if fmt.signed else 1, "fnuz": 1, "none": 0}[fmt.specials]


def _format_row(fmt: Format) -> list[str]:
    return [
        fmt.name,
        str(fmt.bits),
        f"{fmt.exponent_bits}/{fmt.mantissa_bits}",
        str(fmt.bias),
        _num(fmt.max),
        _num(fmt.min_normal),
        _num(fmt.min_subnormal) if fmt.has_subnormals else "-",
        _num(fmt.eps),
        _yes(fmt.signed),
        _yes(fmt.has_inf),
        _yes(fmt.has_nan),
        _yes(fmt.has_negative_zero),
        fmt.specials,
    ]


_FORMAT_HEADER = [
    "name", "bits", "e/m", "bias", "max", "min normal", "min subnormal", "eps", "sign", "inf", "nan", "-0", "specials",
]
_FORMAT_ALIGN = "lrrrrrrr"


def _formats_table(with_aliases: bool = False) -> str:
    rows = [_format_row(fmt) for fmt in fpemu.formats()]
    header = list(_FORMAT_HEADER)
    if with_aliases:
        header.append("aliases")
        for row, fmt in zip(rows, fpemu.formats()):
            row.append(", ".join(_registry.aliases(fmt)[1:]) or "-")
    return _table(rows, header, _FORMAT_ALIGN)


# -- argument types --------------------------------------------------------------------------------


def _format_arg(name: str) -> Format:
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


def _random_bits_arg(text: str) -> int:
    try:
        bits = int(text)
    except ValueError:
        bits = 0
    if not 1 <= bits <= 32:
        raise argparse.ArgumentTypeError(f"must be an integer in [1, 32], got {text.strip()!r}")
    return bits


_STDLIB_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _protect_negative_numbers(argv: list[str]) -> list[str]:
    """Let ``-1e6``, ``-inf``, ``-0x1p3`` be values: argparse would take them for options.

    argparse accepts only ``-12`` and ``-1.5`` as negative numbers; any other token that starts with
    ``-`` and parses as a number gets a leading space, which argparse reads as a positional (or option
    value) and ``float``/``int`` ignore.
    """
    out = []
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


# -- commands --------------------------------------------------------------------------------------


def _cmd_formats(args: argparse.Namespace) -> None:
    print(_formats_table(with_aliases=args.aliases))
    print()
    print(_prose(
        "Values are exact: 2^k for powers of two, (2-2^-n)*2^k for the largest values of the wide formats. "
        "min subnormal is '-' for formats without subnormals. sign/inf/nan/-0 say which codes exist; "
        "specials is the layout (ieee: inf and NaN in the all-ones exponent; fn: no inf, the all-ones "
        "code is NaN; fnuz: no inf and no -0, the -0 code is NaN; none: no inf, no NaN)."
        + ("" if args.aliases else " Add --aliases for the other accepted names.")
    ))


def _facts(fmt: Format) -> list[list[str]]:
    sign_code = fmt.sign_mask
    nan_text = "no"
    if fmt.has_nan:
        count = _nan_codes(fmt)
        nan_text = f"yes: {count} code{'s' if count > 1 else ''}, canonical {_code_hex(fmt.nan_code, fmt)}"
    inf_text = "no"
    if fmt.has_inf:
        inf_text = f"yes: +inf {_code_hex(fmt.inf_code, fmt)}"
        if fmt.signed:
            inf_text += f", -inf {_code_hex(fmt.inf_code | sign_code, fmt)}"
    dtype = fmt.dtype
    return [
        ["name", fmt.name],
        ["aliases", ", ".join(_registry.aliases(fmt)[1:]) or "-"],
        ["bits", f"{fmt.bits} = {int(fmt.signed)} sign + {fmt.exponent_bits} exponent + {fmt.mantissa_bits} mantissa"],
        ["bias", str(fmt.bias)],
        ["exponents", f"emin {fmt.emin}, emax {fmt.emax}"],
        ["max", _num_full(fmt.max)],
        ["min normal", _num_full(fmt.min_normal)],
        ["min subnormal", _num_full(fmt.min_subnormal) if fmt.has_subnormals else "none (no subnormals)"],
        ["eps", _num_full(fmt.eps)],
        ["specials", f"{fmt.specials} ({_SPECIALS_DOC[fmt.specials]})"],
        ["signed", _yes(fmt.signed)],
        ["zero", _yes(fmt.has_zero)],
        ["inf", inf_text],
        ["nan", nan_text],
        ["-0", f"yes: {_code_hex(sign_code, fmt)}" if fmt.has_negative_zero else "no"],
        ["subnormals", _yes(fmt.has_subnormals)],
        ["code dtype", fmt.code_dtype.name],
        ["codes", str(fmt.num_codes)],
        ["dtype", dtype.name if dtype is not None else "none (no NumPy/ml_dtypes dtype with this encoding)"],
    ]


def _code_table(fmt: Format, codes: Sequence[int]) -> str:
    values = _decode_all(codes, fmt)
    rows = [
        [_code_hex(code, fmt), _code_bits(code, fmt), _classify(value, fmt), _num(value), _hex(value)]
        for code, value in zip(codes, values)
    ]
    return _table(rows, ["code", _layout(fmt), "class", "value", "hex"])


def _notable_codes(fmt: Format) -> list[int]:
    """Zero, the smallest values, one, max, inf and NaN, as positive codes (and -0), for wide formats."""
    m = fmt.mantissa_bits
    codes = [0] if fmt.has_zero else []
    if fmt.has_negative_zero:
        codes.append(fmt.sign_mask)
    if fmt.has_subnormals:
        codes.append(1)
    codes.append((1 << m) if fmt.has_zero else 0)
    one = fmt.bias << m
    if 0 < one <= fmt.max_code and fmt.magnitude_value(one) == 1.0:
        codes.append(one)
    codes.append(fmt.max_code)
    codes.extend(code for code in (fmt.inf_code, fmt.nan_code) if code is not None)
    return sorted(set(codes), key=codes.index)


def _cmd_info(args: argparse.Namespace) -> None:
    fmt: Format = args.format
    print(_table(_facts(fmt)))
    print()
    if fmt.bits <= _CODE_TABLE_MAX_BITS:
        print(f"All {fmt.num_codes} codes of {fmt.name}:")
        print(_code_table(fmt, range(fmt.num_codes)))
    else:
        print(
            f"The code table is only shown for formats of {_CODE_TABLE_MAX_BITS} bits or fewer "
            f"({fmt.name} has {fmt.num_codes} codes). Notable codes:"
        )
        print(_code_table(fmt, _notable_codes(fmt)))


def _cmd_cast(args: argparse.Namespace) -> None:
    fmt: Format = args.to
    stochastic = args.rounding == "stochastic"
    if not stochastic and (args.seed is not None or args.random_bits is not None):
        args.cast_parser.error("--seed and --random-bits are only used with --rounding stochastic")
    seed = 0 if args.seed is None else args.seed
    random_bits = args.random_bits or DEFAULT_RANDOM_BITS
    options = dict(rounding=args.rounding, saturate=args.saturate, subnormals=not args.no_subnormals)
    if stochastic:
        options.update(key=jax.random.key(seed), random_bits=random_bits)
    x = args.value
    result = float(fpemu.quantize(np.float64(x), fmt, **options))
    code = int(fpemu.encode(np.float64(x), fmt, **options))

    described = [args.rounding] + ([f"seed {seed}", f"random_bits {random_bits}"] if stochastic else [])
    described.append("saturate" if args.saturate else "no saturation")
    described.append("flush subnormals" if args.no_subnormals else "subnormals kept")
    code_text = f"{_code_hex(code, fmt)}  {_code_bits(code, fmt)}  ({_layout(fmt)})"
    if math.isnan(result) and not fmt.has_nan:
        decoded = _num(_decode_all([code], fmt)[0])
        code_text += f"  ({fmt.name} has no NaN code: encode stores NaN as this code, which decodes to {decoded})"
    rows = [
        ["input", f"{x!r}  ({_hex(x)})"],
        ["format", f"{fmt.name}: {fmt.bits} bits, e{fmt.exponent_bits}m{fmt.mantissa_bits}, max {_num(fmt.max)}"],
        ["rounding", ", ".join(described)],
        ["result", _num_full(result)],
        ["code", code_text],
        ["class", _classify(result, fmt)],
    ]
    if stochastic and math.isfinite(x):
        directed = dict(saturate=args.saturate, subnormals=not args.no_subnormals)
        low, high = (
            float(fpemu.quantize(np.float64(x), fmt, **dict(directed, rounding=mode)))
            for mode in ("toward_negative", "toward_positive")
        )
        if math.isfinite(low) and math.isfinite(high) and low != high:
            p_up = float((Fraction(x) - Fraction(low)) / (Fraction(high) - Fraction(low)))
            rows.append([
                "neighbours",
                f"{_num(low)} and {_num(high)}: rounds up with probability {p_up:.6g} (to within 2^-{random_bits})",
            ])
    if math.isfinite(x) and math.isfinite(result):
        error = Fraction(result) - Fraction(x)
        ulp = _ulp(result, fmt)
        rows.append(["error", f"{_approx(error)}  (result - input, exact unless marked ~)"])
        if x != 0:
            rows.append(["relative", f"{float(error / abs(Fraction(x))):.6g}  ((result - input) / |input|)"])
        rows.append(["in ulps", f"{_approx(error / Fraction(ulp))} ulp  (ulp = {_num(ulp)}, the spacing of "
                                f"{fmt.name} just above |result|)"])
    elif math.isfinite(x):
        rows.append(["error", f"none: {_why_not_finite(x, fmt)}"])
    else:
        rows.append(["error", "none: the input is not finite"])
    print(_table(rows))


def _why_not_finite(x: float, fmt: Format) -> str:
    """Why a finite input gave inf or NaN."""
    if not fmt.signed and (x < 0 or (x == 0 and not fmt.has_zero)):
        return f"the unsigned {fmt.name} has no {'negative values' if x < 0 else 'zero'}, so NaN"
    if fmt.has_inf:
        return f"overflow beyond max {_num(fmt.max)}; --saturate clamps to max"
    return f"overflow beyond max {_num(fmt.max)}: {fmt.name} has no infinity, so NaN; --saturate clamps to max"


def _demo_formats() -> list[Format]:
    fp32 = fpemu.get_format("fp32")
    return [fmt for fmt in fpemu.formats() if fmt.bits <= 16 and fits(fmt, fp32)]


def _error_stats(x: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(QSNR in dB over the finite results, fraction of non-finite results)."""
    finite = np.isfinite(q)
    if not finite.any():
        return math.nan, 1.0
    err = np.mean((q[finite] - x[finite]) ** 2)
    sig = np.mean(x[finite] ** 2)
    qsnr = math.inf if err == 0 else 10 * math.log10(sig / err)
    return qsnr, 1.0 - float(np.mean(finite))


def _db(qsnr: float) -> str:
    return "-" if math.isnan(qsnr) else ("inf" if math.isinf(qsnr) else f"{qsnr:.1f}")


def _pct(fraction: float) -> str:
    if fraction == 0:
        return "0"
    return f"{100 * fraction:.3g}%"


def _cmd_demo(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    key = jax.random.key(0)
    sample = np.random.default_rng(0).standard_normal(_DEMO_SIZE, dtype=np.float32)
    x32 = jnp.asarray(sample)
    x64 = sample.astype(np.float64)
    demo_formats = _demo_formats()

    print("1. The registered formats")
    print()
    print(_formats_table())
    print()
    print(_prose(
        "Same width does not mean same format: e4m3 (IEEE-like, has inf, max 240) and e4m3fn (OCP FP8, "
        "no inf, max 448) decode the same byte differently. The fnuz formats have a single NaN (the -0 "
        "code) and no -0; e2m1fn, e3m2fn and e2m3fn (OCP MX FP4/FP6) have no inf and no NaN; e8m0fnu is the "
        "unsigned power-of-two scale of the MX formats."
    ))
    print()

    print(f"2. Quantization error of {_DEMO_SIZE} standard-normal float32 values (numpy default_rng(0))")
    print()
    rows = []
    for fmt in demo_formats:
        row, nonfinite = [fmt.name], set()
        for mode in ROUNDING_MODES:
            q = fpemu.quantize(x32, fmt, rounding=mode, key=key if mode == "stochastic" else None)
            qsnr, bad = _error_stats(x64, np.asarray(q, dtype=np.float64))
            row.append(_db(qsnr))
            nonfinite.add(bad)
        low, high = min(nonfinite), max(nonfinite)
        row.append(_pct(low) if low == high else f"{_pct(low)}-{_pct(high)}")
        rows.append(row)
    print(_table(rows, ["format", *ROUNDING_MODES, "inf/nan"], "l" + "r" * (len(ROUNDING_MODES) + 1)))
    print()
    print(_prose(
        "Cells are QSNR in dB, 10*log10(mean(x^2) / mean((q - x)^2)) over the finite results: higher is "
        "better, and each mantissa bit adds about 6 dB under round-to-nearest. The directed modes "
        "(toward_*) are biased and lose about a bit; stochastic rounding (key 0) is unbiased but noisier "
        "than nearest; to_odd exists for exact double rounding, not accuracy. inf/nan is the fraction of "
        "results that overflowed or became NaN (a range when it depends on the mode): the unsigned "
        "e8m0fnu turns every negative value into NaN."
    ))
    print()

    scale = _DEMO_RANGE_SCALE
    print(f"3. Range: the same values times {scale:g}, nearest_even")
    print()
    scaled32 = x32 * jnp.float32(scale)
    scaled64 = np.asarray(scaled32, dtype=np.float64)
    rows, lost = [], {}
    for fmt in demo_formats:
        _, lost[fmt.name] = _error_stats(scaled64, np.asarray(fpemu.quantize(scaled32, fmt), dtype=np.float64))
        qsnr, bad = _error_stats(scaled64, np.asarray(fpemu.quantize(scaled32, fmt, saturate=True), np.float64))
        rows.append([fmt.name, _num(fmt.max), _pct(lost[fmt.name]), _pct(bad), _db(qsnr)])
    print(_table(rows, ["format", "max", "inf/nan", "with saturate: inf/nan", "QSNR dB"], "lrrrr"))
    print()
    e4m3, e4m3fn = lost.get("e4m3"), lost.get("e4m3fn")
    if e4m3 is not None and e4m3fn is not None:
        print(_prose(
            f"Scaled by {scale:g}, {_pct(e4m3) if e4m3 else 'none'} of the values round beyond e4m3's max of "
            f"240 and become inf, while e4m3fn (max 448) loses {_pct(e4m3fn) if e4m3fn else 'none'}."
        ))
        print()
    print(_prose(
        "saturate=True clamps to +-max instead, which turns each lost value into a large but finite "
        "error: the QSNR column (saturating, over all values) shows what that costs. e2m1fn, e3m2fn and "
        "e2m3fn have neither inf nor NaN, so they saturate anyway: scale tensors into range first (the MX "
        "formats share one e8m0fnu scale per block of values)."
    ))
    print()
    print(f"Demo done in {time.perf_counter() - start:.1f} s.")


# -- bench and plot --------------------------------------------------------------------------------

_PLOT_KINDS = ("values", "rounding-error", "qsnr", "matmul-error")
_PLOT_FILES = {kind: kind.replace("-", "_") + ".png" for kind in _PLOT_KINDS}


def _split_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list without empty items, got {text!r}")
    return items


def _format_list_arg(text: str) -> list[Format]:
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


class _ProgressBar:
    """A one-line textual progress bar, redrawn in place with ``\\r``: ``[######......] 12/29 row``."""

    def __init__(self, stream, width: int = 30):
        self.stream, self.width, self.shown, self.start = stream, width, 0, time.perf_counter()

    def __call__(self, done: int, total: int, name: str) -> None:
        filled = self.width * done // max(total, 1)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {time.perf_counter() - self.start:5.1f} s"
        line += f"  {name}" if name else ""
        line = line[: _WIDTH + 20]
        self.stream.write("\r" + line.ljust(self.shown))
        self.shown = len(line)
        if done >= total:  # finished: clear the line
            self.stream.write("\r" + " " * self.shown + "\r")
        self.stream.flush()


def _elements_text(row) -> str:
    if row.group == "matmul":
        return "x".join(map(str, (*row.shape, row.shape[-1])))
    n = row.elements
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _g3(value: float) -> str:
    return f"{value:.3g}"


def _bench_report(result) -> str:
    meta = result.meta
    settings, device, versions = meta["settings"], meta["device"], meta["versions"]
    n, m = settings["elements"], settings["matmul_size"]
    version_text = ", ".join(f"{lib} {version or 'not installed'}" for lib, version in versions.items())
    count = device["count"]
    head = [
        ["mode", f"{meta['mode']}: 2^{n.bit_length() - 1} float32 elements per elementwise row, matmul {m}x{m}x{m}"],
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
    lines = [_table(head), "", _table(rows, header, "llrrrrrl"), ""]
    lines.append(_prose(
        "ns/element is the median time per element (per multiply-add for matmul rows) after two untimed "
        "warm-up calls (the first compiles); each timed call blocks until the result is ready. GB/s counts "
        "the input read and the output written once (8 bytes per element for float32 in and out). "
        "'x copy' is the ratio of ns/element to the NumPy copy's (the memory-bandwidth reference); "
        "'x fpemu' the ratio to the baseline row (fpemu nearest_even of the same format; for a scaled "
        "recipe, of its element format). Compare ratios within one run, not absolute times across runs."
    ))
    for skip in meta["skipped"]:
        lines.append(f"skipped {skip['name']}: {skip['reason']}")
    lines.append(f"Bench done in {meta['seconds']:.1f} s.")
    return "\n".join(lines)


def _cmd_bench(args: argparse.Namespace) -> int:
    from fpemu.tools import bench as _bench

    if args.plot is not None:
        try:
            _plot.require_matplotlib()  # before the run, not after it
        except _plot.MissingMatplotlibError as error:
            print(f"fpemu bench: error: --plot: {error}", file=sys.stderr)
            return 1
    show_progress = not args.no_progress and sys.stderr.isatty()
    result = _bench.run(_bench.QUICK if args.quick else _bench.FULL,
                        progress=_ProgressBar(sys.stderr) if show_progress else None)  # fmt: skip
    print(_bench_report(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.to_json(), f, indent=2, allow_nan=False)
            f.write("\n")
        print(f"wrote {args.json}")
    if args.plot is not None:
        for metric, name in (("ns_per_element", "bench.png"), ("ratio_to_fpemu", "bench_ratio_to_fpemu.png")):
            title = f"fpemu bench ({result.meta['mode']}, {result.meta['device']['device_kind']}): {metric}"
            print(f"wrote {_plot.plot_bench(result.rows, args.plot / name, metric=metric, title=title)}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    parser = args.plot_parser
    kinds = _PLOT_KINDS if args.kind == "all" else (args.kind,)
    for option, used_by in (("formats", ("values", "rounding-error")), ("recipes", ("qsnr", "matmul-error")),
                            ("sizes", ("matmul-error",))):  # fmt: skip
        if getattr(args, option) is not None and not set(kinds) & set(used_by):
            plural = "s" if len(used_by) > 1 else ""
            parser.error(f"--{option} is only used by the {' and '.join(used_by)} plot{plural}")
    formats = args.formats or [fpemu.get_format(name) for name in _plot.DEFAULT_FORMATS]
    if "values" in kinds:
        for fmt in formats:
            try:
                _plot.check_drawable(fmt)
            except ValueError as error:
                parser.error(f"values: {error}")
    if "qsnr" in kinds and args.recipes is not None:
        for name in args.recipes:
            try:
                fpemu.scaled.get_recipe(name)
            except fpemu.scaled.UnknownRecipeError as error:
                parser.error(f"qsnr: {error}")
    if "matmul-error" in kinds:
        try:
            from fpemu.tools import accuracy as _accuracy
        except ImportError as error:
            print(f"fpemu plot: error: matmul-error needs fpemu.tools.accuracy, which cannot be imported: {error}",
                  file=sys.stderr)  # fmt: skip
            return 1
        if args.recipes is not None:
            try:
                _plot.check_choices("matmul recipe", args.recipes, _plot.names_of(_accuracy.MATMUL_RECIPES))
            except ValueError as error:
                parser.error(f"matmul-error: {error}")
    try:
        _plot.require_matplotlib()
    except _plot.MissingMatplotlibError as error:
        print(f"fpemu plot: error: {error}", file=sys.stderr)
        return 1
    for kind in kinds:
        path = args.out / _PLOT_FILES[kind]
        if kind == "values":
            written = _plot.plot_values(formats, path)
        elif kind == "rounding-error":
            written = _plot.plot_rounding_error(formats, path)
        elif kind == "qsnr":
            written = _plot.plot_qsnr(args.recipes, path)
        else:
            written = _plot.plot_matmul_error(args.recipes, args.sizes or _plot.DEFAULT_MATMUL_SIZES, path)
        print(written)
    return 0


# -- entry point -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fpemu",
        description="Bit-exact low-precision floating-point formats: list them, inspect one, cast a value, time and "
        "draw them.",
    )
    parser.add_argument("--version", action="version", version=f"fpemu {fpemu.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    formats = commands.add_parser("formats", help="table of all registered formats")
    formats.add_argument("--aliases", action="store_true", help="also list every accepted name")

    info = commands.add_parser("info", help="facts about one format, and its code table (<= 8 bits)")
    info.add_argument("format", type=_format_arg, metavar="FORMAT", help="a format name, e.g. e4m3fn or bf16")

    cast = commands.add_parser(
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
    cast.add_argument("value", type=_value_arg, metavar="VALUE",
                      help="a decimal (0.1, 1e6, -0), a hex float (0x1.8p3), nan or inf")
    cast.add_argument("--to", type=_format_arg, required=True, metavar="FORMAT", help="the target format")
    cast.add_argument("--rounding", default="nearest_even", choices=ROUNDING_MODES, metavar="MODE",
                      help=f"one of {', '.join(ROUNDING_MODES)} (default nearest_even)")
    cast.add_argument("--saturate", action="store_true", help="clamp overflow and infinities to +-max")
    cast.add_argument("--no-subnormals", action="store_true", help="flush subnormal results to zero")
    cast.add_argument("--seed", type=int, default=None, help="stochastic rounding: jax.random.key(SEED), default 0")
    cast.add_argument("--random-bits", type=_random_bits_arg, default=None, metavar="K",
                      help=f"stochastic rounding: random bits per value, 1 to 32 (default {DEFAULT_RANDOM_BITS})")

    commands.add_parser("demo", help="a quick tour: formats, quantization error per mode, overflow")

    bench = commands.add_parser(
        "bench",
        help="time fpemu beside its peers (a representative subset; docs/benchmarks.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time fpemu.quantize, encode/pack, scaled quantization and matmuls beside lax.reduce_precision,\n"
        "jitted astype round trips, the ml_dtypes NumPy round trip, gfloat (if installed) and a NumPy copy.\n"
        "Prints ns/element, GB/s and the ratios to the copy and to fpemu, with the device and versions.",
        epilog="examples:\n"
        "  fpemu bench --quick\n"
        "  fpemu bench --json bench.json --plot bench-plots",
    )
    bench.add_argument("--quick", action="store_true",
                       help="2^18 elements, 256^3 matmuls, few repeats (seconds); default: 2^24 and 2048^3 (minutes)")
    bench.add_argument("--json", type=Path, default=None, metavar="FILE",
                       help="also write the results as JSON (schema in docs/benchmarks.md)")
    bench.add_argument("--plot", type=Path, default=None, metavar="DIR",
                       help="also write bar charts (PNG) into DIR; needs matplotlib (pip install 'fpemu[plot]')")
    bench.add_argument("--no-progress", action="store_true",
                       help="no progress bar on stderr (it is only drawn on a terminal anyway)")

    plot = commands.add_parser(
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
    plot.set_defaults(plot_parser=plot)
    plot.add_argument("kind", choices=(*_PLOT_KINDS, "all"), metavar="KIND",
                      help=f"one of {', '.join(_PLOT_KINDS)}, all")
    plot.add_argument("--formats", type=_format_list_arg, default=None, metavar="A,B,...",
                      help=f"formats, comma-separated (default {','.join(_plot.DEFAULT_FORMATS)})")
    plot.add_argument("--recipes", type=_split_list, default=None, metavar="R,S,...",
                      help="qsnr: fpemu.scaled recipes (default all); matmul-error: names from "
                      "fpemu.tools.accuracy.MATMUL_RECIPES (default all)")
    plot.add_argument("--sizes", type=_sizes_arg, default=None, metavar="N,M,...",
                      help="matmul-error: matmul sizes n (default 64,128,256,512)")
    plot.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                      help="the folder to write into (created if missing; default: the current folder)")
    return parser


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
    args = parser.parse_args(args_list)
    commands = {
        "formats": _cmd_formats, "info": _cmd_info, "cast": _cmd_cast, "demo": _cmd_demo,
        "bench": _cmd_bench, "plot": _cmd_plot,
    }  # fmt: skip
    previous_x64 = jax.config.jax_enable_x64
    exact = args.command in ("formats", "info", "cast", "demo")
    if exact:
        jax.config.update("jax_enable_x64", True)
    try:
        status = commands[args.command](args) or 0
        sys.stdout.flush()
    except BrokenPipeError:  # `fpemu info e4m3fn | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    finally:
        if exact:
            jax.config.update("jax_enable_x64", previous_x64)
    return status
