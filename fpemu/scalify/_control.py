"""Rules of `scalify` for equations that hold jaxprs: nested ``jit``, inlined calls, ``scan``,
``while``, ``cond``, ``checkpoint``, ``custom_jvp``/``custom_vjp`` (derivative rules kept) and
debug callbacks. Each rebuilds the public combinator around a scalified body; the bodies are opened,
the operands split and the combinators take the equation's parameters through the interpreter core
shared with `fpemu.emulate` (`fpemu._jax.interpret`). Also the equations that place data
(``device_put``, ``reshard``, ``layout_constraint``) and the ``shard_map`` fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._jax.compat import bind
from fpemu._jax.interpret import (
    JitCache,
    body_of,
    checkpoint_like,
    cond_parts,
    float0_zeros,
    original_jvp,
    original_vjp,
    scan_like,
    scan_parts,
    switch_agreeing,
    while_parts,
)
from fpemu.scalify._arith import add, mul
from fpemu.scalify._array import ScaledArray
from fpemu.scalify._config import get_scalify_config
from fpemu.scalify._helpers import is_float, rescaled, safe_div, unscale
from fpemu.scalify._interpreter import Tracked, interpret, interpret_values, track
from fpemu.scalify._pow2 import Pow2RoundMode
from fpemu.scalify._registry import register_jaxpr_rule


def _values(invals: list[Tracked]) -> list:
    return [t.value for t in invals]


def _plain(eqn, invals: list[Tracked]) -> list[Tracked] | None:
    """The equation bound unchanged when no operand is scaled (None otherwise)."""
    if any(t.scaled for t in invals):
        return None
    return [track(v) for v in bind(eqn, _values(invals))]


# -- calls ---------------------------------------------------------------------------------------------


@register_jaxpr_rule("call", "closed_call", "eval_jaxpr", "composite", "custom_vmap_call", kind="inline")
def inline_call(eqn, invals: list[Tracked]) -> list[Tracked]:
    """The body interpreted in place (a ``custom_vmap`` function's: its function, the batching rule not
    kept)."""
    jaxpr, consts = body_of(eqn)
    return interpret(jaxpr, [track(c) for c in consts], invals)


_JITTED = JitCache()


@register_jaxpr_rule("jit", kind="call")
def nested_jit(eqn, invals: list[Tracked]) -> list[Tracked]:
    """``jax.jit`` around the scalified body, cached per body, per which operands are scaled (and
    known scalars or zeros) and per `ScalifyConfig`: the configuration is part of the cache key.
    Under stochastic scale rounding the body is inlined (its keys depend on the call)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    jaxpr, consts = body_of(eqn)
    config = get_scalify_config()
    if config.rounding_mode == Pow2RoundMode.STOCHASTIC:
        return interpret(jaxpr, [track(c) for c in consts], invals)
    flags = tuple((t.scalar, t.zero) for t in invals)

    def make() -> Callable:
        def body(values):
            args = [track(v, s, z if z else None) for v, (s, z) in zip(values, flags)]
            outs = interpret(jaxpr, [track(c) for c in consts], args)
            return [t.value for t in outs]

        return body

    return [track(v) for v in _JITTED.get(eqn.params, (flags, config), make)(_values(invals))]


# -- making branch and loop outputs agree -------------------------------------------------------------


def _structure(value: Any) -> tuple:
    """(scaled?, scale dtype) of a value or an abstract value."""
    if isinstance(value, ScaledArray):
        return True, np.dtype(value.scale.dtype)
    return False, None


def _conform(value: Any, like: tuple) -> Any:
    """``value`` with the structure ``like``: scaled (scale 1 if it was not) with that scale dtype."""
    scaled, dtype = like
    if not scaled:
        return unscale(value)
    if not isinstance(value, ScaledArray):
        return ScaledArray(value, jnp.ones((), dtype))
    if value.scale.dtype != dtype:
        return ScaledArray(value.data, value.scale.astype(dtype))
    return value


def _joined(structures: list[tuple]) -> tuple:
    scaled = [s for s in structures if s[0]]
    if not scaled:
        return False, None
    dtypes = {s[1] for s in scaled}
    return True, dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)


def _with_scale(value: Any, like: tuple) -> Any:
    """A loop's initial carry promoted to ``like`` (a scalar float carry keeps its value)."""
    if like[0] and not isinstance(value, ScaledArray) and is_float(value.dtype):
        return ScaledArray(value, np.ones((), like[1]))
    return _conform(value, like)


def _fixpoint(step: Callable, init: list) -> list:
    """``init`` promoted until ``step`` (a loop body on the carry, traced abstractly) returns
    carries of the same structure: an unscaled carry that the body makes scaled starts scaled."""
    carry = list(init)
    for _ in range(len(carry) + 1):
        out = jax.eval_shape(step, carry)
        structures = [_joined([_structure(c), _structure(o)]) for c, o in zip(carry, out)]
        if structures == [_structure(c) for c in carry]:
            return carry
        carry = [_with_scale(c, s) for c, s in zip(carry, structures)]
    return carry


# -- control flow ------------------------------------------------------------------------------------


def _unstack(value: Any) -> tuple[Any, Any]:
    """Scanned-over operand: its data (sliced by scan) and its scale (closed over)."""
    if isinstance(value, ScaledArray):
        return value.data, value.scale
    return value, None


def _stack_outputs(ys: list) -> list:
    """Stacked per-iteration outputs as one `ScaledArray` each: the largest scale of the
    iterations, each iteration's data re-scaled to it (exact for power-of-two scales)."""
    outs = []
    for y in ys:
        if not isinstance(y, ScaledArray):
            outs.append(y)
            continue
        scale = lax.reduce_max(y.scale, tuple(range(y.scale.ndim)))
        ratio = safe_div(y.scale, scale).astype(y.dtype)
        outs.append(ScaledArray(lax.mul(y.data, lax.broadcast_in_dim(ratio, y.data.shape, (0,))), scale))
    return outs


@register_jaxpr_rule("scan", kind="control")
def scan(eqn, invals: list[Tracked]) -> list[Tracked]:
    """``lax.scan`` (same length, direction and unroll) over the scalified body. Scanned-over
    `ScaledArray`s keep their scale outside the loop; stacked outputs get the largest scale of the
    iterations. A carry the body makes scaled starts scaled (scale 1)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    (jaxpr, body_consts), consts, init, xs = scan_parts(eqn.params, _values(invals))
    n_carry = len(init)
    xs_data, xs_scales = zip(*map(_unstack, xs)) if xs else ((), ())

    def body(carry, x):
        x = [ScaledArray(d, s) if s is not None else d for d, s in zip(x, xs_scales)]
        outs = interpret_values(jaxpr, body_consts, [*consts, *carry, *x])
        return outs[:n_carry], outs[n_carry:]

    first = [jax.ShapeDtypeStruct(np.shape(d)[1:], d.dtype) for d in xs_data]
    init = _fixpoint(lambda c: body(c, [jnp.zeros(a.shape, a.dtype) for a in first])[0], init)
    like = [_structure(c) for c in init]

    def step(carry, x):
        new, ys = body(carry, x)
        return [_conform(v, s) for v, s in zip(new, like)], ys

    carry, ys = scan_like(eqn.params, step, list(init), list(xs_data))
    return [track(v) for v in [*carry, *_stack_outputs(ys)]]


@register_jaxpr_rule("while", kind="control")
def while_loop(eqn, invals: list[Tracked]) -> list[Tracked]:
    """``lax.while_loop`` over the scalified condition and body (carries as in `scan`)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    (cond_jaxpr, cond_closed), cond_consts, (body_jaxpr, body_closed), body_consts, init = while_parts(
        eqn.params, _values(invals)
    )

    def body(carry):
        return interpret_values(body_jaxpr, body_closed, [*body_consts, *carry])

    init = _fixpoint(body, init)
    like = [_structure(c) for c in init]

    def cond_fn(carry):
        return unscale(interpret_values(cond_jaxpr, cond_closed, [*cond_consts, *carry])[0])

    def body_fn(carry):
        return [_conform(v, s) for v, s in zip(body(carry), like)]

    return [track(v) for v in lax.while_loop(cond_fn, body_fn, list(init))]


@register_jaxpr_rule("cond", kind="control")
def cond(eqn, invals: list[Tracked]) -> list[Tracked]:
    """``lax.switch`` over the scalified branches; an output scaled in any branch is scaled in all
    (scale 1 where a branch leaves it unscaled)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    branches, index, ops = cond_parts(eqn.params, _values(invals))

    def make(jaxpr, consts):
        return lambda *args: interpret_values(jaxpr, consts, list(args))

    def agree(shapes: list) -> Callable:  # an output scaled in any branch is scaled in all
        like = [_joined([_structure(s[i]) for s in shapes]) for i in range(len(shapes[0]))]
        return lambda outs: [_conform(v, s) for v, s in zip(outs, like)]

    outs = switch_agreeing(unscale(index), [make(j, c) for j, c in branches], ops, agree)
    return [track(v) for v in outs]


@register_jaxpr_rule("remat2", kind="control")
def remat(eqn, invals: list[Tracked]) -> list[Tracked]:
    """``jax.checkpoint`` (same ``prevent_cse`` and ``policy``) around the scalified body."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    jaxpr, consts = body_of(eqn)
    fn = checkpoint_like(eqn.params, lambda *args: interpret_values(jaxpr, consts, list(args)))
    return [track(v) for v in fn(*_values(invals))]


# -- custom derivatives: the scalified primal, the original rule scalified -------------------------------


def _aval(value: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(value), value.dtype)


def _tangent_in(primal: Any, tangent: Any) -> Any:
    """The tangent of ``data * scale`` as a `ScaledArray` in the primal's scale:
    ``(dd + d * ds/s) * s``."""
    if not isinstance(primal, ScaledArray):
        return tangent
    d, s = primal.data, primal.scale
    wide = jnp.float64 if primal.dtype == np.float64 else jnp.float32
    data = add(tangent.data.astype(wide), mul(d.astype(wide), safe_div(tangent.scale, s).astype(wide)))
    return ScaledArray(data.astype(primal.dtype), s)


def _tangent_out(primal: Any, tangent: Any) -> Any:
    """A tangent (scaled or not) as the tangent pytree of ``primal``: ``ScaledArray(dy/s, 0)``."""
    if not isinstance(primal, ScaledArray):
        return unscale(tangent)
    value = tangent if isinstance(tangent, ScaledArray) else ScaledArray(tangent, jnp.ones((), primal.scale.dtype))
    return ScaledArray(rescaled(value, primal.scale, primal.dtype), jnp.zeros_like(primal.scale))


def _float_positions(values: list) -> list[int]:
    return [i for i, v in enumerate(values) if is_float(v.dtype)]


@register_jaxpr_rule("custom_jvp_call", kind="custom derivative")
def custom_jvp_call(eqn, invals: list[Tracked]) -> list[Tracked]:
    """A ``jax.custom_jvp`` whose primal is the scalified body and whose tangent is the original
    rule's (the JVP of the original equation, traced, then scalified on the scaled primals and
    tangents): ``jax.grad(scalify(f))`` keeps ``f``'s custom derivatives (``relu``...)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    jaxpr, consts = body_of(eqn)
    values = _values(invals)
    floats = _float_positions(values)

    @jax.custom_jvp
    def scalified(*args):
        return interpret_values(jaxpr, consts, list(args))

    @scalified.defjvp
    def scalified_jvp(primals, tangents):
        outs = scalified(*primals)

        def jvp(xs, dxs):
            full: list = [None] * len(xs)
            for i, dx in zip(floats, dxs):
                full[i] = dx
            return original_jvp(eqn, xs, full)

        closed = jax.make_jaxpr(jvp)([_aval(x) for x in primals], [_aval(primals[i]) for i in floats])
        dxs = [_tangent_in(primals[i], tangents[i]) for i in floats]
        out_tangents = interpret_values(closed.jaxpr, list(closed.consts), [*primals, *dxs])
        return outs, [_tangent_out(o, t) for o, t in zip(outs, out_tangents)]

    return [track(v) for v in scalified(*values)]


def _cotangent_out(primal: Any, cotangent: Any) -> Any:
    """The cotangent pytree of an output ``data * scale`` as the cotangent of its value:
    ``d/d data = g * scale``, so ``g`` is ``ScaledArray(d/d data, 1/scale)``."""
    if not isinstance(primal, ScaledArray):
        return cotangent
    return ScaledArray(cotangent.data, safe_div(jnp.ones((), primal.scale.dtype), primal.scale))


def _cotangent_in(primal: Any, cotangent: Any) -> Any:
    """A cotangent of the value ``x = data * scale`` as the cotangent pytree of ``primal``:
    ``d/d data = g * s``, ``d/d scale = sum(g * data)``."""
    if not isinstance(primal, ScaledArray):
        return unscale(cotangent) if cotangent is not None else None
    g = cotangent.to_array(jnp.float32) if isinstance(cotangent, ScaledArray) else cotangent.astype(jnp.float32)
    s, d = primal.scale, primal.data
    product = mul(g, d.astype(jnp.float32))
    return ScaledArray(mul(g, jnp.asarray(s).astype(jnp.float32)).astype(primal.dtype),
                       lax.reduce_sum(product, tuple(range(product.ndim))).astype(s.dtype))  # fmt: skip


@register_jaxpr_rule("custom_vjp_call", kind="custom derivative")
def custom_vjp_call(eqn, invals: list[Tracked]) -> list[Tracked]:
    """A ``jax.custom_vjp`` whose primal is the scalified body and whose backward pass is the
    original rule's (its VJP traced, then scalified on the scaled primals and cotangents)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    jaxpr, consts = body_of(eqn)
    values = _values(invals)
    floats = _float_positions(values)

    @jax.custom_vjp
    def scalified(*args):
        return interpret_values(jaxpr, consts, list(args))

    def fwd(*args):
        outs = scalified(*args)
        return outs, (args, outs)

    def bwd(residuals, cotangents):
        primals, outs = residuals
        cotangents = [_cotangent_out(o, ct) for o, ct in zip(outs, cotangents)]
        outs_shape = jax.eval_shape(lambda *a: bind(eqn, list(a)), *map(_aval, primals))

        def vjp(xs, cts):
            out = original_vjp(eqn, xs, cts)
            return [out[i] for i in floats]

        closed = jax.make_jaxpr(vjp)([_aval(x) for x in primals], [_aval(o) for o in outs_shape])
        cts = interpret_values(closed.jaxpr, list(closed.consts), [*primals, *cotangents])
        out = [None] * len(primals)
        for i, ct in zip(floats, cts):
            out[i] = _cotangent_in(primals[i], ct)
        return tuple(o if o is not None else float0_zeros(p) for o, p in zip(out, primals))

    scalified.defvjp(fwd, bwd)
    return [track(v) for v in scalified(*values)]


# -- effects and placement ---------------------------------------------------------------------------


@register_jaxpr_rule("debug_callback", kind="callback")
def debug_callback(eqn, invals: list[Tracked]) -> list[Tracked]:
    """The callback receives `ScaledArray`s (NumPy data and scale) where its operands are scaled."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    values = _values(invals)
    leaves, tree = jax.tree_util.tree_flatten(values, is_leaf=lambda v: v is None)
    callback = eqn.params["callback"]
    ordered = "ordered" in str(eqn.params["effect"]).lower()

    def rebuilt(*flat):
        callback(*jax.tree_util.tree_unflatten(tree, list(flat)))

    jax.debug.callback(rebuilt, *leaves, ordered=ordered)
    return []


@register_jaxpr_rule("device_put", kind="same scale")
def device_put(eqn, invals: list[Tracked]) -> list[Tracked]:
    """Placement only: scaled operands are returned as they are."""
    plain = _plain(eqn, invals)
    return plain if plain is not None else list(invals)


@register_jaxpr_rule("reshard", "layout_constraint", kind="same scale")
def placement(eqn, invals: list[Tracked]) -> list[Tracked]:
    """A sharding or layout constraint on one operand: applied to the data, the scale unchanged."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    (t,) = invals
    (data,) = bind(eqn, [t.value.data])
    return [Tracked(ScaledArray(data, t.value.scale), t.scalar, t.zero)]


@register_jaxpr_rule("shard_map", kind="unscale")
def shard_map(eqn, invals: list[Tracked]) -> list[Tracked]:
    """The fallback for ``jax.shard_map``: the operands unscaled, the body run as it is (each device
    on its shard), float results with scale 1. Scales are per tensor and a body may reduce across
    devices, so a per-shard scale has no global meaning; to propagate scales inside, apply `scalify`
    to the body itself (its inputs are then the shards)."""
    plain = _plain(eqn, invals)
    if plain is not None:
        return plain
    values = [unscale(t.value) for t in invals]
    dtype = next(t.value.scale.dtype for t in invals if t.scaled)
    one = jnp.ones((), dtype)
    outs = bind(eqn, values)
    return [track(ScaledArray(o, one) if is_float(o.dtype) else o) for o in outs]
