"""The commands of the ``fpemu`` command line: ``formats``, ``info``, ``cast``, ``demo``.

Each ``cmd_*`` function takes the parsed arguments (`fpemu.tools.cli` builds the parser) and prints
its report; tables are laid out by `fpemu.testing.text_table` and numbers by `fpemu.tools.numbers`.
``bench`` and ``plot`` are in `fpemu.tools.measure`.
"""

from __future__ import annotations

import argparse
import math
import textwrap
import threading
import time
from collections.abc import Sequence
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.testing import reference, text_table
from fpemu.tools.numbers import (
    Number,
    approx,
    code_bits,
    code_hex,
    describe_number,
    exact,
    exact_full,
    float64_of,
    hex_float,
    layout,
    short,
)

_CODE_TABLE_MAX_BITS = 8
_DEMO_SIZE = 2**14
_DEMO_RANGE_SCALE = 100.0
WIDTH = 100  # prose is wrapped to this many columns

_SPECIALS_DOC = {
    "ieee": "IEEE 754: the all-ones exponent holds +-inf (mantissa 0) and NaN (mantissa != 0)",
    "fn": "finite: no infinity; only the all-ones magnitude code is NaN",
    "fnuz": "finite, unsigned zero: no infinity, no -0; the -0 code is the only NaN",
    "none": "every code is a finite number: no infinity, no NaN",
    "p3109": "IEEE P3109 extended domain: one NaN (signed: the -0 code; unsigned: the all-ones code) and "
    "infinity at the largest magnitude code that is not NaN",
}

# -- Ctrl-C ----------------------------------------------------------------------------------------

# Set by `fpemu.tools.cli.main`'s SIGINT handler. Its KeyboardInterrupt is lost when the signal lands in a
# garbage-collection callback or a ``__del__`` (JAX runs some), so long commands also check this flag.
INTERRUPTED = threading.Event()


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed while `fpemu.tools.cli.main` runs, even if that interrupt was
    swallowed where it landed; long commands call it between steps."""
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


# -- formatting helpers ----------------------------------------------------------------------------


def _prose(text: str) -> str:
    """Wrap a paragraph to the output width."""
    return textwrap.fill(" ".join(text.split()), width=WIDTH)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _classify(value: float, fmt: fpemu.Format) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    return "subnormal" if abs(value) < fmt.min_normal else "normal"


def _decode_all(codes: Sequence[int], fmt: fpemu.Format) -> list[float]:
    """Decode codes with `fpemu.decode` in float64 (the CLI runs with x64 on)."""
    array = jnp.asarray(np.asarray(codes, dtype=fmt.code_dtype))
    return [float(v) for v in np.asarray(fpemu.decode(array, fmt, jnp.float64))]


def _ulp(value: float, fmt: fpemu.Format) -> float:
    """Spacing of ``fmt``'s values just above ``|value|`` (a finite value of ``fmt``)."""
    exponent = math.frexp(abs(value))[1] - 1 if value else fmt.emin
    return math.ldexp(1.0, max(exponent, fmt.emin) - fmt.mantissa_bits)


def _nan_codes(fmt: fpemu.Format) -> int:
    if fmt.specials == "ieee":
        return ((1 << fmt.mantissa_bits) - 1) * (2 if fmt.signed else 1)
    return {"fn": 2 if fmt.signed else 1, "fnuz": 1, "none": 0, "p3109": 1}[fmt.specials]


def _fixed_point(fmt: fpemu.Format) -> bool:
    """No exponent field (OCP INT8, P3109 with P = K): values are integer multiples of ``fmt.min_subnormal``, and the
    smallest normal, ``2^emin``, lies above max, so every nonzero value is a subnormal as fpemu (and gfloat) count
    them, but the two's-complement ``min`` (-2 for OCP INT8)."""
    return fmt.exponent_bits == 0


def _format_row(fmt: fpemu.Format) -> list[str]:
    fixed = _fixed_point(fmt)
    return [
        fmt.name,
        str(fmt.bits),
        f"{fmt.exponent_bits}/{fmt.mantissa_bits}",
        "-" if fixed else str(fmt.bias),
        exact(fmt.max),
        "-" if fixed else exact(fmt.min_normal),
        exact(fmt.min_subnormal) if fmt.has_subnormals else "-",
        exact(fmt.eps),
        _yes(fmt.signed),
        _yes(fmt.has_inf),
        _yes(fmt.has_nan),
        _yes(fmt.has_negative_zero),
        fmt.specials,
    ]


_FORMAT_HEADER = [
    "name",
    "bits",
    "e/m",
    "bias",
    "max",
    "min normal",
    "min subnormal",
    "eps",
    "sign",
    "inf",
    "nan",
    "-0",
    "specials",
]
_FORMAT_ALIGN = "lrrrrrrr"


def formats_table(with_aliases: bool = False) -> str:
    """The table of every registered format (``fpemu formats``), with their other names if asked."""
    rows = [_format_row(fmt) for fmt in fpemu.formats()]
    header = list(_FORMAT_HEADER)
    if with_aliases:
        header.append("aliases")
        for row, fmt in zip(rows, fpemu.formats()):
            row.append(", ".join(fpemu.format_aliases(fmt)[1:]) or "-")
    return text_table(rows, header, align=_FORMAT_ALIGN)


# -- commands --------------------------------------------------------------------------------------


def cmd_formats(args: argparse.Namespace) -> None:
    print(formats_table(with_aliases=args.aliases))
    print()
    print(
        _prose(
            "Values are exact: 2^k for powers of two, (2-2^-n)*2^k for the largest values of the wide formats. "
            "min subnormal is '-' for formats without subnormals. sign/inf/nan/-0 say which codes exist; "
            "specials is the layout (ieee: inf and NaN in the all-ones exponent; fn: no inf, the all-ones "
            "code is NaN; fnuz: no inf and no -0, the -0 code is NaN; none: no inf, no NaN; p3109: one NaN, inf at "
            "the largest other magnitude code). Fixed-point formats (e/m 0/n: int8_ocp, two's complement) have no bias and "
            "no normal values: their min subnormal is the step between values."
            + ("" if args.aliases else " Add --aliases for the other accepted names.")
        )
    )


def _facts(fmt: fpemu.Format) -> list[list[str]]:
    sign_code = fmt.sign_mask
    nan_text = "no"
    if fmt.nan_code is not None:
        count = _nan_codes(fmt)
        nan_text = f"yes: {count} code{'s' if count > 1 else ''}, canonical {code_hex(fmt.nan_code, fmt)}"
    inf_text = "no"
    if fmt.inf_code is not None:
        inf_text = f"yes: +inf {code_hex(fmt.inf_code, fmt)}"
        if fmt.signed:
            inf_text += f", -inf {code_hex(fmt.inf_code | sign_code, fmt)}"
    dtype = fmt.dtype
    rows = [
        ["name", fmt.name],
        ["aliases", ", ".join(fpemu.format_aliases(fmt)[1:]) or "-"],
        ["bits", f"{fmt.bits} = {int(fmt.signed)} sign + {fmt.exponent_bits} exponent + {fmt.mantissa_bits} mantissa"],
        ["bias", str(fmt.bias)],
        ["exponents", f"emin {fmt.emin}, emax {fmt.emax}"],
        ["max", exact_full(fmt.max)],
        ["min normal", exact_full(fmt.min_normal)],
        ["min subnormal", exact_full(fmt.min_subnormal) if fmt.has_subnormals else "none (no subnormals)"],
        ["eps", _eps_text(fmt)],
        ["specials", f"{fmt.specials} ({_SPECIALS_DOC[fmt.specials]})"],
        ["signed", _yes(fmt.signed) + (" (two's-complement codes)" if fmt.twos_complement else "")],
        ["zero", _yes(fmt.has_zero)],
        ["inf", inf_text],
        ["nan", nan_text],
        ["-0", f"yes: {code_hex(sign_code, fmt)}" if fmt.has_negative_zero else "no"],
        ["subnormals", _yes(fmt.has_subnormals)],
        ["code dtype", fmt.code_dtype.name],
        ["codes", str(fmt.num_codes)],
        ["dtype", dtype.name if dtype is not None else "none (no NumPy/ml_dtypes dtype with this encoding)"],
    ]
    if _fixed_point(fmt):
        _fixed_point_facts(fmt, dict((row[0], row) for row in rows))
    if fmt.twos_complement:
        min_code = code_hex(fmt.sign_mask, fmt)
        rows.insert(
            6, ["min", f"{exact_full(fmt.min)}; code {min_code}, the most negative value, has no positive twin"]
        )
    return rows


def _fixed_point_facts(fmt: fpemu.Format, rows: dict[str, list[str]]) -> None:
    """Rewrite the facts that mean nothing without an exponent field (bias, exponents, normal values)."""
    step, n = fmt.min_subnormal, fmt.mantissa_bits
    if fmt.twos_complement:
        rows["bits"][1] = (
            f"{fmt.bits}: a two's-complement integer i from {-(1 << n)} to {(1 << n) - 1}, value i * {exact(step)} "
            "(fixed point, no exponent field)"
        )
    else:
        sign = "1 sign + " if fmt.signed else ""
        rows["bits"][1] = (
            f"{fmt.bits} = {sign}{n} magnitude bits: an integer i from 0 to {(1 << n) - 1}, value "
            f"{'+-' if fmt.signed else ''}i * {exact(step)} (fixed point, no exponent field)"
        )
    rows["bias"][1] = "none (no exponent field)"
    rows["exponents"][1] = f"none (fixed point: every value is an integer multiple of {exact(step)})"
    normal = exact(fmt.min_normal)
    if fmt.twos_complement:  # only the most negative value reaches 2^emin
        rows["min normal"][1] = (
            f"none (no exponent field: 2^emin = {normal} is beyond max; only min = -{normal} is not subnormal)"
        )
        subnormal = f"every nonzero value but -{normal}"
    else:
        rows["min normal"][1] = f"none (no exponent field: 2^emin = {normal} is beyond max)"
        subnormal = "every nonzero value"
    rows["min subnormal"][1] = f"{exact_full(step)}: the step, the spacing of all values"
    rows["subnormals"][1] = f"yes: {subnormal} (fixed point); subnormals=False (--no-subnormals) flushes them to 0"


def _eps_text(fmt: fpemu.Format) -> str:
    """``eps``, the spacing of values at 1, with a note where 1 + eps is not a value of the format."""
    text = exact_full(fmt.eps)
    if 1.0 + fmt.eps > fmt.max:
        text += f"; the spacing at 1 (1 + eps is beyond max {exact(fmt.max)})"
    return text


def _code_table(fmt: fpemu.Format, codes: Sequence[int]) -> str:
    values = _decode_all(codes, fmt)
    rows = [
        [code_hex(code, fmt), code_bits(code, fmt), _classify(value, fmt), exact(value), hex_float(value)]
        for code, value in zip(codes, values)
    ]
    return text_table(rows, ["code", layout(fmt), "class", "value", "hex"])


def _notable_codes(fmt: fpemu.Format) -> list[int]:
    """Zero, the smallest values, one, max, inf and NaN, as positive codes (and -0), for wide formats."""
    m = fmt.mantissa_bits
    codes = [0] if fmt.has_zero else []
    if fmt.has_negative_zero:
        codes.append(fmt.sign_mask)
    if fmt.has_subnormals:
        codes.append(1)
    if _fixed_point(fmt):  # no normal values; 1 is a whole number of steps
        one = int(1 / fmt.min_subnormal)
    else:
        codes.append((1 << m) if fmt.has_zero else 0)
        one = fmt.bias << m
    if 0 < one <= fmt.max_code and fmt.magnitude_value(one) == 1.0:
        codes.append(one)
    codes.append(fmt.max_code)
    codes.extend(code for code in (fmt.inf_code, fmt.nan_code) if code is not None)
    return sorted(set(codes), key=codes.index)


def cmd_info(args: argparse.Namespace) -> None:
    fmt: fpemu.Format = args.format
    print(text_table(_facts(fmt)))
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


def _round_exactly(number: Number, fmt: fpemu.Format, options: dict, random: int | None) -> tuple[float, int, str]:
    """(result, code, what rounded it): `fpemu.quantize`/`fpemu.encode` for a float64, else the exact oracle."""
    as_float = float64_of(number.value)
    if as_float is not None:
        result = float(fpemu.quantize(np.float64(as_float), fmt, **options))
        code = int(fpemu.encode(np.float64(as_float), fmt, **options))
        return result, code, "fpemu.quantize and fpemu.encode"
    oracle = {k: v for k, v in options.items() if k != "key"}
    if random is not None:
        oracle["random"] = random
    result = reference.round_scalar(number.value, fmt, **oracle)
    code = reference.encode_scalar(number.value, fmt, **oracle)
    return (
        result,
        code,
        "fpemu.testing.reference (the exact oracle: VALUE is not a float64, fpemu.quantize's widest input)",
    )


def cmd_cast(args: argparse.Namespace) -> None:
    fmt: fpemu.Format = args.to
    stochastic = args.rounding == "stochastic"
    if not stochastic and (args.seed is not None or args.random_bits is not None):
        args.cast_parser.error("--seed and --random-bits are only used with --rounding stochastic")
    seed = 0 if args.seed is None else args.seed
    random_bits = fpemu.DEFAULT_RANDOM_BITS if args.random_bits is None else args.random_bits
    options: dict = dict(rounding=args.rounding, saturate=args.saturate, subnormals=not args.no_subnormals)
    random = None
    if stochastic:
        key = jax.random.key(seed)
        options.update(key=key, random_bits=random_bits)
        random = int(fpemu.stochastic_bits(key, (), random_bits))  # what quantize draws for one value
    number: Number = args.value
    x = number.value  # a Fraction, or a float for nan, +-inf and +-0
    result, code, rounded_by = _round_exactly(number, fmt, options, random)

    described = [args.rounding] + ([f"seed {seed}", f"random_bits {random_bits}"] if stochastic else [])
    described.append("saturate" if args.saturate else "no saturation")
    described.append("flush subnormals" if args.no_subnormals else "subnormals kept")
    code_text = f"{code_hex(code, fmt)}  {code_bits(code, fmt)}  ({layout(fmt)})"
    if math.isnan(result) and not fmt.has_nan:
        decoded = exact(_decode_all([code], fmt)[0])
        code_text += f"  ({fmt.name} has no NaN code: encode stores NaN as this code, which decodes to {decoded})"
    rows = [
        ["input", describe_number(number)],
        ["format", f"{fmt.name}: {fmt.bits} bits, {_layout_text(fmt)}, max {exact(fmt.max)}"],
        ["rounding", ", ".join(described)],
        ["rounded by", rounded_by],
        ["result", exact_full(result)],
        ["code", code_text],
        ["class", _classify(result, fmt)],
    ]
    finite = not isinstance(x, float) or math.isfinite(x)
    if stochastic and finite:
        directed = dict(saturate=args.saturate, subnormals=not args.no_subnormals)
        low, high = (
            _round_exactly(number, fmt, dict(directed, rounding=mode), None)[0]
            for mode in ("toward_negative", "toward_positive")
        )
        if math.isfinite(low) and math.isfinite(high) and low != high:
            p_up = float((Fraction(x) - Fraction(low)) / (Fraction(high) - Fraction(low)))
            rows.append(
                [
                    "neighbours",
                    f"{exact(low)} and {exact(high)}: rounds up with probability {p_up:.6g} (to within 2^-{random_bits})",
                ]
            )
    if finite and math.isfinite(result):
        error = Fraction(result) - Fraction(x)
        ulp = _ulp(result, fmt)
        rows.append(["error", f"{approx(error)}  (result - input, exact unless marked ~)"])
        if x != 0:
            rows.append(["relative", f"{short(error / abs(Fraction(x)))}  ((result - input) / |input|)"])
        rows.append(
            [
                "in ulps",
                f"{approx(error / Fraction(ulp))} ulp  (ulp = {exact(ulp)}, the spacing of "
                f"{fmt.name} just above |result|)",
            ]
        )
    elif finite:
        rows.append(["error", f"none: {_why_not_finite(x, fmt)}"])
    else:
        rows.append(["error", "none: the input is not finite"])
    print(text_table(rows))


def _layout_text(fmt: fpemu.Format) -> str:
    if _fixed_point(fmt):
        kind = "two's-complement" if fmt.twos_complement else "sign-magnitude" if fmt.signed else "unsigned"
        return f"{kind} fixed point, step {exact(fmt.min_subnormal)}"
    return f"e{fmt.exponent_bits}m{fmt.mantissa_bits}"


def _why_not_finite(x: Fraction | float, fmt: fpemu.Format) -> str:
    """Why a finite input gave inf or NaN."""
    if not fmt.signed and (x < 0 or (x == 0 and not fmt.has_zero)):
        return f"the unsigned {fmt.name} has no {'negative values' if x < 0 else 'zero'}, so NaN"
    if fmt.has_inf:
        return f"overflow beyond max {exact(fmt.max)}; --saturate clamps to max"
    return f"overflow beyond max {exact(fmt.max)}: {fmt.name} has no infinity, so NaN; --saturate clamps to max"


def _demo_formats() -> list[fpemu.Format]:
    """The formats the demo measures: those of at most 16 bits that frameworks ship as a dtype (NumPy or
    ml_dtypes), float32 holding them. The P3109 family and OCP INT8 are listed in the first table only."""
    fp32 = fpemu.get_format("fp32")
    return [fmt for fmt in fpemu.formats() if fmt.bits <= 16 and fmt.dtype is not None and fmt.fits_in(fp32)]


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


def cmd_demo(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    key = jax.random.key(0)
    sample = np.random.default_rng(0).standard_normal(_DEMO_SIZE, dtype=np.float32)
    x32 = jnp.asarray(sample)
    x64 = sample.astype(np.float64)
    demo_formats = _demo_formats()

    check_interrupted()
    print("1. The registered formats")
    print()
    print(formats_table())
    print()
    print(
        _prose(
            "Same width does not mean same format: e4m3 (IEEE-like, has inf, max 240) and e4m3fn (OCP FP8, "
            "no inf, max 448) decode the same byte differently. The fnuz formats have a single NaN (the -0 "
            "code) and no -0; e2m1fn, e3m2fn and e2m3fn (OCP MX FP4/FP6) have no inf and no NaN; e8m0fnu is the "
            "unsigned power-of-two scale of the MX formats."
        )
    )
    print()

    check_interrupted()
    print(f"2. Quantization error of {_DEMO_SIZE} standard-normal float32 values (numpy default_rng(0))")
    print()
    rows = []
    for fmt in demo_formats:
        row, nonfinite = [fmt.name], set()
        for mode in fpemu.ROUNDING_MODES:
            check_interrupted()
            q = fpemu.quantize(x32, fmt, rounding=mode, key=key if mode == "stochastic" else None)
            qsnr, bad = _error_stats(x64, np.asarray(q, dtype=np.float64))
            row.append(_db(qsnr))
            nonfinite.add(bad)
        low, high = min(nonfinite), max(nonfinite)
        row.append(_pct(low) if low == high else f"{_pct(low)}-{_pct(high)}")
        rows.append(row)
    print(
        text_table(
            rows, ["format", *fpemu.ROUNDING_MODES, "inf/nan"], align="l" + "r" * (len(fpemu.ROUNDING_MODES) + 1)
        )
    )
    print()
    print(
        _prose(
            "Cells are QSNR in dB, 10*log10(mean(x^2) / mean((q - x)^2)) over the finite results: higher is "
            "better, and each mantissa bit adds about 6 dB under round-to-nearest. The directed modes "
            "(toward_*) are biased and lose about a bit; stochastic rounding (key 0) is unbiased but noisier "
            "than nearest; to_odd exists for exact double rounding, not accuracy. inf/nan is the fraction of "
            "results that overflowed or became NaN (a range when it depends on the mode): the unsigned "
            "e8m0fnu turns every negative value into NaN."
        )
    )
    print()

    scale = _DEMO_RANGE_SCALE
    check_interrupted()
    print(f"3. Range: the same values times {scale:g}, nearest_even")
    print()
    scaled32 = x32 * jnp.float32(scale)
    scaled64 = np.asarray(scaled32, dtype=np.float64)
    rows, lost = [], {}
    for fmt in demo_formats:
        check_interrupted()
        _, lost[fmt.name] = _error_stats(scaled64, np.asarray(fpemu.quantize(scaled32, fmt), dtype=np.float64))
        qsnr, bad = _error_stats(scaled64, np.asarray(fpemu.quantize(scaled32, fmt, saturate=True), np.float64))
        rows.append([fmt.name, exact(fmt.max), _pct(lost[fmt.name]), _pct(bad), _db(qsnr)])
    print(text_table(rows, ["format", "max", "inf/nan", "with saturate: inf/nan", "QSNR dB"], align="lrrrr"))
    print()
    e4m3, e4m3fn = lost.get("e4m3"), lost.get("e4m3fn")
    if e4m3 is not None and e4m3fn is not None:
        print(
            _prose(
                f"Scaled by {scale:g}, {_pct(e4m3) if e4m3 else 'none'} of the values round beyond e4m3's max of "
                f"240 and become inf, while e4m3fn (max 448) loses {_pct(e4m3fn) if e4m3fn else 'none'}."
            )
        )
        print()
    print(
        _prose(
            "saturate=True clamps to +-max instead, which turns each lost value into a large but finite "
            "error: the QSNR column (saturating, over all values) shows what that costs. e2m1fn, e3m2fn and "
            "e2m3fn have neither inf nor NaN, so they saturate anyway: scale tensors into range first (the MX "
            "formats share one e8m0fnu scale per block of values)."
        )
    )
    print()
    print(f"Demo done in {time.perf_counter() - start:.1f} s.")
