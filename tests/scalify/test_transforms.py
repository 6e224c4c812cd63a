"""scalify under and around jit, grad and vmap; control flow; custom derivatives; stochastic scale
rounding; composition with fpemu.emulate; the coverage table."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu
import fpemu.scalify as jsa
from fpemu._emulate.registry import PRIMITIVES  # the primitives emulate handles
from fpemu.scalify import core
from fpemu.testing import assert_bit_exact

RNG = np.random.default_rng(99)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 3)).astype(np.float32)


def sa(value, scale=2.0):
    """``value`` as a ScaledArray with scale ``scale`` (a power of two: the data is exact)."""
    return jsa.ScaledArray(jnp.asarray(value) / np.float32(scale), jnp.float32(scale))


def loss(w, x):
    return jnp.sum(jax.nn.relu(x @ w) ** 2)


def close(a, b, rtol=1e-6):
    np.testing.assert_allclose(np.asarray(jsa.asarray(a), np.float64), np.asarray(b, np.float64), rtol=rtol, atol=1e-6)


def test_value_semantics_and_jit_both_orders():
    ref = loss(W, X)
    out = jsa.scalify(loss)(sa(W, 4.0), sa(X, 0.5))
    assert isinstance(out, jsa.ScaledArray)
    close(out, ref)
    close(jax.jit(jsa.scalify(loss))(sa(W, 4.0), sa(X, 0.5)), ref)
    close(jsa.scalify(jax.jit(loss))(sa(W, 4.0), sa(X, 0.5)), ref)


@pytest.mark.long
def test_scalify_of_grad_propagates_scales_through_the_backward_pass():
    ref = jax.grad(loss)(W, X)
    grads = jsa.scalify(jax.grad(loss))(sa(W, 4.0), sa(X, 0.5))
    assert isinstance(grads, jsa.ScaledArray)
    close(grads, ref, rtol=1e-5)
    close(jax.jit(jsa.scalify(jax.grad(loss)))(sa(W, 4.0), sa(X, 0.5)), ref, rtol=1e-5)


def test_grad_of_scalify_differentiates_the_scaled_program():
    def f(w):
        return jsa.asarray(jsa.scalify(loss)(jsa.ScaledArray(w, jnp.float32(4.0)), sa(X, 0.5)))

    close(jax.grad(f)(jnp.asarray(W) / 4), jax.grad(loss)(W, X) * 4, rtol=1e-5)  # d/d data = d/d value * scale


def test_vmap_both_orders():
    xs = np.stack([X, 2 * X])
    ref = jax.vmap(lambda x: loss(W, x))(xs)
    scaled = jsa.ScaledArray(jnp.asarray(xs) * 2, jnp.float32(0.5))
    out = jax.vmap(jsa.scalify(lambda x, w: loss(w, x)), in_axes=(jsa.ScaledArray(0, None), None))(scaled, sa(W, 4.0))
    close(out, ref, rtol=1e-5)
    out = jsa.scalify(jax.vmap(lambda x, w: loss(w, x), in_axes=(0, None)))(scaled, sa(W, 4.0))
    close(out, ref, rtol=1e-5)


def test_custom_jvp_and_custom_vjp_keep_their_rules():
    @jax.custom_jvp
    def clipped(x):
        return jnp.clip(x, -1.0, 1.0)

    clipped.defjvp(lambda p, t: (clipped(p[0]), t[0] * 10.0))  # a deliberately different derivative

    @jax.custom_vjp
    def doubled(x):
        return x * 2.0

    doubled.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g * 3.0,))

    x = jnp.asarray(X[0])
    for fn, slope in ((clipped, 10.0), (doubled, 3.0)):
        g = jax.grad(lambda v: jsa.asarray(jsa.scalify(lambda u: fn(u).sum())(jsa.ScaledArray(v, jnp.float32(2)))))(x)  # noqa: B023 - called in this iteration
        close(g, np.full(8, slope * 2))  # d/d data = slope * scale
        g = jsa.scalify(jax.grad(lambda u: fn(u).sum()))(sa(x, 2.0))  # noqa: B023 - called in this iteration
        close(g, np.full(8, slope))
    close(jsa.scalify(clipped)(sa(x, 2.0)), np.clip(X[0], -1, 1))


def test_a_custom_vmap_function_is_its_body():
    """``jax.custom_batching.custom_vmap``: the function scalified in place, as its body is."""
    body = lambda v: jnp.tanh(v * 2.0) + v

    @jax.custom_batching.custom_vmap
    def f(v):
        return body(v)

    @f.def_vmap
    def _negated(axis_size, in_batched, v):  # a different rule, which scalify must not call
        return -v, in_batched[0]

    out, ref = jsa.scalify(f)(sa(X, 0.5)), jsa.scalify(body)(sa(X, 0.5))
    for got, want in ((out.data, ref.data), (out.scale, ref.scale)):
        assert_bit_exact(got, want, nan_payload=True)
    close(out, np.tanh(X * 2) + X)


def test_control_flow():
    scaled = sa(X, 0.5)

    def scanned(x):
        def step(c, row):
            c = c + row * row
            return c, c.sum()

        return lax.scan(step, jnp.zeros(8, jnp.float32), x)

    (carry, ys), (ref_carry, ref_ys) = jsa.scalify(scanned)(scaled), scanned(X)
    assert isinstance(carry, jsa.ScaledArray) and isinstance(ys, jsa.ScaledArray)
    close(carry, ref_carry, 1e-5)
    close(ys, ref_ys, 1e-5)

    def loop(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0 + x), (0, x))[1]

    out = jsa.scalify(loop)(scaled)
    close(out, loop(X))

    def branch(p, x):
        return lax.cond(p, lambda v: v * 4.0, lambda v: jnp.tanh(v), x)

    for p in (True, False):
        out = jsa.scalify(branch)(p, scaled)
        assert isinstance(out, jsa.ScaledArray)
        close(out, branch(p, X), 1e-6)
    close(jsa.scalify(jax.checkpoint(lambda x: jnp.sin(x) * x))(scaled), np.sin(X) * X, 1e-6)


def test_jit_cache_key_includes_the_config():
    f = jax.jit(lambda x: x + x)
    s = sa(X, 1.0)
    assert (
        float(
            jsa.scalify(f)(
                s,
            ).scale
        )
        == 1.0
    )  # sqrt(2) rounded down
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.UP):
        assert float(jsa.scalify(f)(s).scale) == 2.0
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.NONE):
        assert float(jsa.scalify(f)(s).scale) == np.float32(np.sqrt(np.float32(2)))


def test_stochastic_scale_rounding_is_reproducible():
    x = sa(X, 1.0)  # x + x: scale sqrt(2), rounded to 1 or 2
    with jsa.ScalifyConfig(rounding_mode=jsa.Pow2RoundMode.STOCHASTIC, seed=3):
        scales = [float(jsa.scalify(lambda v: v + v)(sa(X * s, s)).scale) / s for s in 2.0 ** np.arange(-6, 6)]
        again = [float(jsa.scalify(lambda v: v + v)(sa(X * s, s)).scale) / s for s in 2.0 ** np.arange(-6, 6)]
        keyed = jsa.scalify(lambda v: v + v, key=jax.random.key(1))(x)
    assert scales == again and set(scales) == {1.0, 2.0}
    assert float(keyed.scale) in (1.0, 2.0)


@pytest.mark.long
def test_composes_with_emulate():
    # fp16 data, float32 scales, e4m3fn matmul operands: emulate rounds the data of the scalified program
    x16, w16 = sa(X, 0.5).astype(jnp.float16), sa(W, 4.0).astype(jnp.float16)
    policy = fpemu.Policy(default=None, dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e4m3fn", accumulate="fp32"))
    out = fpemu.emulate(jsa.scalify(lambda a, b: a @ b), policy)(x16, w16)
    q = lambda v: fpemu.quantize(v.astype(jnp.float32), "e4m3fn").astype(jnp.float16)
    ref = jsa.scalify(lambda a, b: a @ b)(
        jsa.ScaledArray(q(x16.data), x16.scale), jsa.ScaledArray(q(w16.data), w16.scale)
    )
    close(out, jsa.asarray(ref, jnp.float32), 1e-3)


def test_coverage_table_covers_emulate():
    table = core.rule_table()
    handled_by_emulate = [name for names in PRIMITIVES.values() for name in names]
    missing = sorted(name for name in handled_by_emulate if name not in table)
    assert missing == []


def test_shard_map_runs_its_body_on_the_unscaled_values():
    """The fallback: operands unscaled, the body run per shard as written, float results with scale 1."""
    mesh = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    P = jax.sharding.PartitionSpec

    def f(x, w):
        def body(xs, ws):
            return lax.psum(xs @ ws, "d") * 2.0

        return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "d"), P("d", None)), out_specs=P())(x, w)

    out = jsa.scalify(f)(sa(X, 4.0), sa(W, 0.5))
    assert isinstance(out, jsa.ScaledArray)
    assert float(out.scale) == 1.0
    # The body saw exactly X and W (power-of-two scales): the same bits as f on the plain arrays.
    np.testing.assert_array_equal(np.asarray(out.data), np.asarray(jax.jit(f)(X, W)))


def test_sharding_constraints_and_reshards_keep_the_scale():
    explicit = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    auto = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = jax.sharding.PartitionSpec("d")

    def constrained(x):
        return lax.with_sharding_constraint(x, jax.sharding.NamedSharding(auto, rows))

    def resharded(x):
        return jax.sharding.reshard(x, jax.sharding.NamedSharding(explicit, rows))

    for f in (constrained, resharded):
        assert any(e.primitive.name in ("sharding_constraint", "reshard") for e in jax.make_jaxpr(f)(X).eqns)
        out = jax.jit(jsa.scalify(f))(sa(X, 8.0))
        assert float(out.scale) == 8.0
        np.testing.assert_array_equal(np.asarray(out.data), X / np.float32(8.0))
