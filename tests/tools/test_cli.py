"""The ``fpemu`` command line: run in-process through `main`, plus one real subprocess."""

from __future__ import annotations

import gc
import math
import os
import re
import signal
import struct
import subprocess
import sys
from fractions import Fraction

import jax
import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu.testing import reference
from fpemu.tools import cli, commands
from fpemu.tools.cli import main
from fpemu.tools.numbers import exact, parse_number

ROUNDING_MODES = fpemu.ROUNDING_MODES


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``fpemu ARGV`` in-process; return stdout after checking the exit status is 0."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def run_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``fpemu ARGV`` expecting a usage error; return stderr."""
    with pytest.raises(SystemExit) as exc_info:
        main(list(argv))
    assert exc_info.value.code == 2
    return capsys.readouterr().err


def table_row(output: str, first_cell: str) -> list[str]:
    """The cells (split on runs of two or more spaces) of the table row starting with ``first_cell``."""
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row starting with {first_cell!r} in:\n{output}")


def field(output: str, key: str) -> str:
    """The value of a ``key  value`` line of `cast`/`info` output (everything after the key column)."""
    for line in output.splitlines():
        match = re.match(rf"{re.escape(key)}\s{{2,}}(.*)$", line)
        if match:
            return match.group(1)
    raise AssertionError(f"no {key!r} line in:\n{output}")


# -- number rendering ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (448.0, "448"),
        (-0.0, "-0"),
        (0.0, "0"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        (0.5, "0.5"),
        (2.0**-9, "2^-9"),
        (2.0**127, "2^127"),
        (float.fromhex("0x1.fffffep127"), "(2-2^-23)*2^127"),
        (3 * 2.0**-24, "3*2^-24"),
        (0.10009765625, "0.10009765625"),
    ],
)
def test_num_is_exact(value, text):
    assert exact(value) == text


# -- formats --------------------------------------------------------------------------------------


def test_formats_lists_every_format_with_exact_facts(capsys):
    out = run(capsys, "formats")
    for fmt in fpemu.formats():
        assert table_row(out, fmt.name)[0] == fmt.name
    header = table_row(out, "name")
    e4m3fn = dict(zip(header, table_row(out, "e4m3fn")))
    e4m3 = dict(zip(header, table_row(out, "e4m3")))
    assert (e4m3fn["max"], e4m3fn["inf"], e4m3fn["nan"], e4m3fn["-0"], e4m3fn["specials"]) == (
        "448",
        "no",
        "yes",
        "yes",
        "fn",
    )
    assert (e4m3["max"], e4m3["inf"], e4m3["specials"]) == ("240", "yes", "ieee")
    assert (e4m3fn["min normal"], e4m3fn["min subnormal"], e4m3fn["eps"], e4m3fn["bias"]) == (
        "2^-6",
        "2^-9",
        "0.125",
        "7",
    )
    fp32 = dict(zip(header, table_row(out, "fp32")))
    assert fp32["max"] == "(2-2^-23)*2^127" and fp32["min subnormal"] == "2^-149"
    assert dict(zip(header, table_row(out, "e8m0fnu")))["min subnormal"] == "-"
    assert "float8_e4m3fn" not in out


def test_formats_aliases(capsys):
    out = run(capsys, "formats", "--aliases")
    assert table_row(out, "e4m3fn")[-1] == "float8_e4m3fn"
    assert "bfloat16" in table_row(out, "bf16")[-1]


# -- info -----------------------------------------------------------------------------------------


def test_info_e2m1fn_shows_all_16_codes(capsys):
    out = run(capsys, "info", "e2m1fn")
    assert field(out, "codes") == "16"
    assert field(out, "dtype") == "float4_e2m1fn"
    assert field(out, "inf") == "no" and field(out, "nan") == "no"
    rows = [table_row(out, f"0x{code:x}") for code in range(16)]
    assert rows[0x7] == ["0x7", "0 11 1", "normal", "6", "0x1.8p+2"]
    assert rows[0x8] == ["0x8", "1 00 0", "zero", "-0", "-0x0p+0"]
    assert rows[0x1][2:4] == ["subnormal", "0.5"]
    assert rows[0xF][3] == "-6"


def test_info_e4m3fn_codes_match_ml_dtypes(capsys):
    out = run(capsys, "info", "float8_e4m3fn")  # an alias
    assert field(out, "name") == "e4m3fn"
    assert field(out, "max").startswith("448")
    assert table_row(out, "0x7e")[3] == "448"
    assert table_row(out, "0x7f")[2:4] == ["nan", "nan"]
    assert table_row(out, "0xff")[2] == "nan"
    assert table_row(out, "0x80")[2:4] == ["zero", "-0"]
    assert table_row(out, "0x01")[3] == "2^-9"
    assert sum(line.startswith("0x") for line in out.splitlines()) == 256


def test_info_wide_format_skips_code_table(capsys):
    out = run(capsys, "info", "bf16")
    assert field(out, "codes") == "65536"
    assert field(out, "code dtype") == "uint16"
    assert "only shown for formats of 8 bits or fewer" in out
    assert table_row(out, "0x7f80")[2] == "inf"
    assert table_row(out, "0x3f80")[3] == "1"
    assert sum(line.startswith("0x") for line in out.splitlines()) < 20


def test_info_format_without_dtype(capsys):
    out = run(capsys, "info", "tf32")
    assert field(out, "dtype").startswith("none")
    assert field(out, "bits") == "19 = 1 sign + 8 exponent + 10 mantissa"


# -- cast -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "result", "code"),
    [
        (["464", "--to", "e4m3fn"], "448", "0x7e"),  # the tie rounds to even, not to NaN
        (["464.00003", "--to", "e4m3fn"], "nan", "0x7f"),  # beyond the tie: overflow, no infinity
        (["1e6", "--to", "e4m3fn", "--rounding", "toward_zero"], "448", "0x7e"),
        (["500", "--to", "e4m3fn", "--saturate"], "448", "0x7e"),
        (["-1e6", "--to", "e5m2"], "-inf", "0xfc"),  # a negative value that argparse would take for an option
        (["0x1.8p3", "--to", "e2m1fn"], "6", "0x7"),
        (["-0", "--to", "e4m3fn"], "-0", "0x80"),
        (["-0", "--to", "e4m3fnuz"], "0", "0x00"),
        (["inf", "--to", "e4m3fn"], "nan", "0x7f"),
        (["-3", "--to", "e8m0fnu"], "nan", "0xff"),
    ],
)
def test_cast(capsys, argv, result, code):
    out = run(capsys, "cast", *argv)
    assert field(out, "result").split()[0] == result
    assert field(out, "code").split()[0] == code


def test_cast_rounds_a_float64_from_its_exact_value(capsys):
    out = run(capsys, "cast", "0x1.999999999999ap-4", "--to", "bf16")  # the float64 nearest 0.1
    assert field(out, "input") == "0.1  (0x1.999999999999ap-4)"
    assert field(out, "rounded by") == "fpemu.quantize and fpemu.encode"
    assert field(out, "result") == "0.10009765625  (0x1.9ap-4)"
    assert field(out, "code") == "0x3dcd  0 01111011 1001101  (s eeeeeeee mmmmmmm)"
    assert field(out, "error").startswith("9.765624999999445e-05 ")
    # 2^-52 above the bf16 tie 1 + 2^-8: float32 would round it onto the tie (then to even, 0x3f80).
    out = run(capsys, "cast", "0x1.0100000000001p+0", "--to", "bf16")
    assert field(out, "code").split()[0] == "0x3f81"


def test_cast_reports_error_in_ulps(capsys):
    out = run(capsys, "cast", "464", "--to", "e4m3fn")
    assert field(out, "error").startswith("-16.0 ")
    assert field(out, "in ulps").startswith("-0.5 ulp  (ulp = 32,")
    assert field(out, "relative").startswith("-0.0344828")
    out = run(capsys, "cast", "nan", "--to", "e2m1fn")
    assert field(out, "error").startswith("none")
    assert "has no NaN code" in field(out, "code")


def test_cast_stochastic_depends_on_seed(capsys):
    results = {
        field(
            run(capsys, "cast", "0.1", "--to", "e2m1fn", "--rounding", "stochastic", "--seed", str(seed)), "result"
        ).split()[0]
        for seed in range(30)
    }
    assert results == {"0", "0.5"}
    out = run(capsys, "cast", "0.1", "--to", "e2m1fn", "--rounding", "stochastic", "--random-bits", "8")
    assert "rounds up with probability 0.2 " in field(out, "neighbours")


def test_main_restores_x64(capsys):
    before = jax.config.jax_enable_x64
    run(capsys, "cast", "1", "--to", "bf16")
    assert jax.config.jax_enable_x64 == before


# -- VALUE is read exactly ---------------------------------------------------------------------------


def code_of(out: str) -> int:
    return int(field(out, "code").split()[0], 16)


@pytest.mark.parametrize(
    ("argv", "code", "shown"),
    [
        # beyond float64: a float parser reads inf, which no rounding mode brings back to max
        (["1e999", "--to", "e4m3fn", "--rounding", "toward_zero"], 0x7E, "1e999  (exact; beyond float64's range"),
        (["-1e999", "--to", "e4m3fn", "--rounding", "toward_negative"], 0xFF, "-1e999  (exact; beyond"),  # NaN
        (["-1e999", "--to", "e4m3fn", "--rounding", "toward_positive"], 0xFE, "-1e999"),  # -448
        (["1e999", "--to", "e4m3fn", "--saturate"], 0x7E, "1e999"),
        (["0x1p2000", "--to", "e4m3fn"], 0x7F, "0x1p+2000  (exact; beyond float64's range"),
        (["0x1p2000", "--to", "fp64", "--rounding", "toward_zero"], 0x7FEF_FFFF_FFFF_FFFF, "0x1p+2000"),
        (["0x1p2000", "--to", "fp64"], 0x7FF0_0000_0000_0000, "0x1p+2000"),
        # below float64's smallest subnormal: a float parser reads 0
        (["1e-999", "--to", "e4m3fn", "--rounding", "toward_positive"], 0x01, "1e-999  (exact; below float64's"),
        (["1e-999", "--to", "e4m3fn"], 0x00, "1e-999"),
        (["-1e-999", "--to", "e4m3fn", "--rounding", "toward_negative"], 0x81, "-1e-999"),
        (["-1e-999", "--to", "e4m3fn", "--rounding", "toward_positive"], 0x80, "-1e-999"),  # -0
        (["-0x1p-1100", "--to", "fp64", "--rounding", "toward_negative"], 0x8000_0000_0000_0001, "-0x1p-1100  (exact;"),
        (["1e-999", "--to", "e8m0fnu"], 0x00, "1e-999"),  # no zero: below 2^-127 gives 2^-127
        # within range, not a float64: a float parser would round twice
        (["1.00390625000000000000001", "--to", "bf16"], 0x3F81, "1.00390625000000000000001  (exact; not a float64"),
        (["464.0000000000000000001", "--to", "e4m3fn"], 0x7F, "464.0000000000000000001  (exact; not a float64"),
        # -416: float64 reads -432, the tie between -416 and -448, which goes to the even -448
        (["-431.99999999999999999", "--to", "e4m3fn"], 0xFD, "-431.99999999999999999"),
        (["0.1", "--to", "int8_ocp", "--rounding", "to_odd"], 0x07, "0.1  (exact; not a float64"),  # 6/64 < 0.1 < 7/64
    ],
)
def test_cast_reads_value_exactly(capsys, argv, code, shown):
    out = run(capsys, "cast", *argv)
    assert code_of(out) == code
    assert field(out, "input").startswith(shown)
    assert field(out, "rounded by").startswith("fpemu.testing.reference")


def test_cast_huge_integer_rounds_once(capsys):
    n = 123456789012345678901234567890
    shift = n.bit_length() - 24  # fp32 keeps 24 significant bits
    mantissa, rest = divmod(n, 1 << shift)
    half = 1 << (shift - 1)
    mantissa += rest > half or (rest == half and mantissa % 2 == 1)
    expected = struct.unpack("<I", struct.pack("<f", mantissa * 2.0**shift))[0]
    out = run(capsys, "cast", str(n), "--to", "fp32")
    assert code_of(out) == expected
    assert field(out, "input").startswith(f"{n}  (exact; not a float64, which would read it as 1.2345678901234568e+29")


def test_cast_error_of_an_exact_decimal_is_exact(capsys):
    out = run(capsys, "cast", "0.1", "--to", "bf16")
    assert field(out, "result") == "0.10009765625  (0x1.9ap-4)"  # 0x3dcd = 205 * 2^-11
    assert field(out, "error").startswith("0.00009765625 ")  # 205/2048 - 1/10 = 1/10240, exactly
    assert field(out, "in ulps").startswith("0.2 ulp")
    out = run(capsys, "cast", "1e999", "--to", "e4m3fn", "--rounding", "toward_zero")
    assert field(out, "error").startswith("~-1e+999 ")
    assert field(out, "in ulps").startswith("~-3.125e+997 ulp  (ulp = 32,")


def test_cast_stochastic_uses_the_bits_quantize_draws(capsys):
    """A float64 and a rational 10^-20 above it go through different doors (quantize, the oracle) with the same random
    bits: they round alike for every seed, as 2^32 * (x - 1) / 0.5 has the same floor, 2^31, for both."""
    results = set()
    for seed in range(8):
        stochastic = ("--to", "e2m1fn", "--rounding", "stochastic", "--seed", str(seed))
        float_out = run(capsys, "cast", "1.25", *stochastic)
        exact_out = run(capsys, "cast", "1.25000000000000000001", *stochastic)
        assert field(float_out, "rounded by") == "fpemu.quantize and fpemu.encode"
        assert field(exact_out, "rounded by").startswith("fpemu.testing.reference")
        assert code_of(exact_out) == code_of(float_out), seed
        results.add(field(exact_out, "result").split()[0])
    assert results == {"1", "1.5"}


def test_cast_stochastic_beyond_float64(capsys):
    out = run(capsys, "cast", "1e999", "--to", "e4m3fn", "--rounding", "stochastic", "--seed", "5")
    assert code_of(out) == 0x7F  # overflow, every draw
    out = run(capsys, "cast", "1e-999", "--to", "e4m3fn", "--rounding", "stochastic", "--random-bits", "8")
    assert code_of(out) == 0x00  # up with probability 10^-999 * 2^9, below 2^-8: never
    assert "rounds up with probability 0 " in field(out, "neighbours")


def test_random_bits_limit_is_fpemus():
    key = jax.random.key(0)
    fpemu.stochastic_bits(key, (), 32)
    with pytest.raises(ValueError, match="32"):
        fpemu.stochastic_bits(key, (), 33)


@pytest.mark.parametrize(
    ("text", "value", "shown"),
    [
        ("0.1", Fraction(1, 10), "0.1"),
        ("+.5", Fraction(1, 2), "0.5"),
        ("1e999", Fraction(10**999), "1e999"),
        ("-1E-999", -Fraction(1, 10**999), "-1e-999"),
        ("-2.50e-3", Fraction(-1, 400), "-0.0025"),
        ("1e7", Fraction(10**7), "1e7"),
        ("1200", Fraction(1200), "1200"),
        ("123456789012345678901234567890", Fraction(123456789012345678901234567890), "123456789012345678901234567890"),
        ("0.00000012", Fraction(12, 10**8), "1.2e-7"),
        ("0x1.8p3", Fraction(12), "0x1.8p+3"),
        ("0X1P2000", Fraction(2**2000), "0x1p+2000"),
        ("-0x1p-1100", -Fraction(1, 2**1100), "-0x1p-1100"),
        ("0x.8", Fraction(1, 2), "0x1p-1"),
        ("0x1.00000000000000001p0", 1 + Fraction(1, 2**68), "0x1.00000000000000001p+0"),
    ],
)
def test_parse_number_is_exact(text, value, shown):
    number = parse_number(text)
    assert type(number.value) is Fraction and number.value == value
    assert number.text == shown
    assert parse_number(shown).value == value  # the text reads back as the same number


@pytest.mark.parametrize(
    ("text", "bits"),
    [("-0", 0x8000_0000_0000_0000), ("0", 0), ("-0x0p9", 0x8000_0000_0000_0000), ("-0.000e5", 0x8000_0000_0000_0000),
     ("inf", 0x7FF0_0000_0000_0000), ("-Infinity", 0xFFF0_0000_0000_0000)],
)  # fmt: skip
def test_parse_number_keeps_signed_zeros_and_infinities(text, bits):
    value = parse_number(text).value
    assert type(value) is float
    assert struct.unpack("<Q", struct.pack("<d", value))[0] == bits


def test_parse_number_keeps_the_sign_of_nan(capsys):
    assert math.isnan(parse_number("nan").value) and math.copysign(1, parse_number("nan").value) == 1
    assert math.isnan(parse_number("-NaN").value) and math.copysign(1, parse_number("-NaN").value) == -1
    assert code_of(run(capsys, "cast", "-nan", "--to", "e4m3fn")) == 0xFF  # nan_code | sign


@pytest.mark.parametrize(
    "text", ["abc", "1e", "e5", "0x", "0x.p1", "1..2", "-", "+-1", "nan1", "1_000", "0x1g", "1e5.5", "", " "]
)
def test_bad_value_names_the_argument_and_the_spellings(capsys, text):
    err = run_error(capsys, "cast", text, "--to", "e4m3fn")
    assert "argument VALUE: not a number" in err, err
    assert repr(text.strip()) in err
    assert "a decimal (0.1" in err and "a hex float (0x1.8p3" in err and "nan, inf or -inf" in err


@pytest.mark.parametrize(
    ("text", "says"),
    [("1e10001", "decimal exponents from -10000 to 10000"), ("10e10000", "decimal exponents"),
     ("1e-99999999999999", "decimal exponents"), ("0x1p-40001", "hex-float exponents from -40000 to 40000"),
     ("0x10p39997", "hex-float exponents")],
)  # fmt: skip
def test_value_beyond_the_exponent_limit_is_refused(capsys, text, says):
    err = run_error(capsys, "cast", text, "--to", "e4m3fn")
    assert "argument VALUE:" in err and repr(text) in err and says in err


@pytest.mark.parametrize(("text", "code"), [("1e-10000", 0x01), ("0.1e-9999", 0x01), ("-0x1p-40000", 0x80),
                                            ("0x0.1p40004", 0x7E), ("9.99e9999", 0x7E)])  # fmt: skip
def test_value_at_the_exponent_limit_is_read(capsys, text, code):
    out = run(capsys, "cast", text, "--to", "e4m3fn", "--rounding", "toward_positive", "--saturate")
    assert code_of(out) == code


@pytest.mark.parametrize(
    ("flag", "text", "says"),
    [
        ("--seed", str(2**63), "from -9223372036854775808 to 9223372036854775807"),
        ("--seed", "1.5", "from -9223372036854775808"),
        ("--random-bits", "0", "from 1 to 32"),
        ("--random-bits", "33", "from 1 to 32"),
        ("--random-bits", "many", "from 1 to 32"),
    ],
)
def test_bad_integer_flags_name_the_flag_and_range(capsys, flag, text, says):
    err = run_error(capsys, "cast", "1", "--to", "e4m3fn", "--rounding", "stochastic", flag, text)
    assert f"argument {flag}: must be an integer {says}" in err and repr(text) in err


@pytest.mark.parametrize(
    ("argv", "flags"),
    [(["cast", "1", "--to", "bf16", "--bogus"], ("--to", "--rounding", "--saturate", "--seed", "--random-bits")),
     (["demo", "--fast"], ("--help",)), (["info", "e4m3fn", "--all"], ("--help",))],
)  # fmt: skip
def test_unknown_command_flag_is_named_with_the_commands_flags(capsys, argv, flags):
    err = run_error(capsys, *argv)
    assert f"unrecognized argument: {argv[-1]} (the flags of fpemu {argv[0]}: " in err, err
    assert all(flag in err for flag in flags)


def test_extreme_seeds_work(capsys):
    for seed in (-(2**63), 2**63 - 1):
        out = run(capsys, "cast", "0.1", "--to", "e2m1fn", "--rounding", "stochastic", "--seed", str(seed))
        assert field(out, "result").split()[0] in ("0", "0.5")


# -- usage errors ---------------------------------------------------------------------------------


def test_unknown_format_names_close_matches(capsys):
    err = run_error(capsys, "cast", "1", "--to", "e4m3f")
    assert "unknown format 'e4m3f'" in err and "did you mean 'e4m3fn'" in err
    err = run_error(capsys, "info", "e2m1")
    assert "'e2m1fn'" in err


def test_unknown_rounding_mode_lists_modes(capsys):
    err = run_error(capsys, "cast", "1", "--to", "bf16", "--rounding", "nearest")
    assert "invalid choice: 'nearest'" in err
    assert all(mode in err for mode in ROUNDING_MODES)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["formats", "--bogus"],
        ["cast", "1"],  # --to is required
        ["cast", "one", "--to", "bf16"],
        ["cast", "abc", "--to", "bf16"],  # not read as the hex 0xabc
        ["cast", "1", "--to", "bf16", "--seed", "1"],  # --seed without stochastic rounding
        ["cast", "1", "--to", "bf16", "--rounding", "stochastic", "--random-bits", "33"],
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    assert run_error(capsys, *argv)


# -- demo and the real command ----------------------------------------------------------------------


@pytest.mark.long
def test_demo_covers_every_format_and_mode(capsys):
    out = run(capsys, "demo")
    for fmt in fpemu.formats():
        assert fmt.name in out
    header = table_row(out, "format")
    assert header[1 : 1 + len(ROUNDING_MODES)] == list(ROUNDING_MODES)
    assert "QSNR in dB" in out
    error_table = out.split("2. Quantization error")[1]
    assert 30 < float(table_row(error_table, "e4m3fn")[1]) < 33  # nearest_even, 3 mantissa bits
    assert table_row(error_table, "e8m0fnu")[-1].endswith("%")  # negatives become NaN
    assert re.search(r"Demo done in [\d.]+ s\.", out)  # its 30 s limit is checked in bench/test_fpemu_bench.py


@pytest.mark.long
def test_python_dash_m_fpemu():
    proc = subprocess.run(
        [sys.executable, "-m", "fpemu", "formats"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert table_row(proc.stdout, "e4m3fn")[4] == "448"
    assert table_row(proc.stdout, "e4m3")[4] == "240"


# -- Ctrl-C -----------------------------------------------------------------------------------------


def run_interrupted(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command, *argv: str):
    """Run ``fpemu ARGV`` in-process with ``command`` in place of its handler; return (status, stdout, stderr)."""
    monkeypatch.setitem(cli._COMMANDS, argv[0], command)
    handler = signal.getsignal(signal.SIGINT)
    hook = sys.unraisablehook
    status = main(list(argv))
    assert signal.getsignal(signal.SIGINT) is handler and sys.unraisablehook is hook  # both put back
    out, err = capsys.readouterr()
    return status, out, err


def swallow_a_sigint() -> None:
    """Deliver SIGINT inside a garbage-collection callback, where Python reports the KeyboardInterrupt of the handler
    as unraisable and carries on (as when the signal lands in one of JAX's)."""
    fired = []

    def callback(phase: str, info: dict) -> None:
        if not fired:
            fired.append(phase)
            signal.raise_signal(signal.SIGINT)

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert fired


def test_ctrl_c_exits_130_with_one_line(capsys, monkeypatch):
    def command(args):
        print("partial output")
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("not reached: the handler raises")

    status, out, err = run_interrupted(capsys, monkeypatch, command, "formats")
    assert (status, out, err) == (130, "partial output\n", "interrupted\n")


@pytest.mark.long
def test_swallowed_ctrl_c_still_stops_the_demo(capsys, monkeypatch):
    def command(args):
        swallow_a_sigint()
        print("the interrupt was swallowed")
        return commands.cmd_demo(args)  # checks between its steps

    status, out, err = run_interrupted(capsys, monkeypatch, command, "demo")
    assert (status, err) == (130, "interrupted\n")  # no "Exception ignored in" report either
    assert out == "the interrupt was swallowed\n"  # the demo stopped at its first check


@pytest.mark.long
def test_swallowed_ctrl_c_is_reported_when_the_command_ends(capsys, monkeypatch):
    def command(args):
        swallow_a_sigint()
        return commands.cmd_formats(args)

    status, out, err = run_interrupted(capsys, monkeypatch, command, "formats")
    assert (status, err) == (130, "interrupted\n")
    assert "e4m3fn" in out


@pytest.mark.long
def test_a_later_run_is_not_interrupted(capsys, monkeypatch):
    assert run_interrupted(capsys, monkeypatch, lambda args: swallow_a_sigint(), "formats")[0] == 130
    monkeypatch.undo()
    assert "e4m3fn" in run(capsys, "formats", "--aliases")


@pytest.mark.long
def test_ctrl_c_stops_the_real_demo():
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fpemu", "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the demo has started: its first table comes next
        assert first.startswith("1. The registered formats"), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    assert "Demo done" not in out


# -- info and formats say nothing false, for every registered format ----------------------------------

HEX_FLOAT = re.compile(r"\((-?0x[0-9a-f]+(?:\.[0-9a-f]+)?p[+-]\d+)\)")
WIDE_FACTS = {  # name: (max, min normal, min subnormal, eps), from np.finfo / ml_dtypes.finfo or the IEEE fields
    "fp64": (float(np.finfo(np.float64).max), 2.0**-1022, 2.0**-1074, 2.0**-52),
    "fp32": (float(np.finfo(np.float32).max), 2.0**-126, 2.0**-149, 2.0**-23),
    "fp16": (65504.0, 2.0**-14, 2.0**-24, 2.0**-10),
    "bf16": (float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-126, 2.0**-133, 2.0**-7),
    "tf32": ((2 - 2.0**-10) * 2.0**127, 2.0**-126, 2.0**-136, 2.0**-10),
}


def hex_value(text: str) -> float:
    """The value in the first ``(0x...p...)`` of an info line."""
    match = HEX_FLOAT.search(text)
    assert match, text
    return float.fromhex(match.group(1))


def decoded(fmt: fpemu.Format) -> dict[int, float]:
    return {code: reference.decode_scalar(code, fmt) for code in range(fmt.num_codes)}


def value_class(value: float, fmt: fpemu.Format) -> str:
    """nan, inf, zero, subnormal (a nonzero value that subnormals=False flushes, by the oracle) or normal."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    return "subnormal" if reference.round_scalar(value, fmt, subnormals=False) == 0 else "normal"


def small_facts(fmt: fpemu.Format) -> dict:
    """What `info` should say, from the oracle's decoding of every code."""
    values = decoded(fmt)
    finite = [v for v in values.values() if math.isfinite(v)]
    positive = sorted(v for v in finite if v > 0)
    classes = {code: value_class(v, fmt) for code, v in values.items()}
    normals = [v for c, v in values.items() if classes[c] == "normal" and v > 0]
    subnormals = [v for c, v in values.items() if classes[c] == "subnormal" and v > 0]
    return {
        "values": values,
        "classes": classes,
        "max": max(finite),
        "min": min(finite),
        "positive": positive,
        "min normal": min(normals) if normals else None,
        "min subnormal": min(subnormals) if subnormals else None,
        "nan": [c for c, v in values.items() if math.isnan(v)],
        "inf": [c for c, v in values.items() if math.isinf(v)],
        "-0": [c for c, v in values.items() if v == 0 and math.copysign(1, v) < 0],
        "zero": any(v == 0 and math.copysign(1, v) > 0 for v in values.values()),
        "signed": any(v < 0 or (v == 0 and math.copysign(1, v) < 0) for v in finite),
    }


@pytest.mark.parametrize("fmt", [f for f in fpemu.formats() if f.bits <= 8], ids=lambda f: f.name)
def test_info_of_a_small_format_says_nothing_false(capsys, fmt):
    out = run(capsys, "info", fmt.name)
    facts = small_facts(fmt)
    fixed = fmt.exponent_bits == 0
    assert hex_value(field(out, "max")) == facts["max"]
    if fixed:
        step = facts["positive"][0]
        assert all(v / step == int(v / step) for v in facts["positive"])  # every value is a multiple of the step
        assert len(facts["positive"]) == round(facts["max"] / step)  # and every multiple up to max is a value
        assert hex_value(field(out, "min subnormal")) == step and "the step" in field(out, "min subnormal")
        for key in ("min normal", "bias", "exponents"):
            assert field(out, key).startswith("none"), key
    else:
        assert hex_value(field(out, "min normal")) == facts["min normal"]
        emin, emax = map(int, re.fullmatch(r"emin (-?\d+), emax (-?\d+)", field(out, "exponents")).groups())
        assert facts["min normal"] == 2.0**emin and 2.0**emax <= facts["max"] < 2.0 ** (emax + 1)
        if facts["min subnormal"] is None:
            assert field(out, "min subnormal").startswith("none") and field(out, "subnormals") == "no"
        else:
            assert hex_value(field(out, "min subnormal")) == facts["min subnormal"]
            assert field(out, "subnormals") == "yes"
    if 1.0 in facts["positive"] and facts["positive"][-1] > 1.0:
        above_one = facts["positive"][facts["positive"].index(1.0) + 1]
        assert hex_value(field(out, "eps")) == above_one - 1
    if fmt.twos_complement:
        assert hex_value(field(out, "min")) == facts["min"] and facts["min"] != -facts["max"]
    else:
        assert facts["min"] == (-facts["max"] if facts["signed"] else facts["positive"][0] if not facts["zero"] else 0)
    assert field(out, "signed").startswith("yes" if facts["signed"] else "no")
    assert field(out, "zero") == ("yes" if facts["zero"] else "no")
    assert field(out, "codes") == str(2**fmt.bits)
    inf_text, nan_text, negative_zero_text = field(out, "inf"), field(out, "nan"), field(out, "-0")
    assert [int(c, 16) for c in re.findall(r"0x[0-9a-f]+", inf_text)] == facts["inf"]  # +inf first
    assert inf_text.startswith("yes" if facts["inf"] else "no")
    if facts["nan"]:
        count, canonical = re.fullmatch(r"yes: (\d+) codes?, canonical (0x[0-9a-f]+)", nan_text).groups()
        assert int(count) == len(facts["nan"]) and int(canonical, 16) in facts["nan"]
    else:
        assert nan_text == "no"
    if facts["-0"]:
        assert negative_zero_text.startswith("yes: ") and [int(negative_zero_text[5:], 16)] == facts["-0"]
    else:
        assert negative_zero_text == "no"
    for code, value in facts["values"].items():  # the code table
        row = table_row(out, f"0x{code:0{(fmt.bits + 3) // 4}x}")
        shown = float.fromhex(row[-1]) if row[-1] not in ("nan", "inf", "-inf") else float(row[-1])
        assert (math.isnan(shown) and math.isnan(value)) or struct.pack("<d", shown) == struct.pack("<d", value), row
        assert row[2] == facts["classes"][code], row


@pytest.mark.parametrize("name", list(WIDE_FACTS))
def test_info_of_a_wide_format_says_nothing_false(capsys, name):
    out = run(capsys, "info", name)
    fmt = fpemu.get_format(name)
    top, normal, subnormal, eps = WIDE_FACTS[name]
    assert [hex_value(field(out, key)) for key in ("max", "min normal", "min subnormal", "eps")] == [
        top, normal, subnormal, eps
    ]  # fmt: skip
    assert field(out, "nan").startswith(f"yes: {2 * (2**fmt.mantissa_bits - 1)} codes")  # IEEE: every nonzero payload
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("0x")]
    assert len(rows) >= 6
    for code_text in rows:  # the notable codes
        row = table_row(out, code_text)
        value = reference.decode_scalar(int(code_text, 16), fmt)
        shown = float.fromhex(row[-1]) if row[-1] not in ("nan", "inf", "-inf") else float(row[-1])
        assert (math.isnan(shown) and math.isnan(value)) or shown == value, row
        assert row[2] == value_class(value, fmt), row


def test_info_int8_ocp(capsys):
    out = run(capsys, "info", "int8_ocp")
    assert field(out, "min normal").startswith("none")
    assert field(out, "bits").startswith("8: a two's-complement integer i from -128 to 127, value i * 2^-6")
    assert field(out, "min").startswith("-2 ") and "0x80" in field(out, "min")
    assert table_row(out, "0x80")[3] == "-2" and table_row(out, "0x40")[3] == "1"
    assert field(run(capsys, "cast", "-3", "--to", "int8_ocp"), "result").startswith("-2 ")


def test_formats_table_says_nothing_false(capsys):
    out = run(capsys, "formats")
    header = table_row(out, "name")
    for fmt in fpemu.formats():
        row = dict(zip(header, table_row(out, fmt.name)))
        if fmt.name in WIDE_FACTS:
            top, normal, subnormal, eps = WIDE_FACTS[fmt.name]
        else:
            facts = small_facts(fmt)
            top, normal, subnormal = facts["max"], facts["min normal"], facts["min subnormal"]
            if fmt.exponent_bits == 0:
                subnormal = facts["positive"][0]  # fixed point: the step
        assert row["max"] == exact(top), fmt.name
        assert row["min normal"] == (exact(normal) if normal is not None else "-"), fmt.name
        assert row["min subnormal"] == (exact(subnormal) if subnormal is not None else "-"), fmt.name
        assert row["bias"] == ("-" if fmt.exponent_bits == 0 else str(fmt.bias)), fmt.name
