"""The Pallas matmul kernel against `fpemu.matmul` (its reference) and the exact oracle
`fpemu.testing.dot_general_reference`: compiled on a GPU (skipped without one) and in interpret
mode on CPU, so CI exercises the kernel.

Bit-equality is asserted wherever every chunk sum is exact in float32 (small-integer-valued
operands, or one product per chunk); random float operands are checked against a float64 matmul
of the rounded operands within the γ_K bound of docs/matmul.md. Every interpret-mode call compiles
a new XLA program (about a second on a 2-core CI machine), so the fast set picks one case per
feature and the full cross products are behind the `slow` marker.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.kernels import MatmulBlockSizes, matmul_kernel
from fpemu.kernels.matmul import BlockSizes, matmul_kernel_reference
from fpemu.testing import dot_general_reference

M, K, N = 5, 37, 3  # ragged everywhere: no block size divides them
_DIMS = (((1,), (0,)), ((), ()))


def _ints(shape, seed, bound=8) -> np.ndarray:
    """Small-integer-valued float32 operands: every product and partial sum is exact in float32."""
    return np.random.default_rng(seed).integers(-bound, bound + 1, shape).astype(np.float32)


def _floats(shape, seed, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _assert_same(actual, expected):
    """Bit equality, NaN canonicalised (any NaN equals any NaN), the sign of zero included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, actual.shape)
    nan, actual_nan = np.isnan(expected), np.isnan(actual)
    np.testing.assert_array_equal(actual_nan, nan)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
    np.testing.assert_array_equal(actual[~nan].view(bits), expected[~nan].view(bits))


def _gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


# Operand formats: one pair per dot path in CI (bf16 dots for FP8/FP6/FP4 values, float32 dots for
# fp16 and unrounded float32), every format of at most 16 bits against e4m3fn behind `slow`.
_FAST_PAIRS = [("e4m3fn", "e4m3fn"), ("e5m2", "e2m1fn"), ("e3m2fn", "e2m3fn"), ("fp16", "bf16"), (None, None)]
_ALL_PAIRS = [(f.name, "e4m3fn") for f in fpemu.formats() if f.bits <= 19] + [("e3m2fn", "e2m3fn"), ("tf32", None)]
# ("fp32", 16): float32 promotion every 16 products; ("bf16", 1) runs on random floats below.
_FAST_ACCUMULATORS = [("fp16", 3), ("e4m3fn", 16), ("bf16", 128), ("fp32", 16)]
_ALL_ACCUMULATORS = list(itertools.product(["bf16", "fp16", "e4m3fn", "tf32", "fp32"], [1, 3, 16, 128]))


def _pair_id(pair):
    return "-".join(str(f) for f in pair)


class MatmulKernelTest:
    """Compiled on a GPU. The interpret-mode subclass runs the same cases on CPU."""

    interpret = False
    # Tiles of at least 16 (Triton's smallest dot); block_k=8 takes the rank-1 path.
    blocks = BlockSizes(block_m=16, block_n=16, block_k=16)
    rank1_blocks = BlockSizes(block_m=16, block_n=16, block_k=8)

    @pytest.fixture(autouse=True)
    def _platform(self):
        if not self.interpret and jax.default_backend() != "gpu":
            pytest.skip("compiled Pallas kernels need a GPU")

    def _run(self, a, b, blocks=None, **kw):
        return matmul_kernel(
            jnp.asarray(a), jnp.asarray(b), block_sizes=blocks or self.blocks, interpret=self.interpret, **kw
        )

    def _check(self, a, b, blocks=None, **kw):
        """The kernel equals `fpemu.matmul` bit for bit; returns the result."""
        got = self._run(a, b, blocks, **kw)
        _assert_same(got, fpemu.matmul(jnp.asarray(a), jnp.asarray(b), **kw))
        return got

    def _check_oracle(self, a, b, blocks=None, **kw):
        """The kernel equals `fpemu.matmul` and the exact sequential oracle bit for bit."""
        got = self._check(a, b, blocks, **kw)
        _assert_same(got, dot_general_reference(np.asarray(a), np.asarray(b), _DIMS, **kw))

    # -- exact sums: bit-equal ----------------------------------------------------------------------

    @pytest.mark.long
    @pytest.mark.parametrize("pair", _FAST_PAIRS, ids=_pair_id)
    def test_small_integers_bit_equal(self, pair):
        lhs, rhs = pair
        self._check(_ints((M, K), 0), _ints((K, N), 1), lhs=lhs, rhs=rhs)

    @pytest.mark.slow
    @pytest.mark.parametrize("pair", _ALL_PAIRS, ids=_pair_id)
    def test_small_integers_bit_equal_every_format(self, pair):
        lhs, rhs = pair
        self._check(_ints((M, K), 0), _ints((K, N), 1), lhs=lhs, rhs=rhs)

    @pytest.mark.parametrize("acc", _FAST_ACCUMULATORS, ids=_pair_id)
    def test_accumulator_emulation(self, acc):
        accumulate, every = acc
        self._check_oracle(_ints((M, K), 2, 4), _ints((K, N), 3, 4), accumulate=accumulate, accumulate_every=every)

    @pytest.mark.slow
    @pytest.mark.parametrize("acc", _ALL_ACCUMULATORS, ids=_pair_id)
    @pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "stochastic"])
    def test_accumulator_emulation_every_option(self, acc, mode):
        accumulate, every = acc
        if accumulate == "fp32" and mode != "nearest_even":
            pytest.skip("a float32 running sum rounds to nearest even only")
        kw = {"accumulate_rounding": mode, "key": jax.random.key(3) if mode == "stochastic" else None}
        for saturate in (False, True):
            self._check_oracle(
                _ints((M, K), 2, 4), _ints((K, N), 3, 4), lhs="e4m3fn", rhs="e5m2", accumulate=accumulate,
                accumulate_every=every, saturate=saturate, **kw,
            )  # fmt: skip

    def test_sequential_accumulator_on_random_floats(self):
        # One product per chunk: every chunk sum is exact, so the kernel is the oracle bit for bit.
        self._check_oracle(
            _floats((M, K), 4), _floats((K, N), 5), lhs="e4m3fn", rhs="e4m3fn", accumulate="bf16",
            accumulate_every=1,
        )  # fmt: skip

    @pytest.mark.long
    def test_rank1_steps_and_chunks_across_steps(self):
        # block_k=8: K steps narrower than a dot, one chunk of 12 over three steps of gcd(12, 8) = 4.
        a, b = _ints((M, K), 6, 4), _ints((K, N), 7, 4)
        self._check(a, b, self.rank1_blocks, lhs="e4m3fn", rhs="e4m3fn")
        self._check_oracle(a, b, self.rank1_blocks, lhs="e4m3fn", rhs="e4m3fn", accumulate="fp16", accumulate_every=12)

    def test_default_block_sizes(self):
        # block_sizes=None: the platform's defaults shrunk to the problem; chunks of 24 in steps of 8.
        kw = {"lhs": "e4m3fn", "rhs": "e4m3fn", "accumulate": "bf16", "accumulate_every": 24}
        a, b = _ints((M, K), 34), _ints((K, N), 35)
        got = matmul_kernel(jnp.asarray(a), jnp.asarray(b), interpret=self.interpret, **kw)
        _assert_same(got, fpemu.matmul(a, b, **kw))

    @pytest.mark.slow
    @pytest.mark.parametrize("block_k", [1, 2, 4, 8, 16, 32, 64])
    @pytest.mark.parametrize("every", [None, 1, 5, 8, 12, 37, 40])
    def test_every_block_k_and_chunk_size(self, block_k, every):
        blocks = BlockSizes(block_m=self.blocks.block_m, block_n=self.blocks.block_n, block_k=block_k)
        acc = "fp32" if every is None else "bf16"
        self._check(_ints((M, K), 6), _ints((K, N), 7), blocks, lhs="e5m2", rhs="e4m3fn", accumulate=acc,
                    accumulate_every=every)  # fmt: skip

    # -- outputs, scales, saturation, special values --------------------------------------------------

    def test_out_format_and_result_dtype(self):
        self._check(_floats((M, K), 8), _floats((K, N), 9), lhs="e4m3fn", rhs="e4m3fn", out="e4m3fn",
                    rounding="toward_negative", preferred_element_type=jnp.bfloat16)  # fmt: skip

    @pytest.mark.slow
    @pytest.mark.parametrize("result", [jnp.float16, jnp.bfloat16, jnp.float32])
    @pytest.mark.parametrize("out", [None, "e5m2", "e2m1fn", "bf16"])
    def test_out_formats_every_result_dtype(self, out, result):
        if out == "bf16" and result == jnp.float16:
            pytest.skip("fp16 cannot hold bf16")
        self._check(_floats((M, K), 8), _floats((K, N), 9), lhs="e4m3fn", rhs="e4m3fn", out=out,
                    preferred_element_type=result)  # fmt: skip

    def test_scales(self):
        # 1000 overflows e4m3fn (448) unless divided by the scale; power-of-two scales are exact.
        a, b = _ints((M, K), 10, 4) * 250, _ints((K, N), 11) / 8
        got = self._check(a, b, lhs="e4m3fn", rhs="e4m3fn", lhs_scale=jnp.float32(4.0), rhs_scale=np.float32(0.25))
        assert not np.isnan(np.asarray(got)).any()

    def test_an_overflowing_scale_product_keeps_an_exact_zero(self):
        a = np.zeros((M, K), np.float32)
        a[:, 0] = 2.0**100
        b = np.zeros((K, N), np.float32)
        b[0, 1:] = 2.0**100  # column 0 meets only zeros
        got = self._check(a, b, lhs="e4m3fn", rhs="e4m3fn", lhs_scale=2.0**100, rhs_scale=2.0**100)
        assert (np.asarray(got)[:, 0] == 0).all() and np.isinf(np.asarray(got)[:, 1:]).all()

    @pytest.mark.slow
    def test_one_scale(self):
        self._check(_floats((M, K), 12, 100), _floats((K, N), 13), lhs="e4m3fn", rhs="e5m2", lhs_scale=3.0)
        self._check(_floats((M, K), 12), _floats((K, N), 13, 100), lhs="e4m3fn", rhs="e5m2", rhs_scale=jnp.float32(3))

    @pytest.mark.long
    def test_saturate(self):
        # Operands beyond 448, a running sum beyond it and an output beyond e5m2's 57344 all clamp.
        a, b = _ints((M, K), 14) * 80, _ints((K, N), 15) * 100
        got = self._check(a, b, lhs="e4m3fn", rhs="e4m3fn", accumulate="fp16", accumulate_every=4, out="e5m2",
                          saturate=True)  # fmt: skip
        assert np.isfinite(np.asarray(got)).all() and np.abs(np.asarray(got)).max() <= 57344

    def test_special_values_propagate(self):
        a, b = _ints((M, K), 16), np.abs(_ints((K, N), 17)) + 1  # b > 0
        a[0, 3] = np.nan  # row 0: NaN
        a[1] = -0.0  # row 1: -0 products sum to +0, but -0 * inf is NaN
        a[2, 5] = np.inf  # row 2: +inf (b > 0)
        b[5, 1] = -np.inf  # column 1: -inf * x, NaN where x is ±0
        got = np.asarray(self._check(a, b, lhs="e5m2", rhs="e5m2"))
        assert np.isnan(got[0]).all()
        assert got[1, 0] == 0 and not np.signbit(got[1, 0]) and np.isnan(got[1, 1])
        assert got[2, 0] == np.inf and got[2, 1] == -np.inf

    def test_special_values_and_overflow_in_a_bf16_running_sum(self):
        """The bf16 running sum's step (nine PTX instructions when compiled on a GPU, the integer
        engine in interpret mode): NaN and +inf propagate, a sum of -0 products is +0, a running sum
        pushed beyond float32's range overflows to +inf, and bf16 ties (ints beyond 256) go to even."""
        a, b = _ints((M, K), 36), np.abs(_ints((K, N), 37)) + 1  # b > 0
        a[0, 3] = np.nan
        a[1] = -0.0
        a[2, 5] = np.inf
        a[3, :] = 0.0
        a[3, 0], a[3, 1] = 1.5 * 2.0**127, 2.0**127  # 1.5 * 2**127 * b, then + 2**127 * b: beyond float32
        b[0, :], b[1, :] = 1.0, 1.0
        got = np.asarray(self._check(a, b, accumulate="bf16", accumulate_every=1))
        assert np.isnan(got[0]).all() and (got[1] == 0).all() and not np.signbit(got[1]).any()
        assert (got[2] == np.inf).all() and (got[3] == np.inf).all()

    def test_zero_contraction_and_empty_results(self):
        got = self._check(np.zeros((M, 0), np.float32), np.zeros((0, N), np.float32), accumulate="bf16")
        assert not np.signbit(np.asarray(got)).any()
        assert self._run(np.zeros((0, K), np.float32), _ints((K, N), 0)).shape == (0, N)

    def test_operand_format_without_zero_pads_to_zero(self):
        # E8M0 has no zero (0 rounds to NaN): the K padding must stay out of the sum.
        a, b = np.abs(_floats((M, K), 18)) + 0.1, _ints((K, N), 19)
        got = self._check(a, b, lhs="e8m0fnu", rhs="e2m1fn")
        assert not np.isnan(np.asarray(got)).any()

    @pytest.mark.long
    def test_narrow_input_dtypes(self):
        # A bfloat16 a used as it is (its values are bf16: the bf16 dot path), a float16 b rounded to e4m3fn.
        a = jnp.asarray(_ints((M, K), 20)).astype(jnp.bfloat16)
        b = jnp.asarray(_floats((K, N), 21)).astype(jnp.float16)
        self._check(a, b, rhs="e4m3fn", accumulate="bf16", accumulate_every=16)

    @pytest.mark.long
    def test_host_float64_operands_round_once(self):
        # With x64 off, a NumPy float64 operand is rounded from its float64 value, as fpemu.matmul does:
        # 1 + 2**-4 + 2**-30 is just above the e4m3fn tie 1.0625, so it rounds up to 1.125.
        a = _ints((M, K), 22).astype(np.float64)
        a[0, 0] = 1 + 2**-4 + 2**-30
        b = _ints((K, N), 23)
        got = matmul_kernel(a, b, lhs="e4m3fn", rhs="e4m3fn", block_sizes=self.blocks, interpret=self.interpret)
        expected = fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn")
        _assert_same(got, expected)
        rounded_twice = fpemu.matmul(a.astype(np.float32), b, lhs="e4m3fn", rhs="e4m3fn")  # 1.0625 -> 1.0
        assert np.asarray(expected)[0, 0] != np.asarray(rounded_twice)[0, 0]

    # -- stochastic rounding: the XLA path's random bits ----------------------------------------------

    @pytest.mark.long
    def test_stochastic_operands_and_output(self):
        kw = {"lhs": "e4m3fn", "rhs": "e2m1fn", "out": "e4m3fn", "rounding": "stochastic", "key": jax.random.key(7)}
        a, b = _floats((M, K), 24), _floats((K, N), 25)
        got = self._check(a, b, accumulate_every=1, **kw)  # exact chunk sums: bit-equal
        _assert_same(got, self._run(a, b, self.rank1_blocks, accumulate_every=1, **kw))  # any block size

    @pytest.mark.long
    def test_stochastic_accumulator(self):
        kw = {"accumulate": "bf16", "accumulate_every": 3, "accumulate_rounding": "stochastic"}
        self._check_oracle(_ints((M, K), 26, 16), _ints((K, N), 27, 16), key=jax.random.PRNGKey(8), **kw)

    # -- inexact sums: the γ_K bound -------------------------------------------------------------------

    @pytest.mark.parametrize("fmt", ["e4m3fn", None])
    def test_random_floats_within_the_gamma_k_bound(self, fmt):
        a, b = _floats((M, K), 28), _floats((K, N), 29)
        got = np.asarray(self._run(a, b, lhs=fmt, rhs=fmt), np.float64)
        qa = np.asarray(fpemu.quantize(a, fmt) if fmt else a, np.float64)
        qb = np.asarray(fpemu.quantize(b, fmt) if fmt else b, np.float64)
        exact = qa @ qb  # products exact in float64; its own error is the γ_K of float64
        bound = (_gamma(K, 2.0**-24) + _gamma(K, 2.0**-53)) * (np.abs(qa) @ np.abs(qb))
        assert (np.abs(got - exact) <= bound).all(), np.max(np.abs(got - exact) / bound)

    @pytest.mark.slow
    @pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e2m1fn", "bf16", "fp16", None])
    def test_random_floats_within_the_gamma_k_bound_large(self, fmt):
        a, b = _floats((40, 300), 30), _floats((300, 20), 31)
        got = np.asarray(self._run(a, b, lhs=fmt, rhs=fmt), np.float64)
        qa = np.asarray(fpemu.quantize(a, fmt) if fmt else a, np.float64)
        qb = np.asarray(fpemu.quantize(b, fmt) if fmt else b, np.float64)
        bound = (_gamma(300, 2.0**-24) + _gamma(300, 2.0**-53)) * (np.abs(qa) @ np.abs(qb))
        assert (np.abs(got - qa @ qb) <= bound).all()

    # -- API -------------------------------------------------------------------------------------------

    def test_reference_is_fpemu_matmul(self):
        a, b = jnp.asarray(_ints((2, 3), 32)), jnp.asarray(_ints((3, 2), 33))
        _assert_same(matmul_kernel_reference(a, b, lhs="e4m3fn"), fpemu.matmul(a, b, lhs="e4m3fn"))
        assert MatmulBlockSizes is BlockSizes

    def test_errors_name_the_argument(self):
        a, b = jnp.ones((2, 3)), jnp.ones((3, 4))
        run = lambda x, y, **kw: matmul_kernel(x, y, interpret=self.interpret, **kw)
        with pytest.raises(ValueError, match=r"2-D a and b, got shapes a: \(2, 2, 3\) and b: \(3, 4\)"):
            run(jnp.ones((2, 2, 3)), b)
        with pytest.raises(ValueError, match=r"last dimension of a \(3\) must equal the first dimension of b \(4\)"):
            run(a, jnp.ones((4, 4)))
        with pytest.raises(TypeError, match="^a must be a float16"):
            run(jnp.ones((2, 3), jnp.int32), b)
        with pytest.raises(ValueError, match="^lhs: "):
            run(a, b, lhs="e9m9")
        with pytest.raises(ValueError, match="^rounding must be one of"):
            run(a, b, lhs="e4m3fn", rounding="up")
        with pytest.raises(ValueError, match="^accumulate_rounding="):
            run(a, b, accumulate_rounding="toward_zero")
        with pytest.raises(ValueError, match="^accumulate_every must be an int >= 1"):
            run(a, b, accumulate_every=0)
        with pytest.raises(TypeError, match="^accumulate_every must be an int"):
            run(a, b, accumulate_every=2.0)
        with pytest.raises(ValueError, match="needs key="):
            run(a, b, lhs="e4m3fn", rounding="stochastic")
        with pytest.raises(ValueError, match="^key is only used"):
            run(a, b, key=jax.random.key(0))
        with pytest.raises(ValueError, match="^lhs_scale must be a scalar"):
            run(a, b, lhs_scale=jnp.ones(2))
        with pytest.raises(ValueError, match="^out='bf16'"):
            run(a, b, out="bf16", preferred_element_type=jnp.float16)
        with pytest.raises(TypeError, match="^block_sizes must be a fpemu.kernels.matmul.BlockSizes"):
            run(a, b, block_sizes=(16, 16, 16))
        with pytest.raises(TypeError, match="^interpret must be a bool"):
            matmul_kernel(a, b, interpret="yes")
        if jax.default_backend() == "cpu":
            with pytest.raises(ValueError, match="^interpret=False: fpemu.kernels.matmul_kernel compiles for GPUs"):
                matmul_kernel(a, b, interpret=False)
        with pytest.raises(ValueError, match="^block_n=3 must be a positive power of two"):
            BlockSizes(block_m=16, block_n=3, block_k=16)
        with pytest.raises(ValueError, match="^block_k=0 must be a positive power of two"):
            BlockSizes(block_m=16, block_n=16, block_k=0)

    def test_float64_operands_are_refused(self, x64):
        with pytest.raises(ValueError, match="computes in float32"):
            matmul_kernel(jnp.ones((2, 3), jnp.float64), jnp.ones((3, 4), jnp.float32), interpret=self.interpret)


class TestMatmulKernelGpu(MatmulKernelTest):
    pass


class TestMatmulKernelInterpret(MatmulKernelTest):
    interpret = True
    # Tiny tiles: (5, 37) @ (37, 3) is a 2 x 2 grid of 3 K steps (interpret mode costs milliseconds per step).
    blocks = BlockSizes(block_m=4, block_n=2, block_k=16)
    rank1_blocks = BlockSizes(block_m=8, block_n=4, block_k=8)
