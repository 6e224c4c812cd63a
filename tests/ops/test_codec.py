"""encode/decode against ml_dtypes casts; pack/unpack against a NumPy bit-stream reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.testing import reference

ML_DTYPES_FORMATS = [f for f in fpemu.formats() if f.dtype is not None and f.bits <= 16]


def _ml_dtypes_codes(x32: np.ndarray, fmt) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        y = x32.astype(fmt.dtype)
    return y.view(np.uint8 if fmt.bits <= 8 else np.uint16)


def _patterns_as_float32() -> np.ndarray:
    """Every float16 and every bfloat16 bit pattern, as float32 (exact)."""
    h = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])


def _e8m0_ml_dtypes_bug(x32: np.ndarray) -> np.ndarray:
    """ml_dtypes rounds float32 subnormals in (2**-127, 1.5 * 2**-127) up to 2**-126 (PITFALLS.md)."""
    return (x32 > 2.0**-127) & (x32 < 1.5 * 2.0**-127)


@pytest.mark.long
@pytest.mark.parametrize("fmt", ML_DTYPES_FORMATS, ids=lambda f: f.name)
def test_encode_equals_ml_dtypes_cast(fmt):
    x = _patterns_as_float32()
    codes = np.asarray(fpemu.encode(jnp.asarray(x), fmt))
    expected = _ml_dtypes_codes(x, fmt)
    skip = np.zeros(x.shape, bool)
    if fmt.name == "fp16":  # NumPy keeps NaN payload bits; fpemu gives the canonical quiet NaN
        skip = np.isnan(x)
        np.testing.assert_array_equal(codes[skip], np.where(np.signbit(x[skip]), 0xFE00, 0x7E00))
    if fmt.name == "e8m0fnu":
        skip = _e8m0_ml_dtypes_bug(x)
        assert skip.sum() > 0
        np.testing.assert_array_equal(codes[skip], 0x00)  # the correct answer: 2**-127
    np.testing.assert_array_equal(codes[~skip], expected[~skip])


@pytest.mark.parametrize("fmt", ML_DTYPES_FORMATS, ids=lambda f: f.name)
def test_decode_every_code_equals_ml_dtypes(fmt):
    codes = np.arange(fmt.num_codes, dtype=fmt.code_dtype)
    values = np.asarray(fpemu.decode(codes, fmt))
    expected = codes.astype(np.uint8 if fmt.bits <= 8 else np.uint16).view(fmt.dtype).astype(np.float32)
    assert values.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(values), np.isnan(expected))
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(values[finite].view(np.uint32), expected[finite].view(np.uint32))


@pytest.mark.parametrize("fmt", ML_DTYPES_FORMATS, ids=lambda f: f.name)
def test_encode_decode_round_trip_of_every_value(fmt):
    codes = np.arange(fmt.num_codes, dtype=fmt.code_dtype)
    values = fpemu.decode(codes, fmt)
    again = np.asarray(fpemu.encode(values, fmt))
    finite = ~np.isnan(np.asarray(values))
    np.testing.assert_array_equal(again[finite], codes[finite])


SMALL_FORMATS = [f for f in fpemu.formats() if f.bits <= 16]


@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_decode_every_code_equals_the_reference(fmt):
    """Every code of every layout (P3109's, two's complement...) against the exact reference's decode."""
    codes = np.arange(fmt.num_codes, dtype=fmt.code_dtype)
    values = np.asarray(
        fpemu.decode(codes, fmt, dtype=jnp.float32 if fpemu.get_format("fp32").max >= fmt.max else jnp.float64)
    )
    expected = np.array([reference.decode_scalar(int(c), fmt) for c in codes])
    np.testing.assert_array_equal(np.isnan(values), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(values[finite], expected[finite])
    np.testing.assert_array_equal(np.signbit(values[finite]), np.signbit(expected[finite]))
    again = np.asarray(fpemu.encode(values, fmt))
    np.testing.assert_array_equal(again[finite], codes[finite])  # every value encodes to its own code


def test_p3109_and_int8_codes():
    np.testing.assert_array_equal(
        np.asarray(fpemu.decode(jnp.array([0x7F, 0xFF, 0x80, 0x7E, 0x01], jnp.uint8), "p3109_k8p3se")),
        [np.inf, -np.inf, np.nan, 49152.0, 2.0**-17],
    )
    np.testing.assert_array_equal(
        np.asarray(fpemu.decode(jnp.array([0xFE, 0xFF, 0xFD, 0x00], jnp.uint8), "p3109_k8p3ue")),
        [np.inf, np.nan, 1.25 * 2.0**31, 0.0],
    )
    x = jnp.array([-2.0, -2.01, 2.0, -0.0, -1 / 64, 1.984375, jnp.nan, -jnp.inf, jnp.inf])
    assert fpemu.encode(x, "int8_ocp").tolist() == [0x80, 0x80, 0x7F, 0x00, 0xFF, 0x7F, 0x00, 0x80, 0x7F]
    codes = jnp.arange(256, dtype=jnp.uint8)
    np.testing.assert_array_equal(
        np.asarray(fpemu.decode(codes, "int8_ocp")), np.arange(256).astype(np.uint8).view(np.int8) / 64
    )


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32])
def test_decode_into_narrow_dtypes(dtype):
    codes = np.arange(256, dtype=np.uint8)
    values = fpemu.decode(codes, "e4m3fn", dtype=dtype)
    assert values.dtype == dtype
    np.testing.assert_array_equal(
        np.asarray(values.astype(jnp.float32)), np.asarray(fpemu.decode(codes, "e4m3fn")), strict=True
    )


def test_decode_tf32_and_fp32_codes():
    tf32 = fpemu.get_format("tf32")
    assert float(fpemu.decode(jnp.uint32(0x1FC00), tf32)) == 1.0  # (127 << 10)
    assert float(fpemu.decode(jnp.uint32(0x3F800000), "fp32")) == 1.0


def test_decode_rejects_out_of_range_codes_eagerly_and_gives_nan_under_jit():
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\) for e2m1fn, got 16"):
        fpemu.decode(jnp.array([1, 16], jnp.uint8), "e2m1fn")
    with pytest.raises(ValueError, match="got -1"):
        fpemu.decode(jnp.array([-1, 3], jnp.int32), "e4m3fn")
    out = jax.jit(lambda c: fpemu.decode(c, "e2m1fn"))(jnp.array([1, 16, 255], jnp.uint8))
    assert float(out[0]) == 0.5 and np.isnan(np.asarray(out[1:])).all()
    out = jax.jit(lambda c: fpemu.decode(c, "e4m3fn"))(jnp.array([-1, 300, 0x38], jnp.int32))
    assert np.isnan(np.asarray(out[:2])).all() and float(out[2]) == 1.0


def test_decode_errors():
    with pytest.raises(TypeError, match="codes must be an integer array"):
        fpemu.decode(jnp.ones(3), "e4m3fn")
    with pytest.raises(ValueError, match="cannot hold exactly"):
        fpemu.decode(jnp.zeros(3, jnp.uint8), "e8m0fnu", dtype=jnp.float16)
    with pytest.raises(TypeError, match="dtype must be a float16, bfloat16, float32 or float64"):
        fpemu.decode(jnp.zeros(3, jnp.uint8), "e4m3fn", dtype=jnp.int32)


def test_encode_code_dtypes():
    x = jnp.ones(3)
    assert fpemu.encode(x, "e2m1fn").dtype == jnp.uint8
    assert fpemu.encode(x, "bf16").dtype == jnp.uint16
    assert fpemu.encode(x, "tf32").dtype == jnp.uint32
    assert fpemu.encode(x, "fp32").dtype == jnp.uint32


def test_encode_fp32_of_float32_is_the_bit_pattern():
    x = _patterns_as_float32()
    codes = np.asarray(fpemu.encode(jnp.asarray(x), "fp32"))
    np.testing.assert_array_equal(codes[~np.isnan(x)], x.view(np.uint32)[~np.isnan(x)])


# -- pack / unpack ----------------------------------------------------------------------------------


def _stream_reference(codes: np.ndarray, width: int) -> np.ndarray:
    """Little-endian bit stream: bit j of code i is stream bit i*width + j; 8 stream bits per byte."""
    bits = (codes[..., None].astype(np.uint64) >> np.arange(width, dtype=np.uint64)) & 1
    bits = bits.reshape(*codes.shape[:-1], -1).astype(np.uint8)
    return np.packbits(bits, axis=-1, bitorder="little")


PACK_FORMATS = ["e2m1fn", "e2m3fn", "e3m2fn", "e4m3fn", "bf16", "fp16"]


@pytest.mark.long
@pytest.mark.parametrize("fmt", [*PACK_FORMATS, "custom7"])
def test_pack_matches_bit_stream_reference_and_unpack_inverts(fmt):
    fmt = fpemu.Format(name="e3m3", exponent_bits=3, mantissa_bits=3) if fmt == "custom7" else fpemu.get_format(fmt)
    group = {4: 2, 6: 4, 7: 8}.get(fmt.bits, 1)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, fmt.num_codes, size=(3, 5 * group)).astype(fmt.code_dtype)
    packed = fpemu.pack(codes, fmt)
    assert packed.dtype == jnp.uint8 and packed.shape == (3, 5 * group * fmt.bits // 8)
    np.testing.assert_array_equal(np.asarray(packed), _stream_reference(codes, fmt.bits))
    np.testing.assert_array_equal(np.asarray(fpemu.unpack(packed, fmt)), codes, strict=True)


def test_pack_layouts_in_words():
    np.testing.assert_array_equal(np.asarray(fpemu.pack(jnp.array([0x1, 0xA], jnp.uint8), "e2m1fn")), [0xA1])
    # 6-bit: codes a, b, c, d fill the 24-bit little-endian word a | b << 6 | c << 12 | d << 18
    packed = np.asarray(fpemu.pack(jnp.array([1, 2, 3, 4], jnp.uint8), "e2m3fn"))
    assert int(packed[0]) | int(packed[1]) << 8 | int(packed[2]) << 16 == 1 | 2 << 6 | 3 << 12 | 4 << 18


@pytest.mark.long
def test_pack_unpack_errors():
    with pytest.raises(ValueError, match="multiple of 3 bytes"):
        fpemu.unpack(jnp.zeros(4, jnp.uint8), "e2m3fn")
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\)"):
        fpemu.pack(jnp.array([0, 16], jnp.uint8), "e2m1fn")
    with pytest.raises(TypeError, match="packed must be a uint8 array"):
        fpemu.unpack(jnp.zeros(4, jnp.uint16), "e2m1fn")
    with pytest.raises(TypeError, match="codes must be an integer array"):
        fpemu.pack(jnp.zeros(4), "e2m1fn")
    with pytest.raises(ValueError, match="at least one dimension"):
        fpemu.pack(jnp.uint8(3), "e2m1fn")
    packed = fpemu.pack(jnp.zeros(6, jnp.uint8), "e2m3fn")  # 6 codes: 8 in 6 bytes
    with pytest.raises(ValueError, match=r"count must be an int >= 0 and <= 8, got 9"):
        fpemu.unpack(packed, "e2m3fn", count=9)
    with pytest.raises(ValueError, match=r"count must be an int >= 0"):
        fpemu.unpack(packed, "e2m3fn", count=-1)
    with pytest.raises(TypeError, match="count must be an int"):
        fpemu.unpack(packed, "e2m3fn", count=2.0)


@pytest.mark.long
@pytest.mark.parametrize("fmt", ["e2m1fn", "e2m3fn", "custom7", "bf16"])
@pytest.mark.parametrize("n", [3, 13])
def test_pack_any_length_pads_with_zero_codes_and_unpack_takes_the_count(fmt, n):
    """As numpy.packbits/unpackbits: the last group is padded with zero codes, `count` drops them."""
    fmt = fpemu.Format(name="e3m3", exponent_bits=3, mantissa_bits=3) if fmt == "custom7" else fpemu.get_format(fmt)
    group = {4: 2, 6: 4, 7: 8}.get(fmt.bits, 1)
    codes = np.random.default_rng(n).integers(0, fmt.num_codes, size=(2, n)).astype(fmt.code_dtype)
    padded = np.concatenate([codes, np.zeros((2, -n % group), fmt.code_dtype)], axis=-1)
    packed = fpemu.pack(codes, fmt)
    np.testing.assert_array_equal(np.asarray(packed), _stream_reference(padded, fmt.bits))
    np.testing.assert_array_equal(np.asarray(fpemu.unpack(packed, fmt, count=n)), codes, strict=True)
    np.testing.assert_array_equal(np.asarray(fpemu.unpack(packed, fmt)), padded, strict=True)


def test_pack_any_length_under_jit():
    codes = jnp.asarray(np.random.default_rng(2).integers(0, 64, (3, 7)), jnp.uint8)
    round_trip = jax.jit(lambda c: fpemu.unpack(fpemu.pack(c, "e3m2fn"), "e3m2fn", count=7))(codes)
    np.testing.assert_array_equal(np.asarray(round_trip), np.asarray(codes), strict=True)


@pytest.mark.long
def test_pack_under_jit_and_vmap():
    codes = jnp.asarray(np.random.default_rng(1).integers(0, 16, (4, 8)), jnp.uint8)
    packed = jax.jit(lambda c: fpemu.pack(c, "e2m1fn"))(codes)
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda c: fpemu.pack(c, "e2m1fn"))(codes)), np.asarray(packed))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda p: fpemu.unpack(p, "e2m1fn"))(packed)), np.asarray(codes))


# -- out-of-range codes under jit: never silent --------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "fmt", "got"),
    [
        (jnp.array([1, 17, 3, 4], jnp.uint8), "e2m1fn", "17"),
        (jnp.array([1, -1, 3, 4], jnp.int32), "e2m1fn", "-1"),
        (jnp.array([[1, 2, 3, -128]], jnp.int8), "e3m2fn", "-128"),
        (jnp.array([0, 256], jnp.int32), "e4m3fn", "256"),
        (jnp.array([0, 2**16], jnp.uint32), "bf16", "65536"),
    ],
)
def test_pack_under_jit_raises_at_run_time_for_out_of_range_codes(codes, fmt, got):
    """Eager pack raises ValueError; under jit a debug callback raises the same ValueError when the
    computation runs, which JAX reports as a JaxRuntimeError (a RuntimeError) carrying its message.
    Before, the codes were masked to their low bits and packed silently."""
    n = fpemu.get_format(fmt).num_codes
    message = rf"codes must lie in \[0, {n}\) for {fmt}, got {got}"
    with pytest.raises(ValueError, match=message):
        fpemu.pack(codes, fmt)
    with pytest.raises(jax.errors.JaxRuntimeError, match=message) as info:
        jax.block_until_ready(jax.jit(lambda c: fpemu.pack(c, fmt))(codes))
    # the run-time message says what happened and how to fix it (it was only the bare range before)
    assert f"jnp.clip(codes, 0, {n - 1})" in str(info.value) and "fpemu.pack under jax.jit" in str(info.value)


def test_pack_under_jit_of_vmap_raises_for_a_bad_row():
    f = jax.jit(jax.vmap(lambda c: fpemu.pack(c, "e2m1fn")))
    good = jnp.array([[1, 2], [3, 15]], jnp.int8)
    np.testing.assert_array_equal(np.asarray(f(good)), [[0x21], [0xF3]])
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"codes must lie in \[0, 16\) for e2m1fn, got 16"):
        jax.block_until_ready(f(good.at[1, 0].set(16)))


def test_pack_under_jit_checks_only_where_the_dtype_can_hold_a_bad_code():
    """uint8 codes of an 8-bit format are always in range: no callback; int32 codes of it get one."""
    assert "debug_callback" not in str(jax.make_jaxpr(lambda c: fpemu.pack(c, "e4m3fn"))(jnp.zeros(4, jnp.uint8)))
    assert "debug_callback" in str(jax.make_jaxpr(lambda c: fpemu.pack(c, "e4m3fn"))(jnp.zeros(4, jnp.int32)))
    assert "debug_callback" in str(jax.make_jaxpr(lambda c: fpemu.pack(c, "e2m1fn"))(jnp.zeros(4, jnp.uint8)))
    codes = jnp.asarray(np.random.default_rng(3).integers(0, 64, (2, 8)), jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda c: fpemu.pack(c, "e2m3fn"))(codes)), np.asarray(fpemu.pack(codes, "e2m3fn"))
    )


def test_decode_under_jit_gives_nan_for_every_out_of_range_code_and_format():
    """decode's documented answer under jit (a value never taken by a valid code of a NaN-less format)."""
    for fmt, codes in [("e2m1fn", [16, 255]), ("e8m0fnu", [256, -1]), ("int8_ocp", [256, -129]), ("bf16", [65536])]:
        out = jax.jit(lambda c, f=fmt: fpemu.decode(c, f))(jnp.array(codes, jnp.int32))
        assert np.isnan(np.asarray(out)).all(), fmt
