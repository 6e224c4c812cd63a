"""Explicit random bits in the Pallas kernels (issue 15): ``quantize_kernel(..., random=bits)`` and
``matmul_kernel(..., random={...})`` give the XLA path's bits with the same random bits, and the
keyed result with the bits the key draws (docs/matmul.md's streams). Compiled on a GPU (skipped
without one) and in interpret mode on CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu.kernels import MatmulBlockSizes, QuantizeBlockSizes, matmul_kernel, quantize_kernel

KEY = jax.random.key(17)


def _same(actual, expected):
    """Bit equality, any NaN equal to any NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    with np.errstate(invalid="ignore"):
        nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float32)), nan)
    bits = {2: np.uint16, 4: np.uint32}[actual.dtype.itemsize]
    np.testing.assert_array_equal(actual[~nan].view(bits), expected[~nan].view(bits))


def _ints(shape, seed, bound=6) -> np.ndarray:
    """Small integers over 4: operands whose rounded products and chunk sums are exact in float32."""
    return (np.random.default_rng(seed).integers(-bound, bound + 1, shape) / 4).astype(np.float32)


def _stream_bits(key, a_shape, b_shape, out_shape, chunks, streams):
    """The bits of the key's streams (docs/matmul.md): split(key, 4) = lhs, rhs, running sum, out."""
    lhs, rhs, acc, out = jax.random.split(key, 4)
    make = {
        "lhs": lambda: fpemu.stochastic_bits(lhs, a_shape),
        "rhs": lambda: fpemu.stochastic_bits(rhs, b_shape),
        "out": lambda: fpemu.stochastic_bits(out, out_shape),
        "accumulate": lambda: jnp.stack([fpemu.stochastic_bits(k, out_shape) for k in jax.random.split(acc, chunks)]),
    }
    return {name: make[name]() for name in streams}


class RandomBitsKernelTest:
    interpret = False

    @pytest.fixture(autouse=True)
    def _platform(self):
        if not self.interpret and jax.default_backend() != "gpu":
            pytest.skip("compiled Pallas kernels need a GPU")

    @pytest.mark.long
    @pytest.mark.parametrize(
        ("fmt", "variant", "k"), [("e4m3fn", "floor", 32), ("e2m1fn", "nearest_even", 3), ("bf16", "nearest_away", 9)]
    )
    def test_quantize_kernel_takes_the_bits(self, fmt, variant, k):
        x = jnp.asarray(np.random.default_rng(1).standard_normal((7, 300)).astype(np.float32) * 40)  # ragged
        kw = dict(rounding="stochastic", random_bits=k, stochastic_variant=variant)
        bits = fpemu.stochastic_bits(KEY, x.shape, random_bits=k)
        got = quantize_kernel(
            x, fmt, random=bits, block_sizes=QuantizeBlockSizes(block=512), interpret=self.interpret, **kw
        )
        _same(got, fpemu.quantize(x, fmt, key=KEY, **kw))
        other = np.random.default_rng(2).integers(0, 2**k, (1, 300), dtype=np.uint64)  # broadcast along rows
        got = quantize_kernel(x, fmt, random=other, interpret=self.interpret, **kw)
        _same(got, fpemu.quantize(x, fmt, random=other, **kw))

    @pytest.mark.long
    def test_matmul_kernel_takes_the_bits(self):
        """Every stream: operands (e2m1fn), a chunked fp16 running sum, the output (e4m3fn)."""
        blocks = MatmulBlockSizes(block_m=16, block_n=16, block_k=16)
        m, k, n = 20, 37, 18  # ragged against the 16-tiles: 2 x 2 tiles, 3 K steps, 3 chunks
        a, b = _ints((m, k), 3), _ints((k, n), 4)
        options = dict(
            lhs="e2m1fn", rhs="e2m1fn", out="e4m3fn", accumulate="fp16", accumulate_every=16, rounding="stochastic",
            accumulate_rounding="stochastic",
        )  # fmt: skip
        streams = ("lhs", "rhs", "accumulate", "out")
        random = _stream_bits(KEY, (m, k), (k, n), (m, n), 3, streams)
        got = matmul_kernel(a, b, random=random, block_sizes=blocks, interpret=self.interpret, **options)
        _same(got, fpemu.matmul(a, b, random=random, **options))
        _same(got, fpemu.matmul(a, b, key=KEY, **options))
        rng = np.random.default_rng(5)  # arbitrary bits, some broadcast
        other = {
            "lhs": rng.integers(0, 2**32, (m, 1), dtype=np.uint64),
            "rhs": rng.integers(0, 2**32, (k, n), dtype=np.uint64),
            "accumulate": rng.integers(0, 2**32, (3, 1, n), dtype=np.uint64),
            "out": np.uint32(123456789),
        }
        got = matmul_kernel(a, b, random=other, block_sizes=blocks, interpret=self.interpret, **options)
        _same(got, fpemu.matmul(a, b, random=other, **options))

    @pytest.mark.long
    def test_matmul_kernel_rank1_steps_and_a_narrow_result(self):
        """Chunks of 3 (K steps of 1, rank-1 updates); a bfloat16 result is the output rounding."""
        a, b = _ints((5, 11), 6), _ints((11, 3), 7)
        options = dict(
            lhs="e4m3fn", accumulate="bf16", accumulate_every=3, rounding="stochastic",
            accumulate_rounding="stochastic", preferred_element_type=jnp.bfloat16,
        )  # fmt: skip
        random = _stream_bits(KEY, (5, 11), (11, 3), (5, 3), 4, ("lhs", "accumulate", "out"))
        blocks = MatmulBlockSizes(block_m=16, block_n=16, block_k=16)
        got = matmul_kernel(a, b, random=random, block_sizes=blocks, interpret=self.interpret, **options)
        _same(got, fpemu.matmul(a, b, key=KEY, **options))

    def test_errors(self):
        x = jnp.ones((4,), jnp.float32)
        with pytest.raises(ValueError, match="not both"):
            quantize_kernel(x, "e4m3fn", rounding="stochastic", key=KEY, random=0, interpret=self.interpret)
        with pytest.raises(ValueError, match=r"random of shape \(3,\) does not broadcast"):
            quantize_kernel(x, "e4m3fn", rounding="stochastic", random=np.zeros(3, np.uint32), interpret=self.interpret)
        m = jnp.ones((2, 2), jnp.float32)
        with pytest.raises(ValueError, match=r"lacks the key 'rhs'.*'lhs', 'rhs'"):
            matmul_kernel(m, m, lhs="e4m3fn", rhs="e4m3fn", rounding="stochastic", random={"lhs": 0},
                          interpret=self.interpret)  # fmt: skip


class TestRandomBitsKernelGpu(RandomBitsKernelTest):
    pass


class TestRandomBitsKernelInterpret(RandomBitsKernelTest):
    interpret = True
