"""`scalify`: run a function with every `ScaledArray` operand's scale propagated by rules.

The transform is a jaxpr interpreter on documented APIs (``jax.make_jaxpr``, ``jax.extend.core``,
``jax.tree_util``), as `fpemu.emulate` is: ``fn`` is traced on the abstract values of its inputs
(a `ScaledArray` traces as its data), then its equations are evaluated in order. An equation none
of whose operands is scaled runs unchanged; otherwise the rule registered for its primitive
(`fpemu.scalify._registry`) computes a scaled result. The interpreter tracks, as jax-scalify does,
which values are broadcast scalars and static zeros, so that ``x * 2.0`` and ``max(x, 0)`` get the
right scales.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import jax
import numpy as np

from fpemu._args import key_arg
from fpemu._engine.rng import seeds_from_key
from fpemu._jax.compat import Jaxpr, Literal, bind
from fpemu._jax.interpret import evaluate
from fpemu.scalify._arith import is_numpy
from fpemu.scalify._array import ScaledArray, all_static_zero, is_scaled_leaf, make_scaled_scalar
from fpemu.scalify._config import get_scalify_config
from fpemu.scalify._helpers import is_float, rescaled, scale_dtype_of
from fpemu.scalify._registry import (
    FALLBACK,
    JAXPR_RULES,
    STATE,
    ScaledPrimitiveType,
    State,
    default_seeds,
    registered_rule,
)
from fpemu.scalify._rules_select import unscale_compute

__all__ = ["scalify"]

# The primitives without a scale law: their operands are unscaled, the result has scale 1.
UNSCALE = FALLBACK

# Primitives whose results are broadcast scalars when all operands are (jax-scalify's list), and
# those whose results are zeros when all operands are zeros.
SCALAR_PRESERVING = frozenset(
    "abs acos acosh add asin asinh atan atan2 atanh bitcast_convert_type broadcast_in_dim cbrt ceil clamp "
    "convert_element_type exp expm1 floor integer_pow min max mul neg reduce_prod reduce_sum reduce_max "
    "reduce_min reduce_precision reshape rem slice sin sinh sub sqrt tan tanh transpose square copy".split()
)
ZERO_PRESERVING = frozenset(
    "abs add broadcast_in_dim cbrt ceil clamp convert_element_type exp expm1 floor min max mul neg reduce_prod "
    "reduce_sum reduce_max reduce_min reduce_precision reshape slice sin sinh sub sqrt tan tanh transpose copy".split()
)


@dataclasses.dataclass(slots=True)
class Tracked:
    """A value of the interpreter: an array or `ScaledArray`, and what is known statically about it."""

    value: Any
    scalar: bool = False  # every element is the same value (a broadcast scalar)
    zero: bool = False  # every element is a static zero

    @property
    def scaled(self) -> bool:
        return isinstance(self.value, ScaledArray)


def _plain_numpy(value: Any) -> Any:
    """NumPy subclasses (JAX's literal arrays) as plain NumPy arrays."""
    if isinstance(value, ScaledArray):
        data, scale = _plain_numpy(value.data), _plain_numpy(value.scale)
        return value if data is value.data and scale is value.scale else ScaledArray(data, scale)
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        return np.asarray(value)
    return value


def track(value: Any, scalar: bool = False, zero: bool | None = None) -> Tracked:
    """Wrap a value; NumPy zeros are detected; a zero `ScaledArray` gets a static zero scale."""
    value = _plain_numpy(value)
    if zero is None:
        zero = all_static_zero(value) if (is_numpy(value) or isinstance(value, ScaledArray)) else False
    scalar = scalar or zero or int(np.prod(np.shape(value), dtype=np.int64)) == 1
    if zero and isinstance(value, ScaledArray) and not is_numpy(value.scale):
        value = ScaledArray(value.data, np.zeros((), value.scale.dtype))
    return Tracked(value, scalar, zero)


def to_scaled(t: Tracked, scale_dtype: Any) -> Any:
    """The value as a `ScaledArray` for a rule: a static zero gets scale 0, a scalar or broadcast
    scalar its own power-of-two scale, any other float array scale 1; non-floats stay as they are."""
    value = t.value
    if isinstance(value, ScaledArray) or not is_float(value.dtype):
        return value
    dtype = np.dtype(value.dtype if scale_dtype is None else scale_dtype)
    if t.zero:
        return ScaledArray(value, np.zeros((), dtype))
    if np.ndim(value) == 0:
        return make_scaled_scalar(value, dtype)
    if t.scalar:
        first = value.reshape(-1)[0]
        scale = make_scaled_scalar(first, dtype).scale
        return ScaledArray(rescaled(ScaledArray(value, np.ones((), dtype)), scale), scale)
    return ScaledArray(value, np.ones((), dtype))


def _literal(var: Literal) -> Tracked:
    value = var.val
    if not isinstance(value, jax.Array):
        value = np.asarray(value, dtype=cast("jax.core.ShapedArray", var.aval).dtype)
    return track(value)


def apply(eqn, invals: list[Tracked]) -> list[Tracked]:
    """One equation: its jaxpr rule, its scaled rule, or the primitive unchanged."""
    name = eqn.primitive.name
    jaxpr_rule = JAXPR_RULES.get(name)
    if jaxpr_rule is not None:
        return jaxpr_rule(eqn, invals)
    rule, kind = registered_rule(name)
    any_scaled = any(t.scaled for t in invals)
    scalar = all(t.scalar for t in invals) and name in SCALAR_PRESERVING
    zero = all(t.zero for t in invals) and name in ZERO_PRESERVING
    if not any_scaled and kind != ScaledPrimitiveType.ALWAYS_SCALE:
        outs = bind(eqn, [t.value for t in invals])
    else:
        dtype = get_scalify_config().scale_dtype or scale_dtype_of(*(t.value for t in invals))
        operands = [to_scaled(t, dtype) for t in invals]
        if rule is not None:
            outs = rule(*operands, **eqn.params)
            outs = list(outs) if eqn.primitive.multiple_results else [outs]
        elif name in UNSCALE:
            outs = unscale_compute(eqn.primitive, operands, eqn.params)
        else:
            raise NotImplementedError(
                f"fpemu.scalify has no scale rule for the primitive {name!r}. Unscale its operands "
                "with fpemu.scalify.lax.stop_scaling (and re-scale with set_scaling), or register one with "
                f"fpemu.scalify.core.register_scaled_op({name!r}, rule)."
            )
    return [track(v, scalar, zero if zero else None) for v in outs]


def interpret(jaxpr: Jaxpr, consts: list[Tracked], args: list[Tracked]) -> list[Tracked]:
    """Evaluate ``jaxpr`` on tracked values (the loop is the shared `fpemu._jax.interpret.evaluate`)."""
    return evaluate(jaxpr, consts, args, literal=lambda var, eqn: _literal(var), equation=apply)


def interpret_values(jaxpr: Jaxpr, consts: list, args: list) -> list:
    """`interpret` on plain values (arrays and `ScaledArray`s), returning plain values."""
    return [t.value for t in interpret(jaxpr, [track(c) for c in consts], [track(a) for a in args])]


# -- the public transform ---------------------------------------------------------------------------


def _is_input(leaf: Any) -> bool:
    return isinstance(leaf, (ScaledArray, jax.Array, np.ndarray, np.generic))


def _canonical(leaf: Any) -> Any:
    """NumPy leaves in JAX's dtypes (float64 becomes float32 unless x64 is on)."""
    if isinstance(leaf, ScaledArray):
        return ScaledArray(_canonical(leaf.data), _canonical(leaf.scale))
    if is_numpy(leaf):
        dtype = jax.dtypes.canonicalize_dtype(leaf.dtype)
        return np.asarray(leaf, dtype) if dtype != leaf.dtype else np.asarray(leaf)
    return leaf


def _aval(leaf: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype)


def scalify(fun: Callable, *, key: jax.Array | None = None) -> Callable:
    """Return ``fun`` transformed to propagate scales: called with `ScaledArray` arguments, every
    operation on them applies its scale rule and the results are `ScaledArray`s.

    Arguments may be pytrees of `ScaledArray`s, JAX and NumPy arrays (NumPy values stay static:
    their zeros are known while tracing) and other leaves (closed over as constants). Operations
    without scaled operands run unchanged, so ``scalify(f)(x)`` equals ``f(x)`` on plain arrays.
    The rules (docs/scalify.md has the table) are jax-scalify's: ``add``: ``pow2(sqrt(sa²+sb²))``,
    ``mul``: ``sa*sb``, ``dot_general``: ``sa*sb*pow2(sqrt(K))``, ``max``: the larger scale...;
    functions without a scale law (``exp``, ``tanh``...) unscale, compute and return scale 1.
    Nested ``jit``, ``scan``, ``while``, ``cond``, ``checkpoint`` and ``custom_jvp``/``custom_vjp``
    (whose derivative rules are kept) are scalified inside.

    Composition: ``jax.jit``, ``jax.grad`` and ``jax.vmap`` work around and inside ``scalify``;
    ``scalify(jax.grad(f))`` propagates scales through the backward pass too.

    Args:
      fun: the function.
      key: a JAX PRNG key for ``ScalifyConfig(rounding_mode=Pow2RoundMode.STOCHASTIC)`` (default:
        the configuration's ``seed``).

    Raises:
      NotImplementedError: an operation on a scaled operand whose primitive has no rule.

    Example:
      >>> import numpy as np
      >>> from fpemu import scalify as jsa
      >>> sa = jsa.as_scaled_array(np.array([1.0, 2.0], np.float16), scale=np.float32(2))
      >>> sb = jsa.as_scaled_array(np.array([3.0, 6.0], np.float16), scale=np.float32(4))
      >>> out = jsa.scalify(lambda a, b: a + b)(sa, sb)
      >>> out.data.tolist(), float(out.scale)    # scale pow2(sqrt(2**2 + 4**2)) = 4
      ([1.0, 2.0], 4.0)
    """
    if not callable(fun):
        raise TypeError(f"fun must be callable, got {type(fun).__name__}")
    if key is not None:
        key_arg(key, True, what="scalify")

    @functools.wraps(fun)
    def scalified(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_scaled_leaf)
        dynamic = [i for i, leaf in enumerate(leaves) if _is_input(leaf)]
        values = [_canonical(leaves[i]) for i in dynamic]

        def flat_fn(*traced):
            full = list(leaves)
            for i, value in zip(dynamic, traced):
                full[i] = value
            call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
            return fun(*call_args, **call_kwargs)

        closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*map(_aval, values))
        config = get_scalify_config()
        seeds = default_seeds(config.seed) if key is None else seeds_from_key(key)
        token = STATE.set(State(seeds))
        try:
            outs = interpret_values(closed.jaxpr, list(closed.consts), values)
        finally:
            STATE.reset(token)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)

    return scalified
