"""The ``fpemu`` command line: run in-process through `main`, plus one real subprocess."""

from __future__ import annotations

import re
import subprocess
import sys

import jax
import pytest

import fpemu
from fpemu.tools.cli import main
from fpemu.tools.numbers import exact

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


def test_cast_rounds_from_exact_float64(capsys):
    out = run(capsys, "cast", "0.1", "--to", "bf16")
    assert field(out, "input") == "0.1  (0x1.999999999999ap-4)"
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


def test_python_dash_m_fpemu():
    proc = subprocess.run(
        [sys.executable, "-m", "fpemu", "formats"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert table_row(proc.stdout, "e4m3fn")[4] == "448"
    assert table_row(proc.stdout, "e4m3")[4] == "240"
