"""fpemu._ops.fusion: materialized arrays, and scalars computed together, are the same values, with the
identity's derivative."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._ops.fusion import (
    MATERIALIZE_MIN_SIZE,
    REORDERED_MIN_SIZE,
    computed_once,
    computed_together,
    materialize,
    shared_probe,
)
from fpemu.testing import assert_bit_exact


@pytest.mark.parametrize("first", [0.0, -0.0, 2.5, np.nan])  # either branch of the identity conditional
def test_materialize_keeps_the_bits_and_the_derivative(first):
    x = jnp.asarray(np.array([first, -1.5, np.inf, 3e-45], np.float32))  # NaN, inf and a subnormal kept
    flags, counts = x > 0, jnp.arange(4, dtype=jnp.int32)
    y, f, c = jax.jit(materialize)((x, flags, counts))
    assert_bit_exact(y, x)
    assert np.array_equal(f, flags) and np.array_equal(c, counts)
    grad = jax.jit(jax.grad(lambda v: jnp.sum(materialize((v,))[0] * jnp.float32(3))))(x)
    assert_bit_exact(grad, np.full(4, 3.0, np.float32))
    _, tangent = jax.jvp(lambda v: materialize((v, v > 0))[0], (x,), (jnp.arange(4.0, dtype=jnp.float32),))
    assert_bit_exact(tangent, np.arange(4.0, dtype=np.float32))


@pytest.mark.long
def test_computed_once_materializes_large_arrays_only():
    small = jnp.ones(MATERIALIZE_MIN_SIZE - 1)
    large = jnp.ones(MATERIALIZE_MIN_SIZE)
    assert computed_once(small) is small
    assert "cond" in str(jax.make_jaxpr(computed_once)(large)) and "cond" not in str(
        jax.make_jaxpr(computed_once)(small)
    )
    batched = jax.vmap(jax.grad(lambda v: jnp.sum(computed_once(v) ** 2)))(jnp.full((2, MATERIALIZE_MIN_SIZE), 1.5))
    assert_bit_exact(batched, np.full((2, MATERIALIZE_MIN_SIZE), 3.0, np.float32))


def test_computed_once_materializes_reordered_arrays_from_their_own_size():
    """An array its consumer reads in another order is materialized from `REORDERED_MIN_SIZE`
    elements, far below `MATERIALIZE_MIN_SIZE`; the same bits."""
    assert REORDERED_MIN_SIZE < MATERIALIZE_MIN_SIZE
    small, large = jnp.ones(REORDERED_MIN_SIZE - 1), jnp.arange(REORDERED_MIN_SIZE, dtype=jnp.float32)
    assert computed_once(small, reordered=True) is small
    assert computed_once(large) is large
    assert "cond" in str(jax.make_jaxpr(lambda v: computed_once(v, reordered=True))(large))
    assert_bit_exact(jax.jit(lambda v: computed_once(v, reordered=True))(large), np.asarray(large))


@pytest.mark.parametrize("probe", [0, 7])  # either branch of the identity conditional
def test_materialize_with_a_probe_keeps_the_bits_and_the_derivative(probe):
    x = jnp.asarray(np.array([0.0, -1.5, np.inf, 3e-45], np.float32))
    p = jnp.asarray(np.uint32(probe)).reshape(1, 1)
    (y,) = jax.jit(lambda v, q: materialize((v,), probe=q))(x, p)
    assert_bit_exact(y, x)
    assert "cond" in str(jax.make_jaxpr(lambda v, q: materialize((v,), probe=q))(x, p))
    grad = jax.jit(jax.grad(lambda v: jnp.sum(materialize((v,), probe=p)[0] * jnp.float32(3))))(x)
    assert_bit_exact(grad, np.full(4, 3.0, np.float32))


def test_alike_materializations_share_one_traced_materialization():
    """Arrays of the same shapes and dtypes are materialized by one traced (and lowered) call, its
    custom derivative and conditional inside, called at each site; the program keeps a conditional on
    CPU and the values are unchanged."""

    def f(x, y):
        a = materialize((x * jnp.float32(2),))[0]
        b = materialize((y + jnp.float32(1),))[0]
        c = materialize((x.reshape(-1),))[0]
        return a, b, c

    x, y = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), jnp.ones((2, 3), jnp.float32)
    sites = [e.params["jaxpr"] for e in jax.make_jaxpr(f)(x, y).jaxpr.eqns if "jaxpr" in e.params]
    assert len(sites) == 3 and sites[0] is sites[1] and sites[2] is not sites[0]
    assert [e.primitive.name for e in sites[0].jaxpr.eqns] == ["custom_jvp_call"]
    a, b, c = jax.jit(f)(x, y)
    assert_bit_exact(a, x * 2)
    assert_bit_exact(b, y + 1)
    assert_bit_exact(c, x.reshape(-1))
    if jax.default_backend() == "cpu":
        assert "conditional" in jax.jit(f).lower(x, y).compile().as_text()


def test_shared_probe_is_whether_the_first_usable_arrays_first_element_is_zero():
    # the first non-empty numeric or boolean JAX array; NumPy constants (they would fold the predicate
    # away), empty arrays and typed keys are passed over; None where nothing can give a probe
    key, empty = jax.random.key(0), jnp.zeros((0, 3), jnp.float32)
    host = np.zeros(3, np.float32)
    for values, expected in [
        ((host, key, empty, jnp.asarray([[0.0, 1.0]]), jnp.ones(2)), True),
        ((jnp.asarray([-0.0, 1.0]),), True),
        ((jnp.asarray([np.nan, 0.0]),), False),
        ((jnp.asarray([3], jnp.int32),), False),
        ((jnp.asarray([False, True]),), True),
        ((jnp.asarray(2.5, jnp.bfloat16),), False),
    ]:
        probe = shared_probe(values)
        assert probe.dtype == jnp.bool_ and probe.shape == (1,)
        assert bool(probe[0]) is expected, values
    assert shared_probe((host, key, empty, 1.0)) is None
    assert shared_probe(()) is None


def test_a_batched_probe_leaves_a_shared_array_unbatched():
    # under vmap, the probe batched (a shared probe made from a batched argument) and one of the arrays not:
    # that array stays one array, not a copy per example (JAX's own rule would turn the conditional into a
    # select of both branches, every array broadcast to the batch), and the batched one stays batched
    w = jnp.asarray(np.linspace(-2.0, 2.0, 32, dtype=np.float32).reshape(4, 8))
    xs = jnp.asarray(np.linspace(-1.0, 1.0, 96, dtype=np.float32).reshape(3, 4, 8))

    def f(x):
        return materialize((w, x), shared_probe((x,)))

    mw, mx = jax.jit(jax.vmap(f, out_axes=(None, 0)))(xs)  # out_axes None: refused if the weight were batched
    assert_bit_exact(mw, w)
    assert_bit_exact(mx, xs)
    assert "cond[" in str(jax.make_jaxpr(jax.vmap(f, out_axes=(None, 0)))(xs))  # still a conditional


@pytest.mark.parametrize("value", [0.0, -0.0, 3e-45, np.inf, np.nan, -np.nan])
def test_computed_together_keeps_the_bits_and_the_derivative(value):
    """Scalars stacked behind one optimization barrier: the same bits (NaN payload and -0 included),
    the identity's derivative, under jit, grad and vmap."""
    raw = np.array([value, 1.5], np.float32).reshape(2, 1, 1)
    raw.view(np.uint32)[0] |= np.uint32(5) if np.isnan(value) else np.uint32(0)  # a NaN payload kept too
    a, b = jnp.asarray(raw[0]), jnp.asarray(raw[1])
    jaxpr = str(jax.make_jaxpr(computed_together)(a, b))
    assert jaxpr.count("optimization_barrier") == 1 and "f32[2,1,1]" in jaxpr
    x, y = jax.jit(computed_together)(a, b)
    assert_bit_exact(x, raw[0])
    assert_bit_exact(y, raw[1])
    grad = jax.grad(lambda u, v: jnp.sum(computed_together(u, v * jnp.float32(3))[1]), argnums=1)(a, b)
    assert_bit_exact(grad, np.full((1, 1), 3.0, np.float32))
    batched = jax.vmap(lambda u, v: computed_together(u, v))(jnp.arange(3.0), jnp.arange(3.0) + 1)
    assert_bit_exact(batched[1], np.arange(3.0, dtype=np.float32) + 1)


def test_computed_together_leaves_other_arrays_as_they_are():
    """Only one-element arrays of one shape and dtype are stacked: anything else comes back as it is."""
    one, two = jnp.ones((1, 1)), jnp.ones(2)
    for arrays in [(one,), (two, two), (one, jnp.ones(1)), (one, jnp.ones((1, 1), jnp.int32))]:
        out = computed_together(*arrays)
        assert all(o is a for o, a in zip(out, arrays, strict=True))


_SPECIAL_BITS = {  # NaNs with payloads (quiet and signalling, both signs), ±inf, ±0, subnormals, extremes, 1
    jnp.bfloat16: [0x7FC1, 0x7F81, 0xFFA5, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0x3F80],
    jnp.float16: [0x7E01, 0x7C01, 0xFD55, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0x3C00],
    jnp.float32: [
        0x7FC01234, 0x7F800001, 0xFFA00005, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001,
        0x807FFFFF, 0x7F7FFFFF, 0x3F800000,
    ],
    jnp.float64: [
        0x7FF8000000001234, 0x7FF0000000000001, 0xFFF4000000000005, 0x7FF0000000000000, 0xFFF0000000000000, 0,
        0x8000000000000000, 1, 0x800FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x3FF0000000000000,
    ],
}  # fmt: skip


@pytest.mark.parametrize("dtype", list(_SPECIAL_BITS), ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("probed", [False, True], ids=["own probe", "shared probe"])
def test_materialize_keeps_every_bit_of_every_float_dtype(dtype, probed, request):
    """Every special value comes back bit for bit (`fpemu.emulate` materializes the links of its chains of
    rounded sums, of any floating-point dtype): NaN payloads (a signalling NaN stays signalling), -0, ±inf
    and subnormals, whichever branch the predicate takes, under jit, vmap and grad."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        request.getfixturevalue("x64")  # float64 arrays need jax_enable_x64
    uint = np.dtype(f"uint{8 * dtype.itemsize}")
    raw = np.array(_SPECIAL_BITS[dtype.type], uint).view(dtype)
    x = jnp.asarray(raw)
    for probe in [shared_probe([jnp.zeros(2)]), shared_probe([jnp.ones(2)])] if probed else [None]:
        assert_bit_exact(jax.jit(lambda v, p=probe: materialize((v,), p)[0])(x), raw, nan_payload=True)
        batched = jax.vmap(lambda v, p=probe: materialize((v,), p)[0])(x.reshape(1, -1))
        assert_bit_exact(batched, raw.reshape(1, -1), nan_payload=True)
    finite = jnp.asarray(np.arange(4.0).astype(dtype))
    grad = jax.grad(lambda v: jnp.sum(materialize((v,))[0] * jnp.asarray(3, dtype)))(finite)
    assert_bit_exact(grad, np.full(4, 3, dtype))
