"""fpemu._jax.interpret's helpers, on their own: `staged` and `switch_agreeing` (emulate's and scalify's
``cond`` rules are built on them), `original_jvp` and `original_vjp` (their custom-derivative rules);
tests/emulate and tests/scalify test those rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._jax.interpret import original_jvp, original_vjp, staged, switch_agreeing


def test_staged_replays_the_traced_function_on_pytrees():
    calls = []

    def fn(x, pair):
        calls.append(1)
        a, b = pair
        return {"sum": x + a, "prod": (x * b, None)}

    x, pair = jnp.arange(3.0), (jnp.float32(2.0), jnp.ones(3) * 3)
    replay, shapes = staged(fn, x, pair)
    assert shapes["sum"] == jax.ShapeDtypeStruct((3,), jnp.float32)
    assert shapes["prod"][1] is None
    got = replay(x * 2, (jnp.float32(-1.0), pair[1]))
    np.testing.assert_array_equal(got["sum"], np.arange(3.0) * 2 - 1)
    np.testing.assert_array_equal(got["prod"][0], np.arange(3.0) * 2 * 3)
    assert len(calls) == 1  # traced once; the replay does not call fn again


@pytest.mark.parametrize("index", [0, 1, 2])
def test_switch_agreeing_brings_every_branch_to_one_structure(index):
    """Three branches whose dicts have different keys: ``agree`` pads each to the union (in order of
    the branches), as emulate's cond pads its statistics; each branch is traced once."""
    traced = []

    def branch(keys, scale):
        def fn(x):
            traced.append(keys)
            return {k: x * scale for k in keys}

        return fn

    branches = [branch(("a",), 1.0), branch(("b", "a"), 2.0), branch((), 3.0)]

    def agree(shapes):
        names = list(dict.fromkeys(k for s in shapes for k in s))
        assert names == ["a", "b"]
        return lambda out: {k: out.get(k, jnp.zeros(3)) for k in names}

    x = jnp.arange(3.0) + 1
    got = jax.jit(lambda i, x: switch_agreeing(i, branches, [x], agree))(index, x)
    assert sorted(got) == ["a", "b"]
    scale = (1.0, 2.0, 3.0)[index]
    expected = {"a": x * scale if index in (0, 1) else np.zeros(3), "b": x * scale if index == 1 else np.zeros(3)}
    for k in ("a", "b"):
        np.testing.assert_array_equal(got[k], expected[k])
    assert sorted(traced) == [(), ("a",), ("b", "a")]  # each branch traced once


# -- the original derivative rules -------------------------------------------------------------------


@jax.custom_jvp
def _scaled_by_count(x, n):
    return x * n.astype(x.dtype)


@_scaled_by_count.defjvp
def _scaled_by_count_jvp(primals, tangents):  # not the derivative of the primal: 10 dx, to be told apart
    x, n = primals
    dx, _ = tangents
    return _scaled_by_count(x, n), 10.0 * dx


@jax.custom_vjp
def _reversed(x, n):
    return x * n.astype(x.dtype)


def _reversed_fwd(x, n):
    return _reversed(x, n), n


def _reversed_bwd(n, g):  # not the derivative of the primal either: -g
    return -g, np.zeros(np.shape(n), jax.dtypes.float0)


_reversed.defvjp(_reversed_fwd, _reversed_bwd)


def _equation(fn, *args):
    (eqn,) = jax.make_jaxpr(fn)(*args).jaxpr.eqns
    return eqn


def test_original_jvp_is_the_custom_rule_and_fills_integer_tangents():
    x, n = jnp.array([1.0, -2.0], jnp.float32), jnp.int32(3)
    eqn = _equation(_scaled_by_count, x, n)
    assert eqn.primitive.name == "custom_jvp_call"
    (tangent,) = original_jvp(eqn, [x, n], [jnp.array([0.5, 2.0], jnp.float32), None])
    np.testing.assert_array_equal(tangent, np.array([5.0, 20.0], np.float32))  # 10 dx, not 3 dx


def test_original_vjp_is_the_custom_rule():
    x, n = jnp.array([1.0, -2.0], jnp.float32), jnp.int32(3)
    eqn = _equation(_reversed, x, n)
    assert eqn.primitive.name == "custom_vjp_call"
    dx, dn = original_vjp(eqn, [x, n], [jnp.array([0.5, 2.0], jnp.float32)])
    np.testing.assert_array_equal(dx, np.array([-0.5, -2.0], np.float32))  # -g, not 3 g
    assert dn.dtype == jax.dtypes.float0
