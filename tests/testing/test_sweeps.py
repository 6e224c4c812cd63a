"""Exhaustive sweeps: the inputs are exactly every code, mismatches are counted and listed, ranges
resume, and the report reads well."""

from __future__ import annotations

import io
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.testing import SweepReport, reference, sweep

SMALL = [f for f in fpemu.formats() if f.bits <= 16]
ids = lambda f: f.name


def _identity(x):
    return x


@pytest.mark.parametrize("fmt", SMALL, ids=ids)
def test_inputs_are_every_code_decoded(fmt):
    """The inputs, in code order, are the oracle's value of every code (NaN codes: a NaN)."""
    seen = []

    def record(x):
        seen.append(x.copy())
        return x

    dtype = "float64" if fmt.name == "fp16" else "float32"
    report = sweep(record, _identity, fmt, dtype=dtype, chunk=1000)
    x = np.concatenate(seen)
    assert x.dtype == np.dtype(dtype) and x.size == fmt.num_codes == report.checked
    expected = np.array([reference.decode_scalar(c, fmt) for c in range(fmt.num_codes)])
    np.testing.assert_array_equal(np.isnan(x), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(x[finite].astype(np.float64).view(np.uint64), expected[finite].view(np.uint64))
    assert report.ok and report.complete and report.first == ()


@pytest.mark.parametrize("fmt", ["e4m3fn", "e2m1fn", "e8m0fnu", "bf16"])
def test_quantize_against_the_oracle(fmt):
    """The intended use: fpemu's fast path against the exact reference, on every input of a format."""
    report = sweep(
        lambda x: fpemu.quantize(x, fmt),
        lambda x: reference.round_array(x, fmt).astype(x.dtype),
        "bf16",
    )
    report.raise_if_mismatch()
    assert report.checked == 1 << 16
    codes = sweep(lambda x: fpemu.encode(x, fmt), lambda x: reference.encode_array(x, fmt), "fp16")
    assert codes.ok, str(codes)


def test_planted_mismatches_are_counted_and_listed_in_code_order():
    def wrong(x):
        y = np.asarray(fpemu.quantize(x, "e4m3fn"))
        return np.where(np.abs(x) == 0.5, np.float32(0.5625), y)  # wrong at +0.5 and -0.5 only

    def oracle(x):
        return reference.round_array(x, "e4m3fn").astype(np.float32)

    report = sweep(wrong, oracle, "e4m3fn", show=5)
    assert report.mismatches == 2 and not report.ok and report.checked == 256
    assert [m.code for m in report.first] == [0x30, 0xB0]
    first = report.first[0]
    assert (first.input, float(first.actual), float(first.expected)) == (0.5, 0.5625, 0.5)
    text = str(report)
    assert "over all 256 codes of e4m3fn as float32: 2 mismatches" in text
    assert "0x30  0.5    0.5625  0.5       0x3f100000   0x3f000000" in text
    with pytest.raises(AssertionError, match="2 mismatches") as info:
        report.raise_if_mismatch()
    assert str(info.value) == text


def test_show_limits_the_kept_mismatches_not_the_count():
    report = sweep(lambda x: x + np.float32(1), _identity, "e2m3fn", show=3)
    assert report.mismatches == 64  # x + 1 != x for every code of e2m3fn (all finite)
    assert len(report.first) == 3


def test_float32_ranges_chunks_and_resuming():
    """A range of the float32 sweep: the inputs are exactly the bit patterns, chunked as asked."""
    chunks = []

    def record(x):
        chunks.append(x.view(np.uint32).copy())
        return x

    start, stop = 0x3F7FFF00, 0x3F800100
    report = sweep(record, _identity, chunk=100, start=start, stop=stop)
    assert [c.size for c in chunks] == [100] * 5 + [12]
    np.testing.assert_array_equal(np.concatenate(chunks), np.arange(start, stop, dtype=np.uint32))
    assert report.ok and not report.complete and report.checked == 512
    assert str(report).endswith("resume with start=0x3f800100")

    def bad(x):
        return np.where(x.view(np.uint32) % 7 == 0, np.float32(0), x)

    whole = sweep(bad, _identity, start=start, stop=stop)
    first = sweep(bad, _identity, start=start, stop=start + 200)
    rest = sweep(bad, _identity, start=first.stop, stop=stop)
    assert first.mismatches + rest.mismatches == whole.mismatches == sum(b % 7 == 0 for b in range(start, stop))


def test_nan_payloads_in_the_float32_sweep():
    """The NaN range carries every payload: equal as NaNs, different bit for bit."""
    start = 0x7F800001
    canonical = lambda x: np.full_like(x, np.nan)
    assert sweep(_identity, canonical, start=start, stop=start + 1000).ok
    report = sweep(_identity, canonical, start=start, stop=start + 1000, nan_payload=True, show=1)
    assert report.mismatches == 1000 - (0x7FC00000 in range(start, start + 1000))
    assert "0x7f800001" in str(report)


def test_integer_results_and_jax_arrays():
    report = sweep(lambda x: fpemu.encode(jnp.asarray(x), "e4m3fn"), lambda x: np.zeros(x.shape, np.uint8), "e4m3fn")
    assert report.mismatches == 255  # every code but 0 encodes to itself, not 0
    assert "0x1" in str(report)


def test_progress_bar(capsys):
    sweep(_identity, _identity, "e4m3fn", chunk=64, progress=True)
    err = capsys.readouterr().err
    assert err.count("\r") == 4 and "100.0% 256/256" in err and err.endswith("\n")
    stream = io.StringIO()
    sweep(_identity, _identity, "e2m1fn", progress=stream)
    assert "sweep e2m1fn [" in stream.getvalue()
    sweep(_identity, _identity, "e2m1fn")
    assert capsys.readouterr().err == ""


def test_argument_errors():
    with pytest.raises(ValueError, match="at most 16 bits, got tf32 \\(19 bits\\)"):
        sweep(_identity, _identity, "tf32")
    with pytest.raises(ValueError, match="fp64"):
        sweep(_identity, _identity, "fp64")
    with pytest.raises(ValueError, match="bfloat16 cannot hold every value of fp16"):
        sweep(_identity, _identity, "fp16", dtype="bfloat16")
    with pytest.raises(ValueError, match="float32 sweep feeds float32"):
        sweep(_identity, _identity, dtype="float64", stop=10)
    with pytest.raises(ValueError, match="stop must be in \\[5, 256\\]"):
        sweep(_identity, _identity, "e4m3fn", start=5, stop=4)
    with pytest.raises(ValueError, match="chunk must be in"):
        sweep(_identity, _identity, "e4m3fn", chunk=0)
    with pytest.raises(ValueError, match="must return an array of its input's shape"):
        sweep(lambda x: x[:1], _identity, "e4m3fn")
    with pytest.raises(TypeError, match="<lambda> returned float32 but <lambda> returned float64"):
        sweep(lambda x: x, lambda x: x.astype(np.float64), "e4m3fn")
    with pytest.raises(TypeError, match="callables"):
        sweep(None, _identity, "e4m3fn")


def test_report_is_a_frozen_record():
    report = sweep(_identity, _identity, "e2m1fn")
    assert isinstance(report, SweepReport) and report.elapsed >= 0
    with pytest.raises(AttributeError):
        report.mismatches = 3  # type: ignore[misc]
    assert math.isfinite(report.elapsed)


@pytest.mark.fpemu_exhaustive
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "bf16"])
def test_every_float32_against_ml_dtypes(fmt):
    """All 2**32 float32 inputs (run with --fpemu-exhaustive): fpemu's codes against ml_dtypes'
    casts, which are right for float32 input to these formats (PITFALLS)."""
    fmt = fpemu.get_format(fmt)
    encode = jax.jit(lambda v: fpemu.encode(v, fmt))
    uint = np.uint8 if fmt.bits == 8 else np.uint16

    def ml_dtypes_codes(x):
        with np.errstate(invalid="ignore", over="ignore"):
            return x.astype(fmt.dtype).view(uint)

    report = sweep(lambda x: encode(jnp.asarray(x)), ml_dtypes_codes, chunk=1 << 24, progress=True)
    report.raise_if_mismatch()
    assert report.complete
