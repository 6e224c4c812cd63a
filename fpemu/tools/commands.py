"""The commands of the ``fpemu`` command line: ``formats``, ``info``, ``cast``, ``demo``, ``bench``, ``plot``.

Each ``cmd_*`` function takes the parsed arguments (`fpemu.tools.cli` builds the parser) and prints
its report; tables are laid out by `fpemu.testing.text_table` and numbers by `fpemu.tools.numbers`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import time
from collections.abc import Sequence
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.testing import text_table
from fpemu.tools import accuracy, bench, plot
from fpemu.tools.numbers import approx, code_bits, code_hex, exact, exact_full, hex_float, layout

_CODE_TABLE_MAX_BITS = 8
_DEMO_SIZE = 2**14
_DEMO_RANGE_SCALE = 100.0
WIDTH = 100  # prose is wrapped to this many columns

_SPECIALS_DOC = {
    "ieee": "IEEE 754: the all-ones exponent holds +-inf (mantissa 0) and NaN (mantissa != 0)",
    "fn": "finite: no infinity; only the all-ones magnitude code is NaN",
    "fnuz": "finite, unsigned zero: no infinity, no -0; the -0 code is the only NaN",
    "none": "every code is a finite number: no infinity, no NaN",
    "p3109": "IEEE P3109 extended domain: infinity at the top magnitude code, one NaN (signed: the -0 code)",
}

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


def _format_row(fmt: fpemu.Format) -> list[str]:
    return [
        fmt.name,
        str(fmt.bits),
        f"{fmt.exponent_bits}/{fmt.mantissa_bits}",
        str(fmt.bias),
        exact(fmt.max),
        exact(fmt.min_normal),
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
            "code is NaN; fnuz: no inf and no -0, the -0 code is NaN; none: no inf, no NaN)."
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
    return [
        ["name", fmt.name],
        ["aliases", ", ".join(fpemu.format_aliases(fmt)[1:]) or "-"],
        ["bits", f"{fmt.bits} = {int(fmt.signed)} sign + {fmt.exponent_bits} exponent + {fmt.mantissa_bits} mantissa"],
        ["bias", str(fmt.bias)],
        ["exponents", f"emin {fmt.emin}, emax {fmt.emax}"],
        ["max", exact_full(fmt.max)],
        ["min normal", exact_full(fmt.min_normal)],
        ["min subnormal", exact_full(fmt.min_subnormal) if fmt.has_subnormals else "none (no subnormals)"],
        ["eps", exact_full(fmt.eps)],
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


def cmd_cast(args: argparse.Namespace) -> None:
    fmt: fpemu.Format = args.to
    stochastic = args.rounding == "stochastic"
    if not stochastic and (args.seed is not None or args.random_bits is not None):
        args.cast_parser.error("--seed and --random-bits are only used with --rounding stochastic")
    seed = 0 if args.seed is None else args.seed
    random_bits = fpemu.DEFAULT_RANDOM_BITS if args.random_bits is None else args.random_bits
    options = dict(rounding=args.rounding, saturate=args.saturate, subnormals=not args.no_subnormals)
    if stochastic:
        options.update(key=jax.random.key(seed), random_bits=random_bits)
    x = args.value
    try:
        result = float(fpemu.quantize(np.float64(x), fmt, **options))
    except ValueError as refused:  # an option fpemu.quantize refuses (--random-bits out of range): a usage error
        args.cast_parser.error(str(refused))
    code = int(fpemu.encode(np.float64(x), fmt, **options))

    described = [args.rounding] + ([f"seed {seed}", f"random_bits {random_bits}"] if stochastic else [])
    described.append("saturate" if args.saturate else "no saturation")
    described.append("flush subnormals" if args.no_subnormals else "subnormals kept")
    code_text = f"{code_hex(code, fmt)}  {code_bits(code, fmt)}  ({layout(fmt)})"
    if math.isnan(result) and not fmt.has_nan:
        decoded = exact(_decode_all([code], fmt)[0])
        code_text += f"  ({fmt.name} has no NaN code: encode stores NaN as this code, which decodes to {decoded})"
    rows = [
        ["input", f"{x!r}  ({hex_float(x)})"],
        ["format", f"{fmt.name}: {fmt.bits} bits, e{fmt.exponent_bits}m{fmt.mantissa_bits}, max {exact(fmt.max)}"],
        ["rounding", ", ".join(described)],
        ["result", exact_full(result)],
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
            rows.append(
                [
                    "neighbours",
                    f"{exact(low)} and {exact(high)}: rounds up with probability {p_up:.6g} (to within 2^-{random_bits})",
                ]
            )
    if math.isfinite(x) and math.isfinite(result):
        error = Fraction(result) - Fraction(x)
        ulp = _ulp(result, fmt)
        rows.append(["error", f"{approx(error)}  (result - input, exact unless marked ~)"])
        if x != 0:
            rows.append(["relative", f"{float(error / abs(Fraction(x))):.6g}  ((result - input) / |input|)"])
        rows.append(
            [
                "in ulps",
                f"{approx(error / Fraction(ulp))} ulp  (ulp = {exact(ulp)}, the spacing of "
                f"{fmt.name} just above |result|)",
            ]
        )
    elif math.isfinite(x):
        rows.append(["error", f"none: {_why_not_finite(x, fmt)}"])
    else:
        rows.append(["error", "none: the input is not finite"])
    print(text_table(rows))


def _why_not_finite(x: float, fmt: fpemu.Format) -> str:
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

    print(f"2. Quantization error of {_DEMO_SIZE} standard-normal float32 values (numpy default_rng(0))")
    print()
    rows = []
    for fmt in demo_formats:
        row, nonfinite = [fmt.name], set()
        for mode in fpemu.ROUNDING_MODES:
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
    print(f"3. Range: the same values times {scale:g}, nearest_even")
    print()
    scaled32 = x32 * jnp.float32(scale)
    scaled64 = np.asarray(scaled32, dtype=np.float64)
    rows, lost = [], {}
    for fmt in demo_formats:
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


# -- bench and plot --------------------------------------------------------------------------------

# The pictures of ``fpemu plot`` (``all`` draws every one) and the file each is written to.
PLOT_KINDS = ("values", "rounding-error", "qsnr", "matmul-error")
PLOT_FILES = {kind: kind.replace("-", "_") + ".png" for kind in PLOT_KINDS}


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


def _elements_text(row) -> str:
    if row.group == "matmul":
        return "x".join(map(str, (*row.shape, row.shape[-1])))
    n = row.elements
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _g3(value: float) -> str:
    return f"{value:.3g}"


def bench_report(result: bench.BenchResult) -> str:
    """The text report of a `fpemu.tools.bench.run`: the machine, one row per timed call, how to read it."""
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
    lines = [text_table(head), "", text_table(rows, header, align="llrrrrrl"), ""]
    lines.append(
        _prose(
            "ns/element is the median time per element (per multiply-add for matmul rows) after two untimed "
            "warm-up calls (the first compiles); each timed call blocks until the result is ready. GB/s counts "
            "the input read and the output written once (8 bytes per element for float32 in and out). "
            "'x copy' is the ratio of ns/element to the NumPy copy's (the memory-bandwidth reference); "
            "'x fpemu' the ratio to the baseline row (fpemu nearest_even of the same format; for a scaled "
            "recipe, of its element format). Compare ratios within one run, not absolute times across runs."
        )
    )
    for skip in meta["skipped"]:
        lines.append(f"skipped {skip['name']}: {skip['reason']}")
    lines.append(f"Bench done in {meta['seconds']:.1f} s.")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.plot is not None:
        try:
            plot.require_matplotlib()  # before the run, not after it
        except plot.MissingMatplotlibError as error:
            print(f"fpemu bench: error: --plot: {error}", file=sys.stderr)
            return 1
    show_progress = not args.no_progress and sys.stderr.isatty()
    result = bench.run(bench.QUICK if args.quick else bench.FULL,
                        progress=ProgressBar(sys.stderr) if show_progress else None)  # fmt: skip
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
            print(f"wrote {plot.plot_bench(result.rows, args.plot / name, metric=metric, title=title)}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    parser = args.plot_parser
    kinds = PLOT_KINDS if args.kind == "all" else (args.kind,)
    for option, used_by in (("formats", ("values", "rounding-error")), ("recipes", ("qsnr", "matmul-error")),
                            ("sizes", ("matmul-error",))):  # fmt: skip
        if getattr(args, option) is not None and not set(kinds) & set(used_by):
            plural = "s" if len(used_by) > 1 else ""
            parser.error(f"--{option} is only used by the {' and '.join(used_by)} plot{plural}")
    formats = args.formats or [fpemu.get_format(name) for name in plot.DEFAULT_FORMATS]
    if "values" in kinds:
        for fmt in formats:
            try:
                plot.check_drawable(fmt)
            except ValueError as error:
                parser.error(f"values: {error}")
    if "qsnr" in kinds and args.recipes is not None:
        for name in args.recipes:
            try:
                fpemu.scaled.get_recipe(name)
            except fpemu.scaled.UnknownRecipeError as error:
                parser.error(f"qsnr: {error}")
    if "matmul-error" in kinds and args.recipes is not None:
        try:
            plot.check_choices("matmul recipe", args.recipes, plot.names_of(accuracy.MATMUL_RECIPES))
        except ValueError as error:
            parser.error(f"matmul-error: {error}")
    try:
        plot.require_matplotlib()
    except plot.MissingMatplotlibError as error:
        print(f"fpemu plot: error: {error}", file=sys.stderr)
        return 1
    for kind in kinds:
        path = args.out / PLOT_FILES[kind]
        if kind == "values":
            written = plot.plot_values(formats, path)
        elif kind == "rounding-error":
            written = plot.plot_rounding_error(formats, path)
        elif kind == "qsnr":
            written = plot.plot_qsnr(args.recipes, path)
        else:
            written = plot.plot_matmul_error(args.recipes, args.sizes or plot.DEFAULT_MATMUL_SIZES, path)
        print(written)
    return 0
