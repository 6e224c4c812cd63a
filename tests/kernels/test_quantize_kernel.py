"""The Pallas quantize kernel against the XLA path: compiled on a GPU (skipped without one) and in
interpret mode on CPU, so CI exercises the kernel."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

import fpemu
import fpemu.testing as fst
from fpemu import ROUNDING_MODES
from fpemu.kernels import QuantizeBlockSizes as BlockSizes
from fpemu.kernels import quantize_kernel

SMALL_FORMATS = [f for f in fpemu.formats() if f.bits <= 16]
# Formats whose nearest-even float32 casts in ml_dtypes are fpemu's semantics. e8m0fnu is left out:
# ml_dtypes rounds some values below its smallest normal wrongly (a documented deviation).
ML_DTYPES_FORMATS = [f.name for f in SMALL_FORMATS if f.dtype is not None and f.name != "e8m0fnu"]


def _patterns() -> np.ndarray:
    h = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])


def _assert_same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    with np.errstate(invalid="ignore"):  # signalling-NaN inputs warn in NumPy's isnan
        nan, actual_nan = np.isnan(expected), np.isnan(actual)
    np.testing.assert_array_equal(actual_nan, nan)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
    np.testing.assert_array_equal(actual[~nan].view(bits), expected[~nan].view(bits))


# CI: every format with nearest-even and stochastic rounding (the P3109 family's 28 formats, one
# layout apart, alternately with one of the two), every mode for a few formats, the saturate/subnormal
# options for one. The full cross product is behind the `slow` marker.
_P3109 = [f.name for f in SMALL_FORMATS if f.name.startswith("p3109_")]
_FAST_CASES = (
    [(f.name, m, False, True) for f in SMALL_FORMATS if f.name not in _P3109 for m in ("nearest_even", "stochastic")]
    + [(name, ("nearest_even", "stochastic")[i % 2], False, True) for i, name in enumerate(_P3109)]
    + [(f, m, False, True) for f in ("e4m3fn", "e2m1fn", "e8m0fnu") for m in ROUNDING_MODES if m not in ("nearest_even", "stochastic")]
    + [("e5m2", "toward_positive", s, sub) for s, sub in ((True, True), (False, False), (True, False))]
)  # fmt: skip
_ALL_CASES = [
    (f.name, m, s, sub) for f in SMALL_FORMATS for m, s, sub in itertools.product(ROUNDING_MODES, (False, True), (True, False))
]  # fmt: skip


def _case_id(case):
    return "-".join(str(c) for c in case)


class QuantizeKernelTest:
    """Compiled on a GPU. The interpret-mode subclass runs the same cases on CPU."""

    interpret = False

    @pytest.fixture(autouse=True)
    def _platform(self):
        if not self.interpret and jax.default_backend() != "gpu":
            pytest.skip("compiled Pallas kernels need a GPU")

    def _check(self, fmt, rounding, saturate, subnormals, x, block=1 << 16):
        kw = {"rounding": rounding, "saturate": saturate, "subnormals": subnormals}
        if rounding == "stochastic":
            kw["key"] = jax.random.key(5)
        got = quantize_kernel(x, fmt, block_sizes=BlockSizes(block=block), interpret=self.interpret, **kw)
        _assert_same(got, fpemu.quantize(x, fmt, **kw))

    @pytest.mark.parametrize("case", _FAST_CASES, ids=_case_id)
    def test_exhaustive_16_bit_inputs(self, case):
        self._check(*case, jnp.asarray(_patterns()))

    @pytest.mark.slow
    @pytest.mark.parametrize("case", _ALL_CASES, ids=_case_id)
    def test_exhaustive_16_bit_inputs_every_option(self, case):
        self._check(*case, jnp.asarray(_patterns()))

    @pytest.mark.parametrize("shape", [(), (0,), (1,), (7, 3), (1000,), (3, 1, 4097)])
    def test_ragged_shapes_and_small_blocks(self, shape):
        x = jnp.asarray(np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 300)
        self._check("e4m3fn", "stochastic", False, True, x, block=1024)

    @pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
    def test_narrow_input_dtypes(self, dtype):
        x = jnp.asarray(np.arange(1 << 16, dtype=np.uint16).view(jnp.dtype(dtype)))
        self._check("e4m3fn", "nearest_even", False, True, x)

    # Every example compiles the kernel for a new shape (and interprets it on CPU): few examples.
    @pytest.mark.long
    @settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_ragged_float32_arrays_against_xla_and_ml_dtypes(self, data):
        fmt = fpemu.get_format(data.draw(st.sampled_from(ML_DTYPES_FORMATS), label="fmt"))
        shape = data.draw(npst.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=13), label="shape")
        elements = st.one_of(fst.boundaries(fmt), st.floats(width=32, allow_nan=True, allow_infinity=True))
        x = data.draw(fst.arrays("fp32", shape, elements=elements), label="x")
        got = quantize_kernel(jnp.asarray(x), fmt, block_sizes=BlockSizes(block=256), interpret=self.interpret)
        _assert_same(got, fpemu.quantize(jnp.asarray(x), fmt))
        with np.errstate(over="ignore", invalid="ignore"):  # the host cast of out-of-range values
            host = x.astype(fmt.dtype).astype(np.float32)
        # ml_dtypes turns NaN into a number in formats without NaN; fpemu keeps it NaN (documented).
        keep = ~np.isnan(x) if not fmt.has_nan else np.ones(x.shape, bool)
        _assert_same(np.asarray(got)[keep], host[keep])

    @pytest.mark.long
    def test_float64_inputs(self, x64):
        """With x64 on, float64 arrays are rounded once from their float64 value, in the kernel too:
        1 + 2**-4 + 2**-40 is above the e4m3fn tie 1 + 2**-4 only in float64 (it rounds up).
        Compiled, float64 is refused (Pallas cannot lower its rounding to Triton: the strict xfail in
        test_triton_lowering.py); on a GPU this test checks that refusal, which it once ran into."""
        x = np.random.default_rng(4).standard_normal(3000) * 300
        x[:5] = [1 + 2**-4 + 2**-40, 1 + 2**-4, np.nan, -np.inf, 2.0**-1070]
        x = jnp.asarray(x, jnp.float64)
        if not self.interpret:
            with pytest.raises(ValueError, match="x: float64 input does not compile.*use fpemu.quantize"):
                quantize_kernel(x, "e4m3fn", interpret=False)
            return
        for fmt, rounding in (("e4m3fn", "nearest_even"), ("fp32", "nearest_even"), ("bf16", "stochastic"),
                              ("e2m1fn", "toward_zero")):  # fmt: skip
            self._check(fmt, rounding, False, True, x, block=1024)
        assert quantize_kernel(x[:2], "e4m3fn", interpret=self.interpret).tolist() == [1.125, 1.0]

    def test_stochastic_bits_do_not_depend_on_the_block_size(self):
        x = jnp.asarray(np.random.default_rng(2).standard_normal(5000).astype(np.float32))
        kw = {"rounding": "stochastic", "key": jax.random.key(9), "interpret": self.interpret}
        a = quantize_kernel(x, "e2m1fn", block_sizes=BlockSizes(block=256), **kw)
        b = quantize_kernel(x, "e2m1fn", block_sizes=BlockSizes(block=4096), **kw)
        _assert_same(a, b)

    def test_errors_name_the_argument(self):
        with pytest.raises(ValueError, match="block=3 must be a positive power of two"):
            BlockSizes(block=3)
        with pytest.raises(TypeError, match="block_sizes must be"):
            quantize_kernel(jnp.ones(4), "e4m3fn", block_sizes=1024, interpret=self.interpret)
        with pytest.raises(ValueError, match="rounding must be one of"):
            quantize_kernel(jnp.ones(4), "e4m3fn", rounding="up", interpret=self.interpret)
        with pytest.raises(TypeError, match="integer"):
            quantize_kernel(jnp.ones(4, jnp.int32), "e4m3fn", interpret=self.interpret)
        with pytest.raises(TypeError, match="interpret must be a bool or None"):
            quantize_kernel(jnp.ones(4), "e4m3fn", interpret="yes")
        if jax.default_backend() != "gpu":  # on a GPU, test_float64_inputs checks the compiled refusal
            with pytest.raises(ValueError, match="interpret=False: fpemu.kernels.quantize_kernel compiles for GPUs"):
                quantize_kernel(jnp.ones(4), "e4m3fn", interpret=False)


class TestQuantizeKernelGpu(QuantizeKernelTest):
    pass


class TestQuantizeKernelInterpret(QuantizeKernelTest):
    interpret = True
