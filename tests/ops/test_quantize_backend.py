"""`fpemu.quantize(backend=...)`: the choice of engine, its errors, and the Pallas engine wired
through the public path (gradient, jit, vmap, float64 host input).

On CPU the Pallas engine runs in interpret mode ("pallas_interpret", the internal engine name);
the compiled engine is checked on a GPU (skipped without one).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fpemu
from fpemu._engine.convert import ROUNDING_MODES
from fpemu._ops import quantize as _quantize


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _inputs(n=3000, seed=0) -> jax.Array:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * np.float32(300)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-30, 3e38]
    return jnp.asarray(x)


def _engine_quantize(x, fmt, engine, rounding="nearest_even", key=None):
    spec = _quantize.rounding_spec(fmt, rounding, False, True, key, None)
    return _quantize.quantize_with_spec(x, _quantize.seeds_for(spec, key), spec, engine)


@pytest.mark.parametrize("platform", ["cpu", "gpu", "tpu", "some_future_platform"])
def test_auto_picks_a_backend_that_runs_on_the_platform(platform):
    engine = _quantize.resolve_backend("auto", platform)
    assert engine in ("xla", "pallas")
    if platform != "gpu":
        assert engine == "xla"


def test_explicit_backends():
    assert _quantize.resolve_backend("xla", "cpu") == "xla"
    assert _quantize.resolve_backend("pallas", "gpu") == "pallas"


def test_float64_input_falls_back_or_is_refused():
    assert _quantize.resolve_backend("auto", "gpu", float64=True) == "xla"
    assert _quantize.resolve_backend("xla", "gpu", float64=True) == "xla"
    with pytest.raises(ValueError, match=r"backend='pallas' does not take float64 input.*backend='xla'"):
        _quantize.resolve_backend("pallas", "gpu", float64=True)


@pytest.mark.parametrize("platform", ["cpu", "tpu"])
def test_pallas_off_a_gpu_says_why_and_what_to_do(platform):
    with pytest.raises(ValueError, match=rf"backend='pallas' needs a GPU.*Triton.*'{platform}'.*interpret=True"):
        _quantize.resolve_backend("pallas", platform)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks the error raised on CPU")
def test_public_quantize_refuses_pallas_on_cpu():
    with pytest.raises(ValueError, match="backend='pallas' needs a GPU"):
        fpemu.quantize(jnp.ones(3), "e4m3fn", backend="pallas")


@pytest.mark.parametrize("backend", ["cuda", "Pallas", "", None, 1])
def test_unknown_backend_lists_the_choices(backend):
    with pytest.raises(ValueError, match=r"backend must be one of 'auto', 'xla', 'pallas'"):
        fpemu.quantize(jnp.ones(3), "e4m3fn", backend=backend)


# The kernel itself is checked for every format and option in tests/kernels; this checks the wiring.
@pytest.mark.parametrize("fmt", ["e4m3fn", "e2m1fn", "bf16"])
@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic"])
def test_pallas_engine_equals_xla_engine(fmt, rounding):
    x = _inputs()
    key = jax.random.key(3) if rounding == "stochastic" else None
    got = _engine_quantize(x, fmt, "pallas_interpret", rounding, key)
    expected = fpemu.quantize(x, fmt, rounding=rounding, key=key, backend="xla")
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_pallas_engine_gradient_is_straight_through():
    x = _inputs(40)
    grad = jax.grad(lambda v: (_engine_quantize(v, "e4m3fn", "pallas_interpret") * jnp.arange(40.0)).sum())(x)
    np.testing.assert_array_equal(np.asarray(grad), np.arange(40.0, dtype=np.float32))


def test_pallas_engine_under_vmap_matches_xla_under_vmap():
    x = _inputs(600).reshape(3, 200)
    key = jax.random.key(1)
    got = jax.vmap(lambda r: _engine_quantize(r, "e5m2", "pallas_interpret", "stochastic", key))(x)
    expected = jax.vmap(lambda r: fpemu.quantize(r, "e5m2", rounding="stochastic", key=key, backend="xla"))(x)
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@pytest.mark.long
def test_pallas_engine_rounds_host_float64_once():
    # 1 + 2**-4 + 2**-30 is above the e4m3fn tie 1.0625 only in float64: float32 would round it to the tie.
    x = np.array([1 + 2.0**-4 + 2.0**-30, -(1 + 2.0**-4)], np.float64)
    spec = _quantize.rounding_spec("e4m3fn", "nearest_even", False, True, None, None)
    got = _quantize._quantize_host_float64(x, spec, _quantize.seeds_for(spec, None), "pallas_interpret")
    assert got.dtype == jnp.float32
    assert np.asarray(got).tolist() == [1.125, -1.0]
    np.testing.assert_array_equal(_bits(got), _bits(fpemu.quantize(x, "e4m3fn", backend="xla")))


def _patterns() -> jax.Array:
    h = np.arange(1 << 16, dtype=np.uint16)
    return jnp.asarray(
        np.concatenate([h.view(np.float16).astype(np.float32), (h.astype(np.uint32) << 16).view(np.float32)])
    )


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="compiled Pallas kernels need a GPU")
@pytest.mark.parametrize("fmt", [f.name for f in fpemu.formats() if f.bits <= 16], ids=str)
def test_gpu_pallas_backend_equals_xla_on_every_16_bit_input(fmt):
    x = _patterns()
    for rounding, saturate, subnormals in itertools.product(ROUNDING_MODES, (False, True), (True, False)):
        key = jax.random.key(11) if rounding == "stochastic" else None
        kw = {"rounding": rounding, "key": key, "saturate": saturate, "subnormals": subnormals}
        got = fpemu.quantize(x, fmt, backend="pallas", **kw)
        expected = fpemu.quantize(x, fmt, backend="xla", **kw)
        np.testing.assert_array_equal(_bits(got), _bits(expected), err_msg=str(kw))
