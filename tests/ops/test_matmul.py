"""matmul, dot_general, conv_general_dilated: bit-exact against the sequential reference, bounds, geometry, errors."""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
import fpemu._ops.fusion as fusion
from fpemu import ROUNDING_MODES
from fpemu._ops.geometry import dot_geometry
from fpemu.testing import assert_bit_exact, dot_general_reference

MM = (((1,), (0,)), ((), ()))  # dimension numbers of a 2-D matmul
DETERMINISTIC = tuple(m for m in ROUNDING_MODES if m != "stochastic")


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(actual, expected):
    """Bitwise equality, NaN compared as NaN (any payload), the sign of zero compared."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (
        actual.dtype, actual.shape, expected.dtype, expected.shape,
    )  # fmt: skip
    both_nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    bad = ~(both_nan | (_bits(actual) == _bits(expected)))
    first = np.argwhere(bad)[:3].tolist()
    assert not bad.any(), f"{bad.sum()} mismatches, first at {first}: {actual[bad][:5]} != {expected[bad][:5]}"


def exact_friendly(rng, shape, lo=0.25, hi=3.75) -> np.ndarray:
    """float32 values of magnitude in [lo, hi]: once rounded to FP8 (or fp16/bf16 here), their products
    are multiples of 2**-10 below 16, so float32 sums of up to 2**10 of them are exact."""
    magnitude = rng.uniform(lo, hi, shape)
    return (magnitude * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


@pytest.fixture
def rng():
    return np.random.default_rng(20261121)


# -- the accumulator against the sequential reference ------------------------------------------------


# bf16 x fp16 products have 8 + 11 bits: their float32 chunk sums are exact here for chunks of 1 and 4 only
ACCUMULATOR_CASES = (
    [(("e4m3fn", "e4m3fn"), acc, k) for acc in ("fp16", "bf16", "fp32", "tf32", "e5m2") for k in (1, 4, 32, None)]
    + [(("e5m2", "e4m3fn"), acc, every) for acc in ("fp16", "bf16", "fp32") for every in (1, 4, 32)]
    + [(("bf16", "fp16"), acc, every) for acc in ("fp16", "bf16") for every in (1, 4)]
)


@pytest.mark.parametrize(
    ("operands", "accumulate", "every"),
    ACCUMULATOR_CASES,
    ids=["x".join(o) + f"-{acc}-every={k}" for o, acc, k in ACCUMULATOR_CASES],
)
def test_accumulator_matches_reference(rng, operands, accumulate, every):
    """3x37 @ 37x5: every accumulator format and chunk size, bit for bit against the sequential reference."""
    a, b = exact_friendly(rng, (3, 37)), exact_friendly(rng, (37, 5))
    options = dict(lhs=operands[0], rhs=operands[1], accumulate=accumulate, accumulate_every=every)
    assert_same_bits(fpemu.dot_general(a, b, MM, **options), dot_general_reference(a, b, MM, **options))


@pytest.mark.parametrize("mode", ["nearest_even", "stochastic"])
def test_a_short_chunk_loop_is_unrolled_with_the_same_bits(rng, mode):
    """The loop over a chunked sum's later chunks is straight-line code up to 8 steps (9 chunks) and a
    loop from 9 (10 chunks): one loop more in the program, and both give the sequential reference's
    bits, stochastic rounding's per-chunk keys included."""
    k = 4
    key = jax.random.key(11) if mode == "stochastic" else None
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=k, accumulate_rounding=mode, key=key)
    dot = jax.jit(functools.partial(fpemu.dot_general, dimension_numbers=MM, **options))
    loops = {}
    for chunks in (9, 10):
        a, b = exact_friendly(rng, (3, chunks * k)), exact_friendly(rng, (chunks * k, 5))
        loops[chunks] = dot.lower(a, b).as_text().count("stablehlo.while")  # the key splits' loops too
        assert_same_bits(dot(a, b), dot_general_reference(a, b, MM, **options))
    assert loops[10] == loops[9] + 1, loops


@pytest.mark.parametrize(
    ("accumulate", "mode"), [("bf16", "nearest_even"), ("bf16", "stochastic"), ("hopper_fp8", None)]
)  # the Hopper FP8 sum truncates: it has no rounding mode
def test_a_contraction_shorter_than_a_chunk_is_summed_unpadded(rng, accumulate, mode):
    """A contraction of at most ``accumulate_every`` products is one chunk of its own length: no zero
    products padded in (K = 10 of a chunk of 128 was a dot of 128), the reference's bits; a longer
    contraction's last chunk is still padded."""
    key = jax.random.key(5) if mode == "stochastic" else None
    rounding = {} if accumulate == "hopper_fp8" else dict(accumulate_rounding=mode, key=key)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate=accumulate, accumulate_every=128, **rounding)
    dot = jax.jit(functools.partial(fpemu.dot_general, dimension_numbers=MM, **options))
    pads = {}
    for k in (10, 128, 138):
        a, b = exact_friendly(rng, (3, k)), exact_friendly(rng, (k, 5))
        pads[k] = dot.lower(a, b).as_text().count("stablehlo.pad")
        assert_same_bits(dot(a, b), dot_general_reference(a, b, MM, **options))
    assert pads[10] == pads[128] and pads[138] > pads[128], pads


@pytest.mark.long
@pytest.mark.parametrize("saturate", [False, True], ids=["wrap", "saturate"])
@pytest.mark.parametrize("mode", ROUNDING_MODES)
def test_accumulate_rounding_modes(rng, mode, saturate):
    a, b = exact_friendly(rng, (3, 23)), exact_friendly(rng, (23, 4))
    key = jax.random.key(7) if mode == "stochastic" else None
    configs = (("bf16", 1), ("e4m3fn", 5)) if not saturate else (("e4m3fn", 5),)  # e4m3fn overflows: sums reach 300
    for accumulate, every in configs:
        options = dict(
            lhs="e4m3fn", rhs="e4m3fn", accumulate=accumulate, accumulate_every=every, accumulate_rounding=mode,
            saturate=saturate, key=key,
        )  # fmt: skip
        assert_same_bits(fpemu.dot_general(a, b, MM, **options), dot_general_reference(a, b, MM, **options))


@pytest.mark.long
@pytest.mark.parametrize("saturate", [False, True], ids=["wrap", "saturate"])
@pytest.mark.parametrize("mode", ROUNDING_MODES)
def test_operand_and_output_rounding_modes(rng, mode, saturate):
    a, b = exact_friendly(rng, (4, 19)), exact_friendly(rng, (19, 3))
    a[0, 0], b[1, 2] = 500.0, -1e6  # beyond e4m3fn's 448: NaN, or ±448 when saturating
    key = jax.random.key(3) if mode == "stochastic" else None
    options = dict(lhs="e4m3fn", rhs="e5m2", out="e4m3fn", rounding=mode, saturate=saturate, key=key)
    actual = fpemu.dot_general(a, b, MM, **options)
    assert_same_bits(actual, dot_general_reference(a, b, MM, **options))
    if mode in ("nearest_even", "nearest_away", "stochastic"):  # these modes overflow e4m3fn to NaN
        assert np.isnan(np.asarray(actual)[0]).any() != saturate


@pytest.mark.long
@pytest.mark.parametrize("accumulate", ["bf16", "fp16"])
def test_sequential_accumulation_of_any_values_is_exact(rng, accumulate):
    """accumulate_every=1: each chunk is one exact product, so any data matches bit for bit."""
    a = (rng.standard_normal((4, 64)) * np.exp2(rng.integers(-8, 8, (4, 64)))).astype(np.float32)
    b = (rng.standard_normal((64, 3)) * np.exp2(rng.integers(-8, 8, (64, 3)))).astype(np.float32)
    for lhs, rhs in (("e4m3fn", "e5m2"), ("bf16", "bf16"), ("fp16", "fp16"), ("e2m1fn", "e3m2fn")):
        options = dict(lhs=lhs, rhs=rhs, accumulate=accumulate, accumulate_every=1, out="bf16")
        assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))


@pytest.mark.long
def test_contraction_order_with_batch_and_several_contracting_dimensions(rng):
    """The contraction runs row-major over the contracting dimensions in the order listed."""
    a = exact_friendly(rng, (2, 3, 4, 5))
    b = exact_friendly(rng, (5, 2, 4, 6))
    dims = (((3, 2), (0, 2)), ((0,), (1,)))  # contract a's (3, 2) with b's (0, 2); batch a0 with b1
    for every in (1, 3):
        options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="e4m3fn", accumulate_every=every, saturate=True)
        actual = fpemu.dot_general(a, b, dims, **options)
        assert actual.shape == (2, 3, 6)
        assert_same_bits(actual, dot_general_reference(a, b, dims, **options))
    # the other listing order is another sequence: a narrow accumulator tells them apart
    swapped = (((2, 3), (2, 0)), ((0,), (1,)))
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="e4m3fn", accumulate_every=1, saturate=True)
    assert_same_bits(fpemu.dot_general(a, b, swapped, **options), dot_general_reference(a, b, swapped, **options))
    exact = np.einsum("bmkc,cbkn->bmn", np.asarray(fpemu.quantize(a, "e4m3fn"), np.float64),
                      np.asarray(fpemu.quantize(b, "e4m3fn"), np.float64))  # fmt: skip
    unrounded = fpemu.dot_general(a, b, dims, lhs="e4m3fn", rhs="e4m3fn")
    np.testing.assert_array_equal(np.asarray(unrounded, np.float64), exact)


def test_chunks_sliced_from_a_contraction_of_several_dimensions(rng):
    """A contraction over a run of dimensions of both operands (here with a batch dimension and with
    a 1-D and a broadcast matmul operand) is chunked along the operands as stored, their run merged:
    chunks across the dimensions' boundaries, a padded last chunk, bit for bit against the
    sequential reference; a contraction that is not such a run (`Geometry.chunked` None) is chunked
    along its (B, M, K) form."""
    a = exact_friendly(rng, (2, 3, 4, 5))
    b = exact_friendly(rng, (2, 4, 5, 6))
    runs = (((2, 3), (1, 2)), ((0,), (0,)))
    view, lhs_axis, rhs_axis = dot_geometry(a.shape, b.shape, runs).chunked
    assert (view.lhs_shape, view.rhs_shape, lhs_axis, rhs_axis) == ((2, 3, 20), (2, 20, 6), 2, 1)
    assert dot_geometry(a.shape, b.transpose(0, 2, 1, 3).shape, (((2, 3), (2, 1)), ((0,), (0,)))).chunked is None
    for every in (3, 7):  # K = 20: chunks that cross the rows of 5; the last chunk padded
        options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="e4m3fn", accumulate_every=every, saturate=True)
        assert_same_bits(fpemu.dot_general(a, b, runs, **options), dot_general_reference(a, b, runs, **options))
        # the same operands, b stored with the contraction's dimensions swapped: not a run
        swapped = b.transpose(0, 2, 1, 3)
        dims = (((2, 3), (2, 1)), ((0,), (0,)))
        assert_same_bits(
            fpemu.dot_general(a, swapped, dims, **options), dot_general_reference(a, swapped, dims, **options)
        )
    v, m = exact_friendly(rng, (20,)), exact_friendly(rng, (3, 20, 4))
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=6)
    expected = [dot_general_reference(v, m[i], (((0,), (0,)), ((), ())), **options) for i in range(3)]
    assert_same_bits(fpemu.matmul(v, m, **options), np.stack(expected))


def test_a_rounded_operand_that_the_dot_transposes_is_computed_once(rng, monkeypatch):
    """An operand rounded to its format and then transposed by the dot (here the lhs, contracted
    along its first axis) is materialized first, so that its rounding loop runs in its own order
    (bench/RESULTS_matmul.md); the rhs, read as stored, is not. The same bits either way."""
    a, b = exact_friendly(rng, (64, 48)), exact_friendly(rng, (64, 8))
    dims = (((0,), (0,)), ((), ()))

    def traced():
        jax.clear_caches()  # compute_dot's trace is cached across the two settings
        fn = functools.partial(fpemu.dot_general, dimension_numbers=dims, lhs="e4m3fn", rhs="e5m2")
        return str(jax.make_jaxpr(fn)(a, b)).count("cond["), fn(a, b)

    conds, result = traced()
    monkeypatch.setattr(fusion, "REORDERED_MIN_SIZE", 1 << 40)
    fewer, unmaterialized = traced()
    one = str(jax.make_jaxpr(lambda v: fusion.materialize((v,))[0])(a)).count("cond[")  # one materialization's
    assert conds == fewer + one, (conds, fewer, one)
    assert_same_bits(result, unmaterialized)
    assert_same_bits(result, dot_general_reference(a, b, dims, lhs="e4m3fn", rhs="e5m2"))


@pytest.mark.parametrize(
    ("lhs_scale", "rhs_scale"), [(0.25, None), (None, 8.0), (2.0**-6, 2.0**5), (0.3, 1.7), (3.0, 0.1)]
)
def test_scales(rng, lhs_scale, rhs_scale):
    a = exact_friendly(rng, (3, 16), 0.05, 0.9)
    b = exact_friendly(rng, (16, 4), 1.0, 30.0)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", out="bf16", lhs_scale=lhs_scale, rhs_scale=rhs_scale)
    assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))
    options.update(accumulate="fp16", accumulate_every=4)
    assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))


def test_an_overflowing_scale_product_keeps_an_exact_zero():
    """lhs_scale * rhs_scale = 2**200 overflows float32: a sum that is exactly zero stays 0 (its true
    product is), not 0 * inf = NaN; a nonzero one is inf, as its true product overflows."""
    a = np.array([[2.0**100, 0.0]], np.float32)
    b = np.array([[0.0, 2.0**100], [2.0**100, 0.0]], np.float32)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", lhs_scale=2.0**100, rhs_scale=2.0**100)
    got = fpemu.matmul(a, b, **options)
    assert np.asarray(got).tolist() == [[0.0, np.inf]]
    assert_same_bits(got, dot_general_reference(a, b, MM, **options))


def test_power_of_two_scales_are_exact(rng):
    """a / 2**s rounds like a, shifted: the scaled result is the unscaled one times nothing."""
    a, b = exact_friendly(rng, (3, 8)), exact_friendly(rng, (8, 2))
    plain = fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn")
    scaled = fpemu.matmul(
        a * np.float32(64), b / np.float32(4), lhs="e4m3fn", rhs="e4m3fn", lhs_scale=64.0, rhs_scale=jnp.float32(0.25)
    )
    assert_same_bits(scaled, plain * np.float32(16))  # (a * 64) @ (b / 4) = 16 (a @ b)


# -- bounds where the arithmetic is not exact ---------------------------------------------------------


@pytest.mark.parametrize("operands", [(None, None), ("e4m3fn", "e4m3fn"), ("bf16", "fp16")])
def test_default_path_within_bound_of_exact_sum(rng, operands):
    k = 512
    a = (rng.standard_normal((8, k)) * np.exp2(rng.integers(-10, 5, (8, k)))).astype(np.float32)
    b = (rng.standard_normal((k, 6)) * np.exp2(rng.integers(-10, 5, (k, 6)))).astype(np.float32)
    lhs, rhs = operands
    actual = np.asarray(fpemu.matmul(a, b, lhs=lhs, rhs=rhs), np.float64)
    qa = np.asarray(fpemu.quantize(a, lhs) if lhs else a, np.float64)
    qb = np.asarray(fpemu.quantize(b, rhs) if rhs else b, np.float64)
    exact = qa @ qb  # float64: products of at most 48 bits exact; the sum within 2**-40 relative
    u = 2.0**-24
    gamma = k * u / (1 - k * u)
    bound = gamma * (np.abs(qa) @ np.abs(qb)) + 2.0**-40 * np.abs(exact)
    assert np.all(np.abs(actual - exact) <= bound)
    if operands == (None, None):  # the default path is JAX's own float32 dot
        plain = lax.dot_general(jnp.asarray(a), jnp.asarray(b), MM, precision=lax.Precision.HIGHEST)
        assert_same_bits(fpemu.matmul(a, b), plain)


def test_chunked_float32_accumulation_within_bound(rng):
    k = 300
    a = rng.standard_normal((4, k)).astype(np.float32)
    b = rng.standard_normal((k, 3)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    bound = gamma * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    for every in (1, 7, 128):
        actual = np.asarray(fpemu.matmul(a, b, accumulate="fp32", accumulate_every=every), np.float64)
        assert np.all(np.abs(actual - exact) <= bound)


# -- the fast path ----------------------------------------------------------------------------------


def _dot_operand_dtypes(fn, *args) -> list[tuple[str, str]]:
    found = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(tuple(str(v.aval.dtype) for v in eqn.invars))
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                        visit(sub.jaxpr)
                    elif hasattr(sub, "eqns"):
                        visit(sub)

    visit(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


@pytest.mark.parametrize(
    ("lhs", "rhs", "dtype", "fast"),
    [
        ("e4m3fn", "e5m2", jnp.float32, True),
        ("e2m1fn", "e3m2fn", jnp.float32, True),
        ("e8m0fnu", "bf16", jnp.float32, True),
        (None, None, jnp.bfloat16, True),
        ("fp16", "e4m3fn", jnp.float32, False),
        (None, "e4m3fn", jnp.float32, False),
    ],
)
def test_fast_path_takes_bf16_operands(lhs, rhs, dtype, fast):
    a = jnp.ones((4, 8), dtype)
    b = jnp.ones((8, 2), dtype)
    for every in (None, 4):
        dots = _dot_operand_dtypes(functools.partial(fpemu.matmul, lhs=lhs, rhs=rhs, accumulate_every=every), a, b)
        assert dots and all((d == ("bfloat16", "bfloat16")) == fast for d in dots), dots


@pytest.mark.long
def test_fast_path_equals_reference_on_exact_sums(rng):
    a, b = exact_friendly(rng, (16, 200)), exact_friendly(rng, (200, 8))
    for fmt in ("e4m3fn", "e5m2", "e2m3fn", "e2m1fn"):
        options = dict(lhs=fmt, rhs="e4m3fn", out="bf16")
        assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))


def _bf16(rng, shape):
    """bfloat16 arrays of E4M3 values (`exact_friendly`): every sum here is exact in float32."""
    return fpemu.quantize(jnp.asarray(exact_friendly(rng, shape)), "e4m3fn").astype(jnp.bfloat16)


@pytest.mark.long
@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "dn"),
    [
        ((6, 40), (40, 5), (((1,), (0,)), ((), ()))),  # both plain
        ((40, 6), (40, 5), (((0,), (0,)), ((), ()))),  # wgrad: the lhs contracts its leading dimension
        ((6, 40), (5, 40), (((1,), (1,)), ((), ()))),  # the rhs transposed
        ((3, 4, 40), (40, 5), (((2,), (0,)), ((), ()))),  # free dimensions merged
        ((2, 6, 40), (2, 40, 5), (((2,), (1,)), ((0,), (0,)))),  # batched, plain
        ((6, 2, 40), (2, 5, 40), (((2,), (2,)), ((1,), (0,)))),  # batched, batch dimension not leading
    ],
)
def test_bfloat16_operands_in_every_layout(rng, lhs_shape, rhs_shape, dn):
    """bfloat16 operands reach the dot as they are where they are plain, converted and kept apart where
    they are transposed (XLA:CPU's dot runtime rejects a bfloat16 dot with a transposition fused in)."""
    a, b = _bf16(rng, lhs_shape), _bf16(rng, rhs_shape)
    for options in (dict(), dict(accumulate="bf16", accumulate_every=8)):
        got = jax.jit(lambda a, b, o=options: fpemu.dot_general(a, b, dn, **o))(a, b)
        assert_same_bits(
            got, dot_general_reference(np.asarray(a, np.float32), np.asarray(b, np.float32), dn, **options)
        )


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape"), [((40,), (40, 5)), ((6, 40), (40,)), ((2, 6, 40), (40, 5)), ((6, 40), (3, 40, 5))]
)
def test_bfloat16_matmul_with_broadcast_and_vectors(rng, lhs_shape, rhs_shape):
    a, b = _bf16(rng, lhs_shape), _bf16(rng, rhs_shape)
    expected = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(np.float32)  # exact sums
    assert_same_bits(jax.jit(fpemu.matmul)(a, b), expected)


def _pure_moves(compiled_text: str) -> list[str]:
    """The entry computation's fusions that only move data (parameters, bitcasts, copies, transposes)."""
    computations = dict(re.findall(r"\n(%?[\w.-]+) [^\n]*\{\n(.*?)\n\}", compiled_text, re.S))
    entry = compiled_text[compiled_text.index("ENTRY") :]
    moves = []
    for name, called in re.findall(r"%([\w.-]+) = [^\n]* fusion\([^\n]*calls=(%[\w.-]+)", entry):
        ops = set(re.findall(r"= \S+ ([\w-]+)\(", computations.get(called, computations.get(called[1:], ""))))
        if ops and ops <= {"parameter", "bitcast", "copy", "transpose"}:
            moves.append(name)
    return moves


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's buffer handling")
def test_plain_bfloat16_operands_are_not_copied():
    """A barrier on a plain bfloat16 operand made XLA:CPU copy it before the dot (the training recipes'
    quantized operands: 16 copies per step of bench/transformer_block.py under NVFP4)."""
    a = jnp.ones((64, 32), jnp.bfloat16)
    b = jnp.ones((32, 16), jnp.bfloat16)
    compiled = jax.jit(lambda a, b: fpemu.dot_general(a * 2, b, (((1,), (0,)), ((), ())))).lower(a, b).compile()
    assert _pure_moves(compiled.as_text()) == []


# -- special values ---------------------------------------------------------------------------------


def test_special_values_propagate():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    a = np.array([[inf, 1.0], [nan, 1.0], [1.0, 2.0], [-1.0, 0.0]], np.float32)
    b = np.array([[0.0, 1.0, 2.0], [1.0, -inf, 3.0]], np.float32)
    for options in (dict(), dict(lhs="bf16", rhs="bf16"), dict(accumulate="fp16", accumulate_every=1),
                    dict(lhs="e5m2", rhs="e5m2", accumulate="bf16", accumulate_every=2, out="e4m3fn")):  # fmt: skip
        assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))
    y = np.asarray(fpemu.matmul(a, b))
    assert np.isnan(y[0, :2]).all() and y[0, 2] == inf and np.isnan(y[1]).all() and y[2, 1] == -inf  # inf - inf


def test_accumulator_overflow_and_saturation():
    a = np.full((1, 4), 40000.0, np.float32)
    b = np.ones((4, 1), np.float32)
    assert fpemu.matmul(a, b, accumulate="fp16").item() == np.inf
    assert fpemu.matmul(a, b, accumulate="fp16", saturate=True).item() == 65504.0
    assert math.isnan(fpemu.matmul(a / 100, b, accumulate="e4m3fn").item())
    assert fpemu.matmul(a / 100, b, accumulate="e4m3fn", saturate=True).item() == 448.0
    huge = np.full((1, 4), 3e38, np.float32)
    assert fpemu.matmul(huge, b, accumulate_every=1).item() == np.inf
    assert fpemu.matmul(huge, b, saturate=True, accumulate_every=1).item() == np.finfo(np.float32).max


@pytest.mark.parametrize("options", [dict(), dict(lhs="e4m3fn", rhs="e4m3fn"), dict(accumulate="bf16")])
def test_zero_sum_is_positive_zero(options):
    a = np.array([[-1.0], [-2.0]], np.float32)
    b = np.array([[0.0, -0.0]], np.float32)
    y = np.asarray(fpemu.matmul(a, b, **options))
    assert_same_bits(y, np.zeros((2, 2), np.float32))
    y = np.asarray(fpemu.matmul(np.array([[1.0, -1.0]], np.float32), np.array([[3.0], [3.0]], np.float32), **options))
    assert_same_bits(y, np.zeros((1, 1), np.float32))


def test_stagnation_of_narrow_accumulators():
    x = jnp.full((1, 4096), 0.01, jnp.float32)
    y = jnp.ones((4096, 1), jnp.float32)
    assert fpemu.matmul(x, y, accumulate="bf16").item() == 4.0  # 4 + 0.01 rounds back to 4
    assert fpemu.matmul(jnp.ones((1, 4096)), jnp.ones((4096, 1)), accumulate="bf16").item() == 256.0
    assert fpemu.matmul(jnp.ones((1, 4096)), jnp.ones((4096, 1)), accumulate="fp16").item() == 2048.0
    stochastic = jax.jit(lambda k: fpemu.matmul(x, y, accumulate="bf16", accumulate_rounding="stochastic", key=k))
    runs = np.array([stochastic(jax.random.key(i)).item() for i in range(64)])
    assert abs(runs.mean() - 40.96) < 1.5  # unbiased: the mean stays near the exact sum (sd ~2.3 per run)


# -- float64 and host float64 --------------------------------------------------------------------------


@pytest.mark.long
def test_float64_inputs_compute_in_float64(x64, rng):
    a = rng.standard_normal((3, 20))
    b = rng.standard_normal((20, 4))
    plain = fpemu.matmul(jnp.asarray(a), jnp.asarray(b), accumulate="fp64")
    assert plain.dtype == jnp.float64
    assert_same_bits(plain, lax.dot_general(jnp.asarray(a), jnp.asarray(b), MM, precision=lax.Precision.HIGHEST))
    for options in (dict(lhs="fp32", rhs="fp32"), dict(lhs="fp16", rhs="bf16", accumulate="fp32", out="fp32"),
                    dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="fp16", accumulate_every=3)):  # fmt: skip
        actual = fpemu.matmul(jnp.asarray(a), jnp.asarray(b), **options)
        assert actual.dtype == jnp.float64
        assert_same_bits(actual, dot_general_reference(jnp.asarray(a), jnp.asarray(b), MM, **options))


@pytest.mark.long
def test_host_float64_operand_is_rounded_once():
    a = np.array([[-431.99999999999994]])  # float64; JAX would make it float32 -432 first (x64 off)
    y = fpemu.matmul(a, np.ones((1, 1)), lhs="e4m3fn")
    assert y.dtype == jnp.float32 and y.item() == -416.0
    assert dot_general_reference(a, np.ones((1, 1)), MM, lhs="e4m3fn").item() == -416.0


# -- shapes and dtypes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((5,), (5,)),
        ((5,), (5, 3)),
        ((4, 5), (5,)),
        ((2, 4, 5), (5, 3)),
        ((4, 5), (2, 5, 3)),
        ((2, 1, 4, 5), (3, 5, 2)),
        ((3, 5), (2, 3, 5, 4)),
        ((1, 0), (0, 2)),
    ],  # fmt: skip
)
def test_matmul_shapes_follow_jnp_matmul(rng, a_shape, b_shape):
    a = rng.integers(-3, 4, a_shape).astype(np.float32)
    b = rng.integers(-3, 4, b_shape).astype(np.float32)
    expected = np.matmul(a, b)
    actual = fpemu.matmul(a, b, lhs="e4m3fn", accumulate="bf16", accumulate_every=2)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(actual), expected)


@pytest.mark.long
def test_matmul_rounds_operands_before_broadcasting(rng):
    """Stochastic operand rounding indexes each operand's own elements: a broadcast b is rounded once."""
    a = rng.standard_normal((3, 2, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    key = jax.random.key(11)
    actual = fpemu.matmul(a, b, lhs="e4m3fn", rhs="e2m1fn", out="bf16", rounding="stochastic", key=key)
    k_lhs, k_rhs, _, k_out = jax.random.split(key, 4)
    qa = fpemu.quantize(jnp.asarray(a), "e4m3fn", rounding="stochastic", key=k_lhs)
    qb = fpemu.quantize(jnp.asarray(b), "e2m1fn", rounding="stochastic", key=k_rhs)
    product = jnp.matmul(qa, qb, precision=lax.Precision.HIGHEST)
    expected = fpemu.quantize(product, "bf16", rounding="stochastic", key=k_out)
    assert_same_bits(actual, expected)


def _ops(a, b, **options):
    return {
        "matmul": fpemu.matmul(a, b, **options),
        "dot_general": fpemu.dot_general(a, b, MM, **options),
        "conv": fpemu.conv_general_dilated(a.T[None], b.T[:, :, None], (1,), "VALID", **options)[0],  # (N, M)
    }


@pytest.mark.long
@pytest.mark.parametrize(
    ("dtype", "preferred"),
    [
        (jnp.float16, None),
        (jnp.bfloat16, None),
        (jnp.float32, jnp.bfloat16),
        (jnp.bfloat16, jnp.float16),
        (jnp.float16, jnp.float32),
    ],  # fmt: skip
    ids=str,
)
def test_every_public_op_dtype_and_shape(dtype, preferred):
    a = jnp.arange(12, dtype=dtype).reshape(3, 4) / 4
    b = jnp.ones((3, 2), dtype)
    results = _ops(a.T, b, lhs="e4m3fn", preferred_element_type=preferred)
    expected_dtype = jnp.dtype(preferred) if preferred is not None else jnp.dtype(jnp.float32)
    shapes = {"matmul": (4, 2), "dot_general": (4, 2), "conv": (2, 4)}
    for name, result in results.items():
        assert result.dtype == expected_dtype and result.shape == shapes[name], (name, result.dtype, result.shape)


def test_narrow_result_dtype_is_the_output_rounding():
    a = jnp.array([[1.0, 2.0**-9]], jnp.float32)
    b = jnp.ones((2, 1), jnp.float32)
    y = fpemu.matmul(a, b, preferred_element_type=jnp.bfloat16, rounding="toward_positive")
    assert y.dtype == jnp.bfloat16 and y.item() == 1.0078125  # 1 + 2**-9 rounded up in bf16
    y = fpemu.matmul(a, b, out="e4m3fn", preferred_element_type=jnp.float16)
    assert y.dtype == jnp.float16 and y.item() == 1.0


# -- convolution ----------------------------------------------------------------------------------------

CONVS = [
    # lhs shape, rhs shape, strides, padding, lhs_dilation, rhs_dilation, dimension_numbers, feature/batch groups
    ((2, 4, 7, 6), (6, 2, 3, 2), (1, 2), "SAME", None, (2, 1), None, 2, 1),
    ((2, 7, 6, 4), (3, 2, 4, 6), (2, 1), [(1, 0), (2, -1)], (1, 2), None, ("NHWC", "HWIO", "NHWC"), 1, 1),
    ((4, 3, 9), (4, 3, 2), (1,), "VALID", None, None, None, 1, 2),
    ((2, 9, 3), (3, 3, 4), (2,), "SAME", None, (2,), ("NWC", "WIO", "NCW"), 1, 1),
    ((1, 2, 4, 4, 3), (2, 2, 2, 1, 2), (1, 1, 2), "VALID", None, None, None, 1, 1),
    ((2, 3, 3), (2, 3, 5), (1,), "VALID", None, None, None, 1, 1),  # window larger than the input: empty
]


@pytest.mark.long
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}x{c[1]}")
def test_conv_matches_lax_on_exact_inputs(rng, case):
    lhs_shape, rhs_shape, strides, padding, lhs_dil, rhs_dil, dn, fg, bg = case
    x = rng.integers(-4, 5, lhs_shape).astype(np.float32)
    w = rng.integers(-4, 5, rhs_shape).astype(np.float32)
    geometry = dict(lhs_dilation=lhs_dil, rhs_dilation=rhs_dil, dimension_numbers=dn, feature_group_count=fg,
                    batch_group_count=bg)  # fmt: skip
    expected = lax.conv_general_dilated(x, w, strides, padding, precision=lax.Precision.HIGHEST, **geometry)
    for options in (dict(lhs="e4m3fn", rhs="e4m3fn"), dict(accumulate="fp16", accumulate_every=3)):
        actual = fpemu.conv_general_dilated(x, w, strides, padding, **geometry, **options)
        assert_same_bits(actual, expected)


def _im2col_nchw(x: np.ndarray, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    patches = np.empty((n, oh, ow, c * kh * kw), x.dtype)
    for i in range(oh):
        for j in range(ow):
            window = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]  # (n, c, kh, kw)
            patches[:, i, j] = window.reshape(n, -1)  # (input feature, window row-major)
    return patches


@pytest.mark.parametrize("options", [dict(lhs="e4m3fn", rhs="e5m2", accumulate="bf16", accumulate_every=1),
                                     dict(lhs="bf16", rhs="bf16", accumulate="fp16", accumulate_every=4, out="e4m3fn",
                                          saturate=True)])  # fmt: skip
def test_conv_accumulator_matches_im2col_reference(rng, options):
    x = (rng.standard_normal((2, 3, 5, 5)) * 4).astype(np.float32)
    w = (rng.standard_normal((4, 3, 3, 3)) * 4).astype(np.float32)
    actual = fpemu.conv_general_dilated(x, w, (2, 2), [(1, 1), (1, 1)], **options)
    patches = _im2col_nchw(x, 3, 3, 2, 1)
    expected = dot_general_reference(patches, w.reshape(4, -1), (((3,), (1,)), ((), ())), **options)
    assert_same_bits(actual, expected.transpose(0, 3, 1, 2))


# -- jit, vmap, grad ------------------------------------------------------------------------------------


@pytest.mark.long
def test_jit_equals_eager(rng):
    a, b = rng.standard_normal((5, 9)).astype(np.float32), rng.standard_normal((9, 4)).astype(np.float32)
    key = jax.random.key(0)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", accumulate_every=2, out="e5m2",
                   rounding="stochastic", accumulate_rounding="stochastic", lhs_scale=0.5)  # fmt: skip
    eager = _ops(jnp.asarray(a), jnp.asarray(b), key=key, **options)
    jitted = jax.jit(lambda a, b, key: _ops(a, b, key=key, **options))(a, b, key)
    for name in eager:
        assert_same_bits(jitted[name], eager[name])


@pytest.mark.long
def test_vmap_equals_a_loop(rng):
    a = rng.standard_normal((3, 5, 9)).astype(np.float32)
    b = rng.standard_normal((9, 4)).astype(np.float32)
    options = dict(lhs="e5m2", rhs="e4m3fn", accumulate="fp16", accumulate_every=3, out="bf16")
    mapped = jax.vmap(lambda x: fpemu.matmul(x, b, **options))(a)
    assert_same_bits(mapped, np.stack([np.asarray(fpemu.matmul(x, b, **options)) for x in a]))
    mapped = jax.vmap(lambda x: fpemu.conv_general_dilated(x.T[None], b.T[:, :, None], (1,), "VALID", **options)[0])(a)
    assert_same_bits(mapped, np.swapaxes(np.stack([np.asarray(fpemu.matmul(x, b, **options)) for x in a]), 1, 2))


@pytest.mark.long
@pytest.mark.parametrize(
    "options", [dict(), dict(accumulate="bf16"), dict(accumulate="fp32", accumulate_every=4, out="e4m3fn")]
)
def test_grad_is_straight_through(rng, options):
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((8, 3)).astype(np.float32)
    g = rng.standard_normal((4, 3)).astype(np.float32)

    def loss(a, b):
        return jnp.sum(fpemu.matmul(a, b, lhs="e4m3fn", rhs="e2m1fn", **options) * g)

    da, db = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    qa, qb = np.asarray(fpemu.quantize(a, "e4m3fn")), np.asarray(fpemu.quantize(b, "e2m1fn"))
    np.testing.assert_allclose(np.asarray(da), g @ qb.T, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(db), qa.T @ g, rtol=1e-6, atol=1e-6)
    forward = lambda a: fpemu.matmul(a, b, lhs="e4m3fn", rhs="e2m1fn", **options)
    jvp = jax.jvp(forward, (jnp.asarray(a),), (jnp.ones((4, 8), jnp.float32),))[1]
    np.testing.assert_allclose(np.asarray(jvp), np.ones((4, 8)) @ qb, rtol=1e-6)


@pytest.mark.long
def test_grad_with_scales_follows_the_chain_rule(rng):
    a = rng.standard_normal((2, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    sa, sb = np.float32(0.3), np.float32(2.0)

    def loss(a, sa):
        return jnp.sum(fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn", lhs_scale=sa, rhs_scale=sb))

    da, dsa = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(sa))
    qa = np.asarray(fpemu.quantize(jnp.asarray(a) / sa, "e4m3fn"), np.float64)
    qb = np.asarray(fpemu.quantize(jnp.asarray(b) / sb, "e4m3fn"), np.float64)
    ones = np.ones((2, 3))
    np.testing.assert_allclose(np.asarray(da), sb * ones @ qb.T, rtol=1e-5)
    expected_dsa = sb * np.sum((qa - a / np.float64(sa)) @ qb)  # from the rounding error only
    np.testing.assert_allclose(float(dsa), expected_dsa, rtol=1e-4, atol=1e-5)


@pytest.mark.long
def test_conv_grad_is_the_lax_conv_grad_of_the_rounded_operands(rng):
    x = rng.integers(-4, 5, (2, 3, 6)).astype(np.float32)
    w = rng.integers(-4, 5, (4, 3, 3)).astype(np.float32) / 3
    qw = fpemu.quantize(jnp.asarray(w), "e4m3fn")

    def ours(v):
        return jnp.sum(fpemu.conv_general_dilated(v, w, (1,), "SAME", lhs="e4m3fn", rhs="e4m3fn") ** 2)

    def theirs(v):
        y = lax.conv_general_dilated(fpemu.quantize(v, "e4m3fn"), qw, (1,), "SAME", precision=lax.Precision.HIGHEST)
        return jnp.sum(y**2)

    ours, theirs = jax.grad(ours)(jnp.asarray(x)), jax.grad(theirs)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)


# -- stochastic rounding --------------------------------------------------------------------------------


@pytest.mark.long
def test_stochastic_results_depend_on_the_key_only(rng):
    a, b = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    options = dict(lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16", out="e4m3fn", rounding="stochastic",
                   accumulate_rounding="stochastic")  # fmt: skip
    first = fpemu.matmul(a, b, key=jax.random.key(5), **options)
    assert_same_bits(fpemu.matmul(a, b, key=jax.random.key(5), **options), first)
    assert not np.array_equal(np.asarray(fpemu.matmul(a, b, key=jax.random.key(6), **options)), np.asarray(first))
    legacy = fpemu.matmul(a, b, key=jax.random.PRNGKey(5), **options)  # the same key words
    assert_same_bits(legacy, first)


def test_stochastic_accumulator_of_an_empty_contraction():
    """K = 0: no chunk, no random bits; the sum is +0."""
    a, b = np.ones((2, 0), np.float32), np.ones((0, 3), np.float32)
    options = dict(accumulate="bf16", accumulate_rounding="stochastic", key=jax.random.key(0))
    assert_same_bits(fpemu.matmul(a, b, **options), dot_general_reference(a, b, MM, **options))
    assert_same_bits(fpemu.matmul(a, b, **options), np.zeros((2, 3), np.float32))


# -- errors ----------------------------------------------------------------------------------------------

A = np.ones((2, 3), np.float32)
B = np.ones((3, 4), np.float32)
KEY = jax.random.key(0)

ERRORS = [
    (dict(a=np.ones((2, 3), np.int32)), TypeError, "a must be a float16, bfloat16, float32 or float64 array"),
    (dict(b=np.ones((3, 4), bool)), TypeError, "b must be"),
    (dict(a=3), TypeError, "a must be a floating-point array"),
    (dict(lhs="e9m9"), ValueError, "lhs: unknown format 'e9m9'"),
    (dict(accumulate="bf17"), ValueError, "accumulate: unknown format"),
    (dict(out="fp64"), ValueError, "out='fp64' has values that the working dtype fp32 cannot hold"),
    (dict(rhs=3.5), TypeError, "rhs: fmt must be"),
    (dict(lhs=np.ones((2, 3), np.float32)), TypeError, "lhs must be a format (a name such as 'e4m3fn'"),
    (dict(accumulate_every=0), ValueError, "accumulate_every must be an int >= 1"),
    (dict(accumulate_every=2.0), TypeError, "accumulate_every must be an int"),
    (dict(accumulate_every=True), TypeError, "accumulate_every must be an int"),
    (dict(rounding="nearest"), ValueError, "rounding must be one of 'nearest_even'"),
    (dict(accumulate_rounding="up"), ValueError, "accumulate_rounding must be one of"),
    (dict(saturate=1), TypeError, "saturate must be a bool"),
    (dict(rounding="stochastic"), ValueError, "needs key="),
    (dict(accumulate="bf16", accumulate_rounding="stochastic"), ValueError, "needs key="),
    (dict(key=KEY), ValueError, "key is only used with stochastic rounding"),
    (dict(rounding="stochastic", key=42), TypeError, "key must be a single JAX PRNG key"),
    (dict(rounding="stochastic", key=jax.random.split(KEY, 2)), ValueError, "key must be a single PRNG key"),
    (dict(lhs_scale=np.ones(3, np.float32)), ValueError, "lhs_scale must be a scalar"),
    (dict(rhs_scale=np.int32(2)), TypeError, "rhs_scale must be a float scalar"),
    (dict(rhs_scale="2"), TypeError, "rhs_scale must be a float scalar"),
    (dict(preferred_element_type=np.int32), TypeError, "preferred_element_type must be one of"),
    (dict(preferred_element_type="no such dtype"), TypeError, "preferred_element_type must be a float dtype"),
    (dict(preferred_element_type=np.float64), ValueError, "jax_enable_x64"),
    (dict(out="fp32", preferred_element_type=jnp.bfloat16), ValueError, "preferred_element_type=bfloat16 cannot hold"),
    (dict(accumulate_rounding="toward_zero"), ValueError, "accumulate_rounding='toward_zero' with accumulate='fp32'"),
    (dict(accumulate=fpemu.Format(name="e8m22", exponent_bits=8, mantissa_bits=22)), ValueError, "at most 21"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), ERRORS, ids=[str(i) for i in range(len(ERRORS))])
@pytest.mark.parametrize("op", ["matmul", "dot_general", "conv", "reference"])
def test_option_errors(op, kwargs, error, match):
    kwargs = dict(kwargs)
    a, b = kwargs.pop("a", A), kwargs.pop("b", B)
    with pytest.raises(error, match=match.replace("(", r"\(").replace("[", r"\[")):
        if op == "matmul":
            fpemu.matmul(a, b, **kwargs)
        elif op == "dot_general":
            fpemu.dot_general(a, b, MM, **kwargs)
        elif op == "reference":
            dot_general_reference(a, b, MM, **kwargs)
        else:
            a = a if np.ndim(a) == 0 else np.swapaxes(a, 0, 1)[None]
            b = b if np.ndim(b) == 0 else np.reshape(np.swapaxes(b, 0, 1), np.shape(b)[::-1] + (1,))
            fpemu.conv_general_dilated(a, b, (1,), "VALID", **kwargs)


SHAPE_ERRORS = [
    ("matmul", (np.ones(()), B), ValueError, "at least 1 dimension"),
    ("matmul", (A, np.ones((4, 4))), ValueError, "the last dimension of a \\(3\\) must equal the second-to-last"),
    ("matmul", (np.ones((2, 2, 3)), np.ones((3, 3, 4))), ValueError, "do not broadcast"),
    ("dot_general", (A, np.ones((4, 4)), MM), ValueError, "contracting dimensions do not match"),
    ("dot_general", (A, B, (((2,), (0,)), ((), ()))), ValueError, "out of range"),
    ("dot_general", (A, B, (((1, 1), (0, 0)), ((), ()))), ValueError, "repeat"),
    ("dot_general", (A, B, (((1,), ()), ((), ()))), ValueError, "1 lhs but 0 rhs contracting"),
    ("dot_general", (np.ones((2, 3)), np.ones((2, 3, 4)), (((1,), (1,)), ((0,), ()))), ValueError, "rhs batch"),
    ("dot_general", (A, B, "ij,jk"), TypeError, "dimension_numbers must be"),
    ("conv", (np.ones((1, 3, 5)), np.ones((2, 2, 3)), (1,), "VALID"), ValueError, "conv_general_dilated:"),
    ("conv", (np.ones((1, 3, 5)), np.ones((2, 3, 3)), (1,), "FOO"), ValueError, "conv_general_dilated:"),
    (
        "conv",
        (np.ones((1, 4, 5)), np.ones((2, 2, 3)), (1,), "VALID", dict(feature_group_count=3)),
        ValueError,
        "conv_general_dilated:",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("op", "args", "error", "match"), SHAPE_ERRORS, ids=[str(i) for i in range(len(SHAPE_ERRORS))])
def test_shape_errors(op, args, error, match):
    kwargs = args[-1] if isinstance(args[-1], dict) else {}
    args = args[:-1] if kwargs else args
    fn = {"matmul": fpemu.matmul, "dot_general": fpemu.dot_general, "conv": fpemu.conv_general_dilated}[op]
    with pytest.raises(error, match=match):
        fn(*(np.asarray(x, np.float32) if isinstance(x, np.ndarray) else x for x in args), **kwargs)


def test_every_signature_takes_the_same_options():
    """The options are written once (`MatmulOptions`) and repeated in each public signature, for its
    users: every signature has them all, in the same order, with the same types and defaults."""
    import dataclasses
    import inspect

    from fpemu._ops.matmul_config import MatmulOptions
    from fpemu.kernels import matmul_kernel

    fields = [(f.name, f.type, f.default) for f in dataclasses.fields(MatmulOptions)]
    names = {name for name, _, _ in fields}
    for fn in (fpemu.matmul, fpemu.dot_general, fpemu.conv_general_dilated, dot_general_reference, matmul_kernel):
        parameters = inspect.signature(fn).parameters.values()
        assert [(p.name, p.annotation, p.default) for p in parameters if p.name in names] == fields, fn.__name__
        assert {p.kind for p in parameters if p.name in names} == {inspect.Parameter.KEYWORD_ONLY}, fn.__name__


def test_conv_operands_are_positional():
    with pytest.raises(TypeError):
        fpemu.conv_general_dilated(lhs=np.ones((1, 1, 3), np.float32), rhs=np.ones((1, 1, 2), np.float32),
                                   window_strides=(1,), padding="VALID")  # fmt: skip


# -- DotPolicy: the dot's numerics as one record (policy=) ------------------------------------------------

POLICY = fpemu.DotPolicy(lhs="e4m3fn", rhs="e5m2", accumulate="bf16", out="bf16", accumulate_every=4)
POLICY_KEYWORDS = dict(lhs="e4m3fn", rhs="e5m2", accumulate="bf16", out="bf16", accumulate_every=4)


def _policy_operands():
    rng = np.random.default_rng(21)
    return rng.normal(size=(3, 16)).astype(np.float32), rng.normal(size=(16, 5)).astype(np.float32)


@pytest.mark.long
def test_policy_is_the_keyword_options_as_one_record():
    """Every entry point computes the same bits from ``policy=DotPolicy(...)`` as from the keywords it holds."""
    from fpemu.kernels import matmul_kernel

    a, b = _policy_operands()
    dn = (((1,), (0,)), ((), ()))
    conv_a, conv_b = a.reshape(3, 16, 1), b.T.reshape(5, 16, 1)  # NCW, OIW: a 1-wide convolution is the dot
    calls = {
        "matmul": lambda **kw: fpemu.matmul(a, b, **kw),
        "dot_general": lambda **kw: fpemu.dot_general(a, b, dn, **kw),
        "conv": lambda **kw: fpemu.conv_general_dilated(conv_a, conv_b, (1,), "VALID", **kw),
        "matmul_kernel": lambda **kw: matmul_kernel(a, b, interpret=True, **kw),
        "dot_general_reference": lambda **kw: dot_general_reference(a, b, dn, **kw),
    }
    for name, call in calls.items():
        assert_bit_exact(call(policy=POLICY), call(**POLICY_KEYWORDS), err_msg=name)
    assert not np.array_equal(np.asarray(calls["matmul"](policy=POLICY)), a @ b)  # the policy did round
    # the options a policy does not hold still come from the keywords
    keyed = fpemu.matmul(a, b, policy=POLICY, rounding="toward_zero", saturate=True)
    assert_bit_exact(keyed, fpemu.matmul(a, b, rounding="toward_zero", saturate=True, **POLICY_KEYWORDS))


def test_policy_and_a_keyword_it_holds_are_refused_together():
    a, b = _policy_operands()
    with pytest.raises(ValueError, match=r"either as policy= or as keywords, not both: .* lhs='e5m2'"):
        fpemu.matmul(a, b, policy=POLICY, lhs="e5m2")
    with pytest.raises(ValueError, match=r"not both: .* accumulate_every=8"):
        fpemu.dot_general(a, b, (((1,), (0,)), ((), ())), policy=POLICY, accumulate_every=8)
    with pytest.raises(TypeError, match="policy must be a fpemu.DotPolicy or None, got str"):
        fpemu.matmul(a, b, policy="bf16")
    with pytest.raises(TypeError, match="got Policy"):
        fpemu.matmul(a, b, policy=fpemu.Policy(default="bf16"))
