"""fpemu.scalify as a drop-in for jax-scalify 0.1.1 (issue 32): every public name with a compatible
signature (against the checked-in list jax_scalify_api.txt), integer scales, jax-scalify's calling
forms, scaled ops of the unscale fallback, and eager use on plain arrays."""

import enum
import importlib
import inspect
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fpemu.scalify as jsa
import fpemu.scalify.core
import fpemu.scalify.lax
import fpemu.scalify.ops
import fpemu.scalify.quantization
import fpemu.scalify.tree
import fpemu.scalify.utils  # noqa: F401  (each submodule imports as `import fpemu.scalify.X`)

_API = pathlib.Path(__file__).with_name("jax_scalify_api.txt")


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in _API.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, name, what = line.split(maxsplit=2)
            rows.append((module, name, what))
    return rows


def _module(name: str):
    return importlib.import_module(name.replace("jax_scalify", "fpemu.scalify", 1))


def _signature(text: str) -> inspect.Signature:
    namespace = {
        "np": np,
        "jnp": jnp,
        "Pow2RoundMode": jsa.Pow2RoundMode,
        "ScaledPrimitiveType": jsa.core.ScaledPrimitiveType,
    }
    exec(f"def stub{text}: pass", namespace)
    return inspect.signature(namespace["stub"])


def _compatible(ours: inspect.Signature, theirs: inspect.Signature) -> str | None:
    """None if every call ``theirs`` accepts is accepted by ``ours`` with the same meaning, else why not."""
    mine = list(ours.parameters.values())
    for i, p in enumerate(theirs.parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            if not any(q.kind is q.VAR_KEYWORD for q in mine):
                return "no **kwargs"
            continue
        if p.kind is p.VAR_POSITIONAL:
            if not any(q.kind is q.VAR_POSITIONAL for q in mine):
                return f"no *{p.name}"
            continue
        if i >= len(mine):
            return f"missing parameter {p.name!r}"
        q = mine[i]
        if (q.name, q.kind) != (p.name, p.kind):
            return f"parameter {i}: {q} where jax-scalify has {p}"
        if p.default is not p.empty and not (q.default is p.default or q.default == p.default):
            return f"{p.name}: default {q.default!r}, jax-scalify {p.default!r}"
    named = set(theirs.parameters)
    for q in mine:
        required = q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
        if q.name not in named and required:
            return f"extra required parameter {q.name!r}"
    return None


@pytest.mark.parametrize("module, name, what", _rows(), ids=lambda v: str(v).split("(")[0].strip()[:40])
def test_every_public_name_of_jax_scalify(module, name, what):
    obj = getattr(_module(module), name, None)
    assert obj is not None, f"{module}.{name} is missing"
    if what == "module":
        assert inspect.ismodule(obj)
    elif what == "primitive":
        assert hasattr(obj, "bind")
    elif what.startswith("enum"):
        assert issubclass(obj, enum.Enum) and what.split()[1:] == list(obj.__members__)
    elif what.startswith("("):
        reason = _compatible(inspect.signature(obj), _signature(what))
        assert reason is None, f"{module}.{name}{inspect.signature(obj)}: {reason}"


def test_version():
    assert isinstance(jsa.__version__, str) and jsa.__version__


# -- integer scales (the first rows) ------------------------------------------------------------


def int_scaled():
    x = jsa.scaled_array([1.0, 2.0], 3, dtype=np.float32)  # jax-scalify's own scaled_array: an int32 scale
    assert np.dtype(x.scale.dtype) == np.int32
    return x


def value(x):
    return np.asarray(jsa.asarray(x)).tolist()


@pytest.mark.long
def test_int_scale_through_scalify():
    x = int_scaled()
    out = jsa.scalify(lambda v: v * 2)(x)
    assert value(out) == [6.0, 12.0] and jnp.issubdtype(out.scale.dtype, jnp.floating)
    assert value(jsa.scalify(lambda a, b: a + b)(x, x)) == [6.0, 12.0]
    assert value(jsa.scalify(lambda a, b: a - b)(x, jsa.scaled_array([1.0, 1.0], np.float32(2)))) == [1.0, 4.0]
    assert value(jsa.scalify(lambda a, b: a * b)(x, x)) == [9.0, 36.0]
    assert value(jsa.scalify(lambda a: a / 2.0)(x)) == [1.5, 3.0]
    assert value(jsa.scalify(lambda a: a**2)(x)) == [9.0, 36.0]
    assert value(jsa.scalify(jnp.sqrt)(jsa.scaled_array([1.0, 4.0], 4, dtype=np.float32))) == [2.0, 4.0]
    assert value(jsa.scalify(jnp.sum)(x)) == 9.0
    assert value(jsa.scalify(lambda a: jnp.maximum(a, 0.0))(x)) == [3.0, 6.0]
    assert value(jsa.scalify(jnp.exp)(jsa.scaled_array([0.0, 0.5], 2, dtype=np.float32))) == pytest.approx(
        [1.0, np.e], rel=1e-6
    )


def test_int_scale_dot_and_casts():
    a = jsa.scaled_array(np.ones((2, 4), np.float32), 3)
    b = jsa.scaled_array(np.ones((4, 3), np.float32), 2)
    out = jsa.scalify(lambda u, v: u @ v)(a, b)
    np.testing.assert_array_equal(np.asarray(jsa.asarray(out)), np.full((2, 3), 24.0, np.float32))
    assert jnp.issubdtype(out.scale.dtype, jnp.floating)
    out = jsa.scalify(lambda u: u.astype(jnp.float16))(int_scaled())
    assert out.dtype == np.float16 and value(out) == [3.0, 6.0]
    out = jsa.ops.cast_on_forward(int_scaled(), jnp.float8_e4m3fn)
    assert np.asarray(jsa.asarray(out, np.float32)).tolist() == [3.0, 6.0]


def test_int_scale_set_scaling_rebalance_rescale():
    x = int_scaled()
    out = jsa.lax.set_scaling(x, np.float32(2))  # an integer ratio 3 // 2 gave [2, 4]
    assert value(out) == [3.0, 6.0] and float(out.scale) == 2.0
    out = jsa.lax.rebalance(x, np.int32(2))  # gave [0, 0]
    assert value(out) == [3.0, 6.0] and float(out.scale) == 6.0
    for fn in (jsa.ops.dynamic_rescale_max, jsa.ops.dynamic_rescale_l1, jsa.ops.dynamic_rescale_l2):
        out = fn(x)  # gave [0, 0]
        assert value(out) == [3.0, 6.0], fn.__name__
        assert value(jsa.scalify(fn)(x)) == [3.0, 6.0], fn.__name__
    assert value(jsa.scalify(lambda v: jsa.lax.set_scaling(v, np.float32(4)))(x)) == [3.0, 6.0]


def test_int_scale_nan_inf_unchanged():
    x = jsa.scaled_array([np.inf, np.nan, -np.inf], 3, dtype=np.float32)
    out = jsa.scalify(lambda v: v * 2)(x)
    np.testing.assert_array_equal(np.asarray(jsa.asarray(out)), [np.inf, np.nan, -np.inf])


# -- jax-scalify's calling forms -------------------------------------------------------------------------

DN = (((1,), (0,)), ((), ()))


def test_scaled_dot_general_calling_form():
    lhs = jsa.scaled_array(np.ones((2, 4), np.float32), np.float32(2))
    rhs = jsa.scaled_array(np.ones((4, 3), np.float32), np.float32(4))
    out = jsa.lax.scaled_dot_general(lhs, rhs, DN)
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 32.0, np.float32))
    assert float(out.scale) == 16.0  # 2 * 4 * pow2(sqrt(4))
    out = jsa.lax.scaled_dot_general(lhs, rhs, DN, None, np.float32)
    assert out.dtype == np.float32


def test_scaled_concatenate_and_pad_calling_forms():
    a = jsa.scaled_array([1.0, 2.0], np.float32(2))
    b = jsa.scaled_array([1.0, 2.0], np.float32(4))
    out = jsa.lax.scaled_concatenate([a, b], dimension=0)
    assert value(out) == [2.0, 4.0, 4.0, 8.0] and float(out.scale) == 4.0
    out = jsa.lax.scaled_pad(a, 0.0, [(1, 2, 0)])
    assert value(out) == [0.0, 2.0, 4.0, 0.0, 0.0] and float(out.scale) == 2.0
    assert value(jsa.lax.scaled_pad(a, 0.0, padding_config=[(0, 1, 0)])) == [2.0, 4.0, 0.0]


@pytest.mark.long
def test_public_shape_ops():
    a = jsa.scaled_array(np.arange(6, dtype=np.float32).reshape(2, 3), np.float32(2))
    L = jsa.lax
    assert value(L.scaled_reshape(a, (6,), None)) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert L.scaled_broadcast_in_dim(a, (4, 2, 3), (1, 2)).shape == (4, 2, 3)
    assert value(L.scaled_transpose(a, (1, 0))) == [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
    assert value(L.scaled_rev(a, (1,)))[0] == [4.0, 2.0, 0.0]
    assert value(L.scaled_slice(a, (0, 1), (1, 3))) == [[2.0, 4.0]]
    assert value(L.scaled_reduce_precision(a, 5, 10)) == value(a)
    out = L.scaled_reduce_window_sum(a, (1, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1))
    assert value(out) == [[2.0, 6.0], [14.0, 18.0]] and float(out.scale) == 2.0
    assert value(L.scaled_exp(jsa.scaled_array([0.0], np.float32(2)))) == [1.0]
    assert value(L.scaled_op_default_translation(lax.exp_p, [jsa.scaled_array([0.0], np.float32(2))])) == [1.0]
    out = L.scaled_set_scaling(a, np.float32(4))
    assert float(out.scale) == 4.0 and value(out) == value(a)
    assert value(L.scaled_reduce_sum(a, (1,))) == [6.0, 24.0]
    assert value(L.scaled_mul(a, a))[1] == [36.0, 64.0, 100.0]


def test_core_helpers():
    assert float(jsa.core.safe_reciprocal(np.float32(4))) == 0.25
    assert float(jsa.core.safe_reciprocal(np.float32(0))) == 0.0
    assert float(jsa.core.safe_reciprocal(jnp.float32(0))) == 0.0
    assert jsa.core.get_numpy_api(np.ones(2)) is np and jsa.core.get_numpy_api(jnp.ones(2)) is jnp
    assert isinstance(jnp.ones(2), jsa.core.ArrayTypes)


def test_utils_print_hlo_module(capsys):
    lowered = jax.jit(lambda v: v * 2).lower(jnp.ones(4, jnp.float32))
    ops = jsa.utils.parse_hlo_module(lowered)
    assert any("multiply" in op.cmd for op in ops)
    jsa.utils.print_hlo_module(lowered)
    assert "multiply" in capsys.readouterr().out


# -- registered scaled ops of the unscale fallback ------------------------------------------------------


@pytest.mark.parametrize(
    "prim, fn", [(lax.exp_p, np.exp), (lax.cos_p, np.cos), (lax.sin_p, np.sin), (lax.tanh_p, np.tanh)]
)
def test_fallback_primitives_have_a_scaled_op(prim, fn):
    scaled_op, kind = jsa.core.find_registered_scaled_op(prim)
    assert callable(scaled_op) and kind == jsa.core.ScaledPrimitiveType.FORWARD
    val = jsa.scaled_array([0.5, 1.0], np.float32(2))
    out = scaled_op(val)
    assert isinstance(out, jsa.ScaledArray) and float(out.scale) == 1.0
    np.testing.assert_allclose(np.asarray(out), fn([1.0, 2.0]), rtol=1e-6)


def test_every_fallback_primitive_has_a_scaled_op():
    table = jsa.core.rule_table()
    for name, kind in table.items():
        if kind == "unscale":
            assert jsa.core.find_registered_scaled_op(name)[0] is not None, name


def test_registered_ops_take_jax_scalify_forms():
    op, _ = jsa.core.find_registered_scaled_op(lax.dot_general_p)
    lhs = jsa.scaled_array(np.ones((2, 4), np.float32), np.float32(1))
    rhs = jsa.scaled_array(np.ones((4, 2), np.float32), np.float32(1))
    assert float(op(lhs, rhs, DN).scale) == 2.0
    op, _ = jsa.core.find_registered_scaled_op(lax.concatenate_p)
    assert op([lhs, lhs], 0).shape == (4, 4)


# -- eager use on plain arrays ---------------------------------------------------------------------------


def test_eager_identities_on_plain_arrays():
    arr = np.array([1.0, 2.0], np.float32)
    assert jsa.lax.rebalance(arr, 2) is arr
    assert jsa.lax.rebalance(arr, np.float32(2)) is arr
    assert jsa.lax.set_scaling(arr, np.float32(2)) is arr
    assert jsa.lax.stop_scaling(arr) is arr
    data, scale = jsa.lax.get_data_scale(arr)
    assert data is arr and float(scale) == 1.0
    jarr = jnp.asarray(arr)
    assert jsa.lax.rebalance(jarr, np.float32(2)) is jarr
    assert jsa.lax.set_scaling(jarr, np.float32(2)) is jarr
