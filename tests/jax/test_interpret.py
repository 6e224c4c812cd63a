"""fpemu._jax.interpret's combinator helpers, on their own: `staged` and `switch_agreeing` (emulate's and
scalify's ``cond`` rules are built on them; tests/emulate and tests/scalify test those rules)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fpemu._jax.interpret import staged, switch_agreeing


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
