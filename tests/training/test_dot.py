"""`quantized_dot_general` and `hadamard` against the NumPy oracle, bit for bit where the answer is exact.

The recipes' products are compared bit for bit on data whose float32 sums are exact (so that the
backend's summation order cannot matter): magnitudes in [1, 2] on a 1/64 grid, with the tensor's
largest magnitude planted where a per-tensor float scale must be a power of two (3.5 = 448 / 2**7 =
57344 / 2**14 for FP8; 2.625 = 448 * 6 / 2**10 for NVFP4's tensor scale; after NVFP4's Hadamard
transform, a block of 2.625 * signs becomes 10.5 = 448 * 6 / 2**8).
"""

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import fpemu
import fpemu._ops.fusion as fusion
from fpemu._training import GemmRecipe, Quantizer, hadamard, quantized_dot_general, training_recipe
from fpemu._training.hadamard import hadamard_signs
from fpemu.testing import assert_bit_exact
from fpemu.testing.recipe_reference import (
    hadamard_reference,
    quantize_operand_reference,
    quantized_dot_general_reference,
)
from tests.training.test_emulate_training import assert_tree_bits

KEY = jax.random.key(5)
SLOW = pytest.mark.slow
TOKENS, IN, OUT = 32, 40, 24  # full and partial blocks of 16 and 32
# (lhs shape, rhs shape, dimension numbers) of a linear layer's three GEMMs
GEMM_SHAPES = {
    "forward": ((TOKENS, IN), (IN, OUT), (((1,), (0,)), ((), ()))),  # y = x . W
    "dgrad": ((TOKENS, OUT), (IN, OUT), (((1,), (1,)), ((), ()))),  # dx = g . W^T
    "wgrad": ((TOKENS, IN), (TOKENS, OUT), (((0,), (0,)), ((), ()))),  # dW = x^T . g
}


def grid(shape, seed):
    rng = np.random.default_rng(seed)
    return ((1 + rng.integers(0, 65, size=shape) / 64) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def operand(shape, dims, q, seed, hadamard_key=None, top=None):
    """Grid data with its largest magnitude planted (see the module docstring), or ``top``."""
    x = grid(shape, seed)
    nvfp4 = q is not None and q.tensor_scale
    top = top or (2.625 if nvfp4 else 3.5)
    x.flat[0] = top
    if hadamard_key is not None:  # 16 elements along the contraction, from the first, as top * signs
        index = [0] * x.ndim
        index[dims[0]] = slice(0, 16)
        x[tuple(index)] = top * np.asarray(hadamard_signs(hadamard_key, 16))
    return x


def _case(name, gemm_name, seed=0, top=None):
    gemm = training_recipe(name).gemm(gemm_name)
    lhs_shape, rhs_shape, dn = GEMM_SHAPES[gemm_name]
    h_key = jax.random.split(KEY, 3)[2] if gemm.hadamard else None
    lhs = operand(lhs_shape, dn[0][0], gemm.lhs, seed, h_key, top)
    rhs = operand(rhs_shape, dn[0][1], gemm.rhs, seed + 1, h_key, top)
    kw = {"key": KEY}
    if gemm.lhs.scaling == "delayed":
        kw.update(lhs_amax=np.float32(top or 3.5), rhs_amax=np.float32(top or 3.5))
    return gemm, lhs, rhs, dn, kw


FAST = {("nvfp4", "forward"), ("nvfp4", "wgrad"), ("mxfp8", "dgrad"), ("fp8_delayed", "wgrad")}
CASES = [
    pytest.param(name, g, marks=() if (name, g) in FAST else SLOW)
    for name in ("fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8", "mxfp6", "mxfp4", "nvfp4")
    for g in GEMM_SHAPES
]


@pytest.mark.long
@pytest.mark.parametrize(("name", "gemm_name"), CASES)
def test_each_recipes_gemms_match_the_reference(name, gemm_name):
    gemm, lhs, rhs, dn, kw = _case(name, gemm_name)
    got = quantized_dot_general(jnp.asarray(lhs), jnp.asarray(rhs), dn, gemm, **kw)
    expected = quantized_dot_general_reference(lhs, rhs, dn, gemm, **kw)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert_bit_exact(got, expected)


@pytest.mark.long
@pytest.mark.parametrize(
    ("name", "gemm_name"),
    [("nvfp4", "forward"), ("fp8_current", "forward"), ("nvfp4", "wgrad"), ("fp8_delayed", "dgrad")],
)
def test_per_tensor_scales_multiply_the_float32_result(name, gemm_name):
    """Per-tensor scales that are not powers of two (the amax planted at 3) are applied to the product,
    ``fl(sum(blocks_a * blocks_b) * fl(t_a * t_b))``, as cuBLAS applies them: not to each element."""
    gemm, lhs, rhs, dn, kw = _case(name, gemm_name, top=3.0)
    got = quantized_dot_general(jnp.asarray(lhs), jnp.asarray(rhs), dn, gemm, **kw)
    assert_bit_exact(got, quantized_dot_general_reference(lhs, rhs, dn, gemm, **kw))
    if gemm.hadamard is None:  # the product of the dequantized operands rounds differently
        lhs_q = quantize_operand_reference(lhs, dn[0][0], gemm.lhs, key=jax.random.split(KEY, 3)[0])
        rhs_q = quantize_operand_reference(rhs, dn[0][1], gemm.rhs, key=jax.random.split(KEY, 3)[1])
        other = fpemu.testing.dot_general_reference(lhs_q, rhs_q, dn)
        assert not np.array_equal(np.asarray(got), other)


def test_an_overflowing_scale_product_keeps_an_exact_zero():
    """Amaxes of 2**80: fl(t_lhs * t_rhs) overflows. A sum that is exactly zero stays 0 (its true product
    is), not 0 * inf = NaN; a nonzero one overflows to inf, as its true product does."""
    gemm = training_recipe("fp8_current").forward
    big = np.float32(2.0**80)
    x = np.array([[big, 0.0]], np.float32)
    w = np.array([[0.0, big], [big, 0.0]], np.float32)  # column 0 meets x's zero, column 1 its 2**80
    dn = (((1,), (0,)), ((), ()))
    got = quantized_dot_general(jnp.asarray(x), jnp.asarray(w), dn, gemm)
    assert np.asarray(got).tolist() == [[0.0, np.inf]]
    assert_bit_exact(got, quantized_dot_general_reference(x, w, dn, gemm))


@pytest.mark.long
def test_fp8_blockwise_tiles_and_promotes_every_128_products():
    """DeepSeek-V3: 1 x 128 activation tiles, 128 x 128 weight blocks, float32 promotion every 128 products."""
    gemm = training_recipe("fp8_blockwise").forward
    x, w = operand((4, 272), (1,), gemm.lhs, 7), operand((272, 136), (0,), gemm.rhs, 8)  # 3 chunks, 6 tiles
    dn = (((1,), (0,)), ((), ()))
    got = quantized_dot_general(jnp.asarray(x), jnp.asarray(w), dn, gemm)
    assert_bit_exact(got, quantized_dot_general_reference(x, w, dn, gemm))


def test_the_reference_product_is_the_public_dot_oracle():
    """recipe_reference's exact product agrees with fpemu.testing.dot_general_reference (chunks included)."""
    gemm = GemmRecipe(lhs=None, rhs=None, accumulate_every=5)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(3, 12)).astype(np.float32), rng.normal(size=(12, 2)).astype(np.float32)
    dn = (((1,), (0,)), ((), ()))
    expected = fpemu.testing.dot_general_reference(a, b, dn, accumulate_every=5)
    assert_bit_exact(quantized_dot_general_reference(a, b, dn, gemm), expected)


# -- each operand along its own contraction ----------------------------------------------------------------


@pytest.mark.long
def test_a_batched_dot_blocks_each_batch_along_its_contraction():
    gemm = training_recipe("mxfp8").forward
    x = np.stack([grid((6, 40), 10), grid((6, 40), 11) * 2])
    w = np.stack([grid((40, 5), 12), grid((40, 5), 13) / 4])
    dn = (((2,), (1,)), ((0,), (0,)))
    got = quantized_dot_general(jnp.asarray(x), jnp.asarray(w), dn, gemm)
    assert_bit_exact(got, quantized_dot_general_reference(x, w, dn, gemm))
    plain = (((1,), (0,)), ((), ()))
    for b in range(2):  # blocks never cross a batch element
        assert_bit_exact(got[b], quantized_dot_general(jnp.asarray(x[b]), jnp.asarray(w[b]), plain, gemm))


@pytest.mark.long
def test_several_contracting_dims_merge_in_the_order_listed():
    sr = Quantizer(format="e4m3fn", scaling="block", block_size=16, scale_format="e8m0fnu", rounding="stochastic")
    tile = Quantizer(format="e2m1fn", scaling="block_2d", block_size=8, scale_format="e8m0fnu")
    gemm = GemmRecipe(lhs=sr, rhs=tile)
    g = grid((3, 4, 8), 20)  # contracts (4, 8): 32, in place
    w = grid((8, 5, 4), 21)  # contracts (4, 8) listed as (2, 0): moved
    dn = (((1, 2), (2, 0)), ((), ()))
    got = quantized_dot_general(jnp.asarray(g), jnp.asarray(w), dn, gemm, key=KEY)
    assert_bit_exact(got, quantized_dot_general_reference(g, w, dn, gemm, key=KEY))
    flat = quantized_dot_general(
        jnp.asarray(g.reshape(3, 32)), jnp.asarray(w.transpose(2, 0, 1).reshape(32, 5)), (((1,), (0,)), ((), ())), gemm,
        key=KEY,
    )  # fmt: skip
    assert_bit_exact(got, flat)


def test_half_precision_operands_are_quantized_from_float32_and_the_result_type_is_kept():
    gemm = training_recipe("fp8_current").forward  # float scales: no rounding back to bfloat16 in between
    x, w = grid((4, 32), 30), grid((32, 3), 31)
    xb = x.astype(ml_dtypes.bfloat16)
    dn = (((1,), (0,)), ((), ()))
    got = quantized_dot_general(jnp.asarray(xb), jnp.asarray(w), dn, gemm, preferred_element_type=jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    assert_bit_exact(got, quantized_dot_general_reference(xb, w, dn, gemm, preferred_element_type=ml_dtypes.bfloat16))


def test_an_operand_without_a_quantizer_is_used_as_it_is():
    q = Quantizer(format="e4m3fn", scaling="row", scale_rule="ceil")
    x, w = grid((4, 8), 40), grid((8, 3), 41) / 3  # w: not on any FP8 grid
    dn = (((1,), (0,)), ((), ()))
    got = quantized_dot_general(jnp.asarray(x), jnp.asarray(w), dn, GemmRecipe(lhs=q, rhs=None))
    expected = fpemu.dot_general(quantize_operand_reference(x, [1], q), jnp.asarray(w), dn)
    assert_bit_exact(got, expected)


# -- the Hadamard transform --------------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("size", [16, 4])
def test_hadamard_is_orthogonal(size):
    q = hadamard(jnp.eye(size), 1, size, KEY)  # row i: Q e_i, so q = Q^T
    assert_bit_exact(q @ q.T, jnp.eye(size))  # entries +-1/sqrt(size) = +-1/4 or +-1/2: exact
    assert_bit_exact(q, hadamard_reference(np.eye(size, dtype=np.float32), 1, size, KEY))


def test_hadamard_of_size_8_is_orthogonal_to_float32_rounding():
    q = np.asarray(hadamard(jnp.eye(8), 0, 8, KEY), np.float64)
    np.testing.assert_allclose(q @ q.T, np.eye(8), atol=2e-7)


def test_hadamard_is_deterministic_per_key():
    x = jnp.asarray(grid((3, 32), 50))
    a = hadamard(x, 1, 16, KEY)
    assert_bit_exact(a, hadamard(x, 1, 16, KEY))
    assert not np.array_equal(a, hadamard(x, 1, 16, jax.random.key(6)))
    assert hadamard_signs(None, 16).tolist() == [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]  # TE's


def test_hadamard_matches_the_reference_and_leaves_a_short_last_block():
    x = grid((40, 3, 2), 51)  # along axis 0: two blocks of 16 and a last block of 8
    got = hadamard(jnp.asarray(x), 0, 16, KEY)
    assert_bit_exact(got, hadamard_reference(x, 0, 16, KEY))
    assert_bit_exact(got[32:], x[32:])
    assert not np.array_equal(got[:16], x[:16])


def test_a_nan_spreads_over_its_block_only():
    x = grid((2, 32), 52)
    x[0, 20] = np.nan
    got = np.asarray(hadamard(jnp.asarray(x), 1, 16, None))
    assert np.isnan(got[0, 16:]).all() and not np.isnan(got[0, :16]).any() and not np.isnan(got[1]).any()
    assert_bit_exact(got, hadamard_reference(x, 1, 16, None))


@pytest.mark.long
@pytest.mark.parametrize("axis", [0, 1])  # lanes after the axis, and the transposed copy
def test_hadamard_computes_its_input_once(monkeypatch, axis):
    """Each butterfly output reads several inputs, and XLA:CPU fused the input's producers into the
    butterfly loop, computing them again for each read: under `Policy(default="bf16", dot="nvfp4")`
    the transformer block's step took 5.5x emulated bf16 instead of 1.4-1.5x (a wgrad operand's chain
    of rounded GELU derivatives inside one transform: 87 of its 179 ms of op time). The input (of
    2**16 elements or more) is materialized: no fused computation both computes the producer and adds."""
    if jax.default_backend() != "cpu":
        pytest.skip("the materializing conditional is XLA:CPU's")
    x = jnp.asarray(np.square(grid((1024, 64), 56)))  # exact squares: sqrt(x) is grid data, exact sums

    def build():
        jax.clear_caches()  # the transform's trace is cached across builds
        compiled = jax.jit(lambda v: hadamard(jnp.sqrt(v), axis, 16, KEY)).lower(x).compile()
        computations = [c for c in compiled.as_text().split("\n\n") if " sqrt(" in c]
        return [" add(" in c or " subtract(" in c for c in computations], compiled(x)

    once, result = build()
    monkeypatch.setattr(fusion, "MATERIALIZE_MIN_SIZE", 1 << 40)  # no input materialized
    fused, fused_result = build()
    assert once == [False] and fused == [True], (once, fused)
    assert_bit_exact(result, fused_result)
    assert_bit_exact(result, hadamard_reference(np.sqrt(np.asarray(x)), axis, 16, KEY))


def test_a_hadamard_on_both_operands_leaves_the_product_unchanged():
    gemm = GemmRecipe(lhs=None, rhs=None, hadamard=16)
    x, g = grid((48, 6), 53), grid((48, 5), 54)  # wgrad: contract the 48 tokens
    dn = (((0,), (0,)), ((), ()))
    got = quantized_dot_general(jnp.asarray(x), jnp.asarray(g), dn, gemm, key=KEY)
    exact = (x.T.astype(np.float64) @ g.astype(np.float64)).astype(np.float32)  # exact in float32 too
    assert_bit_exact(got, exact)  # exact data: exactly unchanged
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(48, 6)).astype(np.float32), rng.normal(size=(48, 5)).astype(np.float32)
    got = quantized_dot_general(jnp.asarray(a), jnp.asarray(b), dn, gemm, key=KEY)
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=0, atol=2e-5)


@pytest.mark.long
def test_wgrad_with_the_transform_is_within_the_quantization_error_of_wgrad_without():
    r = training_recipe("nvfp4")
    without = dataclasses.replace(r.wgrad, hadamard=None)
    rng = np.random.default_rng(2)
    shape_x, shape_g = GEMM_SHAPES["wgrad"][:2]  # the shapes of the recipe test: one compilation less
    x = rng.normal(size=shape_x).astype(np.float32)
    g = (rng.normal(size=shape_g) * np.where(rng.random(shape_g) < 0.05, 30, 1)).astype(np.float32)  # outliers
    dn = (((0,), (0,)), ((), ()))
    exact = x.T.astype(np.float64) @ g
    scale = np.linalg.norm(exact)
    with_rht = np.asarray(quantized_dot_general(jnp.asarray(x), jnp.asarray(g), dn, r.wgrad, key=KEY))
    plain = np.asarray(quantized_dot_general(jnp.asarray(x), jnp.asarray(g), dn, without, key=KEY))
    assert np.linalg.norm(with_rht - exact) / scale < 0.3
    assert np.linalg.norm(plain - exact) / scale < 0.3
    assert np.linalg.norm(with_rht - plain) / scale < 0.4
    # what these bounds catch: the transform on one operand only (or with other signs) is no product at all
    broken = quantized_dot_general(hadamard(jnp.asarray(x), 0, 16, None), jnp.asarray(g), dn, without, key=KEY)
    assert np.linalg.norm(np.asarray(broken) - exact) / scale > 0.8


# -- bad inputs --------------------------------------------------------------------------------------------

DN = (((1,), (0,)), ((), ()))
DELAYED = Quantizer(format="e4m3fn", scaling="delayed")
SR = Quantizer(format="e4m3fn", rounding="stochastic")
BAD = [
    ({"gemm": "mxfp8"}, TypeError, r"gemm must be a GemmRecipe"),
    ({"dimension_numbers": ((1, 0), ())}, TypeError, r"dimension_numbers must be \(\(lhs_contracting"),
    ({"dimension_numbers": (((1,), (0, 1)), ((), ()))}, ValueError, r"contract 1 lhs dimensions with 2 rhs"),
    ({"rhs": np.ones((3, 2), np.float32)}, ValueError, r"the contracting dimensions differ in size"),
    ({"lhs": np.ones((2, 4))}, TypeError, r"lhs must be a float16, bfloat16 or float32 array, got dtype float64"),
    ({"gemm": GemmRecipe(lhs=None, rhs=None), "lhs_amax": 1.0}, ValueError, r"lhs_amax is only used with scaling="),
    ({"gemm": GemmRecipe(lhs=DELAYED, rhs=None)}, ValueError, r"scaling='delayed' needs lhs_amax"),
    ({"gemm": GemmRecipe(lhs=None, rhs=SR)}, ValueError, r"needs key=jax.random.key"),
    ({"gemm": GemmRecipe(lhs=None, rhs=None, hadamard=4)}, ValueError, r"size 4 needs key=jax.random.key"),
    ({"key": 3}, TypeError, r"key must be a single JAX PRNG key"),
]


@pytest.mark.parametrize(("changes", "error", "message"), BAD, ids=lambda v: str(v)[:40])
def test_bad_inputs_name_the_argument(changes, error, message):
    q = Quantizer(format="e4m3fn")
    args = {
        "lhs": np.ones((2, 4), np.float32),
        "rhs": np.ones((4, 3), np.float32),
        "dimension_numbers": DN,
        "gemm": GemmRecipe(lhs=q, rhs=q),
        **changes,
    }
    with pytest.raises(error, match=message):
        quantized_dot_general(args.pop("lhs"), args.pop("rhs"), args.pop("dimension_numbers"), args.pop("gemm"), **args)


def test_bad_hadamard_arguments():
    with pytest.raises(ValueError, match="size must be a power of two"):
        hadamard(jnp.ones((2, 12)), 1, 12, KEY)
    with pytest.raises(ValueError, match=r"axis=2 is out of range"):
        hadamard(jnp.ones((2, 16)), 2, 16, KEY)


@pytest.mark.long
@pytest.mark.parametrize("rows", [4, 2048])  # 2048 x 32 = 2**16 elements: x is materialized (fpemu._ops.fusion)
@pytest.mark.parametrize(("name", "n"), [("mxfp8", 3), ("nvfp4", 1), ("fp8_current", 1)])
def test_the_gradient_is_the_product_with_the_quantized_other_operand(name, n, rows):
    """Straight-through quantization and fpemu.dot_general's straight-through product: d(sum y)/dx = 1 . Wq^T,
    with per-tensor scales (not powers of two: the amax planted at 3) in Wq = fl(blocks * t) too. A
    materialized operand has the identity's derivative (it was zero when its first element was not)."""
    gemm = training_recipe(name).forward
    x, w = grid((rows, 32), 60), grid((32, n), 61)
    x.flat[0], w.flat[0] = 1.0, 3.0
    dn = (((1,), (0,)), ((), ()))
    dx = jax.grad(lambda v: quantized_dot_general(v, jnp.asarray(w), dn, gemm).sum())(jnp.asarray(x))
    wq = quantize_operand_reference(w, [0], gemm.rhs)
    assert_bit_exact(dx, np.ones((rows, n), np.float32) @ wq.T)


def test_the_hadamard_transform_is_its_own_derivative():
    """The transform is linear: its JVP is the transform of the tangent, bit for bit (the same
    butterflies), also for an input of 2**16 elements, which is materialized first."""
    x, t = grid((1024, 64), 62), grid((1024, 64), 63)
    x.flat[0] = 1.0
    _, tangent = jax.jvp(lambda v: hadamard(v, 0, 16, KEY), (jnp.asarray(x),), (jnp.asarray(t),))
    assert_bit_exact(tangent, hadamard(jnp.asarray(t), 0, 16, KEY))


def _quantizer_loops_that_transpose(hlo: str) -> int:
    """Fused computations of optimized HLO that transpose and also do a quantizer's bit work."""
    computations = (c for c in hlo.split("\n\n") if c.lstrip().startswith("%fused_computation"))
    return sum(" transpose(" in c and "bitcast-convert(" in c for c in computations)


@pytest.mark.long
def test_quantized_operands_are_computed_once(monkeypatch):
    """A quantizer reads its operand in several loops (its block amax, its rounding): XLA:CPU fused the
    operand's producers, the backward pass's elementwise chain, into each of them (MXFP8's training step
    took 1.7x emulated bf16 instead of 1.05x), and fused the dot's operand transposes into its rounding
    loop, which then ran in the transposed order. Materialized operands (of 2**16 elements or more),
    before and after their quantizers, leave the compiled program fewer multiplications and every
    transpose a plain copy, with the same bits."""
    if jax.default_backend() != "cpu":
        pytest.skip("the materializing conditional is XLA:CPU's")
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((256, 256)).astype(np.float32))
    params = {name: jnp.asarray(rng.standard_normal((256, 256)).astype(np.float32) / 16) for name in ("w1", "w2")}

    def loss(p, v):
        h = jax.nn.gelu(v @ p["w1"])
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-5)
        return jnp.mean(jnp.square(h @ p["w2"]))

    def build():
        jax.clear_caches()  # the recipe GEMM's trace is cached across builds
        fn = jax.jit(fpemu.emulate(jax.value_and_grad(loss), fpemu.Policy(dot="mxfp8")))
        compiled = fn.lower(params, x).compile()
        hlo = compiled.as_text()
        return hlo.count(" multiply("), _quantizer_loops_that_transpose(hlo), compiled(params, x)

    once, transposing, result = build()
    monkeypatch.setattr(fusion, "MATERIALIZE_MIN_SIZE", 1 << 40)  # no operand materialized
    monkeypatch.setattr(fusion, "REORDERED_MIN_SIZE", 1 << 40)
    fused, fused_transposing, fused_result = build()
    assert once < fused, (once, fused)
    assert transposing == 0 < fused_transposing, (transposing, fused_transposing)
    assert_tree_bits(result, fused_result)


def test_small_quantized_operands_that_the_dot_transposes_are_materialized(monkeypatch):
    """Under 2**16 elements an operand is materialized after its quantizer only where the dot
    transposes it (wgrad's x, dgrad's W): fused, its rounding loop ran in the transposed order, 100 us
    for 8,192 elements (the digits MLP's fp8_blockwise step, 1.9x emulated bf16 -> 1.3x). The same bits."""
    if jax.default_backend() != "cpu":
        pytest.skip("the materializing conditional is XLA:CPU's")
    x, w = jnp.asarray(grid((64, 64), 64)), jnp.asarray(grid((64, 128), 65))
    step = jax.value_and_grad(lambda v, p: jnp.sum(jnp.square(v @ p)), argnums=(0, 1))

    def build():
        jax.clear_caches()  # the recipe GEMM's trace is cached across builds
        compiled = jax.jit(fpemu.emulate(step, fpemu.Policy(dot="fp8_blockwise"))).lower(x, w).compile()
        hlo = compiled.as_text()
        return hlo.count(" conditional("), _quantizer_loops_that_transpose(hlo), compiled(x, w)

    conditionals, transposing, result = build()
    monkeypatch.setattr(fusion, "REORDERED_MIN_SIZE", 1 << 40)  # only the large ones materialized
    fewer, _, fused_result = build()
    assert conditionals == fewer + 2, (conditionals, fewer)  # x for wgrad, W for dgrad
    assert transposing == 0, transposing  # fusion cannot cross the materializing conditional
    assert_tree_bits(result, fused_result)


@pytest.mark.parametrize("name", ["fp8_current", "fp8_blockwise", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("form", ["emulate(value_and_grad)", "value_and_grad(emulate)"])
def test_under_emulate_every_gemm_materialization_reads_one_probe(name, form):
    # emulate passes one probe, made from the first argument, to every materialization of its recipe GEMMs
    # (the operands shared by two GEMMs, each operand's chain, the chunked sums, the backward pass of
    # jax.grad(emulate(f))): XLA computes one predicate for all of them. Only the quantized lhs's own
    # materialization keeps its own predicate (gemm_dot.py says why).
    x = jnp.asarray(grid((256, 256), 256))  # 2**16 elements: every operand is materialized
    ws = jnp.asarray(grid((2, 256, 256), 257)) / 64

    def loss(ws, x):
        return jnp.sum(jnp.sin(jnp.tanh(x @ ws[0]) @ ws[1]))

    policy = fpemu.Policy(dot=name)
    options = {"key": KEY} if policy.stochastic else {}
    if form == "emulate(value_and_grad)":
        step = fpemu.emulate(jax.value_and_grad(loss), policy, **options)
    else:
        step = jax.value_and_grad(fpemu.emulate(loss, policy, **options))
    closed = jax.make_jaxpr(step)(ws, x)
    barriers = _barrier_probes(closed)
    own = [array for array, probe in barriers if probe is array]
    shared = {id(probe): probe for array, probe in barriers if probe is not array}
    assert len(shared) == 1, (name, form, len(shared))
    (probe,) = shared.values()
    assert len(barriers) - len(own) >= 12, (name, form, len(barriers), len(own))  # 6 GEMMs, two operands each
    made = [e for e in closed.jaxpr.eqns if probe in e.outvars]
    assert [e.primitive.name for e in made] == ["eq"], made  # the first argument's first element == 0
    assert len(own) <= 6, (name, form, len(own))  # at most each GEMM's quantized lhs's own


def test_a_scan_body_has_one_probe_of_its_own():
    # a combinator's body is a traced function of its own (emulate's subfunction): its materializations read
    # one probe made from the body's first argument, not one per operand, and not a tracer of the outer trace
    x = jnp.asarray(grid((256, 256), 260))
    ws = jnp.asarray(grid((2, 256, 256), 261)) / 64

    def loss(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
        return jnp.sum(h)

    closed = jax.make_jaxpr(fpemu.emulate(jax.value_and_grad(loss), fpemu.Policy(dot="mxfp8")))(ws, x)
    barriers = _barrier_probes(closed)
    shared = {id(probe): probe for array, probe in barriers if probe is not array}
    made = {id(v): e.primitive.name for e in _all_equations(closed.jaxpr) for v in e.outvars}
    assert len(barriers) >= 8 and 1 <= len(shared) <= 2, (len(barriers), len(shared))  # the forward and backward scans
    assert all(made.get(key) == "eq" for key in shared), [made.get(key) for key in shared]


def _all_equations(jaxpr) -> list:
    """Every equation of ``jaxpr`` and of the jaxprs its equations hold."""
    found = []
    for eqn in jaxpr.eqns:
        found.append(eqn)
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    found += _all_equations(inner)
    return found


def test_under_vmap_a_batched_first_argument_leaves_the_weights_materializations_alone():
    # the shared probe comes from the first argument; batched by vmap, it must not batch the materializations
    # of what the batch shares (the weight's chain, shape (512, 256)): JAX's own rule for a conditional with a
    # batched predicate is a select of both branches with every array broadcast to the batch, (3, 512, 256)
    xs = jnp.asarray(grid((3, 128, 512), 258))  # each example 2**16 elements: materialized
    w = jnp.asarray(grid((512, 256), 259)) / 64
    emulated = fpemu.emulate(lambda x, w: jnp.tanh(x @ w), fpemu.Policy(dot="mxfp8"))
    batched = jax.vmap(emulated, in_axes=(0, None))
    text = str(jax.make_jaxpr(batched)(xs, w))
    assert "[3,512,256]" not in text and "[3,256,512]" not in text  # no copy of the weight per example
    one_by_one = jnp.stack([jax.jit(emulated)(x, w) for x in xs])
    assert_bit_exact(jax.jit(batched)(xs, w), one_by_one)


def _barrier_probes(closed) -> list:
    """``(array, probe)`` of every ``_barrier`` call: its first array and the variable whose first
    element its predicate reads (its last argument), both followed out through the enclosing calls'
    arguments to the outermost variables."""
    found = []

    def walk(jaxpr, outer):
        for eqn in jaxpr.eqns:
            ins = [outer.get(v, v) if not isinstance(v, jax.extend.core.Literal) else None for v in eqn.invars]
            if eqn.primitive.name in ("jit", "pjit") and eqn.params["name"] == "_barrier":
                found.append((ins[0], ins[-1]))
                continue
            for name in ("jaxpr", "call_jaxpr"):
                inner = eqn.params.get(name)
                inner = getattr(inner, "jaxpr", inner)
                if inner is not None and hasattr(inner, "eqns") and len(inner.invars) == len(ins):
                    walk(inner, dict(zip(inner.invars, ins, strict=True)))

    walk(closed.jaxpr, {})
    return found


@pytest.mark.parametrize("name", ["fp8_current", "fp8_blockwise", "mxfp8", "nvfp4"])
def test_a_gemms_materializations_read_its_operands_for_their_predicates(name):
    # one predicate per operand for every materialization of its chain (the Hadamard transform, before
    # and inside its quantizer, the chunked sum, the quantized rhs): XLA then computes one kernel for all
    # of them; only the quantized lhs's own materialization keeps its own predicate (gemm_dot.py says why)
    gemm = training_recipe(name).forward
    lhs, rhs = jnp.ones((256, 256), jnp.float32), jnp.ones((256, 256), jnp.float32)
    dn = (((1,), (0,)), ((), ()))
    closed = jax.make_jaxpr(lambda a, b: quantized_dot_general(a, b, dn, gemm, key=KEY))(lhs, rhs)
    probes = [probe for _, probe in _barrier_probes(closed)]
    inputs = closed.jaxpr.invars
    assert set(inputs) <= set(probes), name  # both operands materialized, at least before their quantizers
    others = [p for p in probes if p not in inputs]
    assert len(others) == len(set(others)) <= 1, (name, len(others))
