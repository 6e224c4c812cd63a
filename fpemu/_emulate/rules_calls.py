"""Rules of function calls: inlined calls (``closed_call``, ``eval_jaxpr``, ``composite``,
``custom_vmap_call``...), nested ``jit``, and functions with custom derivatives (``custom_jvp_call``,
``custom_vjp_call``, ``custom_linear_solve``).

The body of each is emulated through the context (`Context.interpret` in place, or
`Context.subfunction` as a function for ``jax.jit`` / ``jax.custom_jvp`` / ``jax.custom_vjp`` to
trace); derivatives stay the original rule's, evaluated at the rounded inputs. The bodies are opened,
and the nested jit cached, by the interpreter core shared with `fpemu.scalify` (`fpemu._jax.interpret`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from fpemu._emulate.interpreter import Context
from fpemu._emulate.registry import register
from fpemu._jax.compat import stack_key
from fpemu._jax.interpret import JitCache, body_of, float0_zeros, original_jvp, original_vjp


@register("call", "closed_call", "eval_jaxpr", "composite", "custom_vmap_call", kind="inline")
def inline(ctx: Context, eqn: Any, invals: list) -> list:
    """Interpret the body in place. A ``jax.custom_batching.custom_vmap`` function's body is its
    function: its batching rule is not kept, so that a ``vmap`` of the emulated function batches the
    emulated body as JAX batches any (the same values, by the rule's contract)."""
    jaxpr, consts = body_of(eqn)
    return ctx.interpret(jaxpr, consts, invals)


_JITTED = JitCache()


@register("jit", kind="call")
def nested_jit(ctx: Context, eqn: Any, invals: list) -> list:
    """``jax.jit`` (same ``inline``) around the emulated body, so that the program keeps its jit
    boundaries: eagerly, nested jit functions still run compiled, as they do in ``fn``. The jitted
    body is cached per jaxpr and configuration. Shardings and donation of the inner jit's arguments
    are not re-imposed."""
    key = ctx.site_key()
    inline_flag = bool(eqn.params.get("inline", False))
    config = (ctx.policy, ctx.stats_enabled, key is None, stack_key(ctx.stack), inline_flag)

    def make() -> Callable:
        jaxpr, consts = body_of(eqn)
        body = ctx.subfunction(jaxpr)

        def call(key, *args):
            return body(key, consts, *args)

        return call

    outs, stats = _JITTED.get(eqn.params, config, make)(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


# -- custom derivatives --------------------------------------------------------------------------------


def _emulated_primal_original_tangent(ctx: Context, eqn: Any, invals: list, primal: Callable) -> list:
    """A ``jax.custom_jvp`` whose primal is ``primal(key, *invals) -> (outs, stats)`` (emulated) and
    whose tangent is the original primitive's (``jax.jvp`` of it) at the rounded primal inputs."""
    key = ctx.site_key()

    @jax.custom_jvp
    def emulated(key, *args):
        return primal(key, *args)

    @emulated.defjvp
    def emulated_jvp(primals, tangents):
        key, *args = primals
        _, *arg_tangents = tangents
        outs, stats = emulated(key, *args)
        return (outs, stats), (original_jvp(eqn, args, arg_tangents), float0_zeros(stats))

    outs, stats = emulated(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


@register("custom_jvp_call", kind="control")
def custom_jvp_call(ctx: Context, eqn: Any, invals: list) -> list:
    """A ``jax.custom_jvp`` whose primal is the emulated function and whose tangent is the original
    rule's tangent, evaluated at the (rounded) primal inputs: so ``jax.grad(emulate(f))`` keeps f's
    custom derivatives (relu, gelu, logsumexp...) and its primal values are the emulated ones."""
    jaxpr, consts = body_of(eqn)
    fn = ctx.subfunction(jaxpr)
    return _emulated_primal_original_tangent(ctx, eqn, invals, lambda key, *args: fn(key, consts, *args))


@register("custom_linear_solve", kind="control")
def custom_linear_solve(ctx: Context, eqn: Any, invals: list) -> list:
    """``lax.custom_linear_solve`` (``jnp.linalg.solve``, ``inv``, ``jax.scipy.sparse.linalg.cg``...):
    the emulated ``solve`` function gives the value; derivatives are the original primitive's
    (implicit differentiation through the unemulated matvec and solves) at the rounded inputs."""
    lengths = list(eqn.params["const_lengths"])
    solve = eqn.params["jaxprs"].solve
    offset = sum(lengths[:2])  # operands: matvec consts, vecmat consts, solve consts, transpose_solve consts, b
    fn = ctx.subfunction(solve.jaxpr)

    def primal(key, *args):
        solve_consts, b = args[offset : offset + lengths[2]], args[sum(lengths) :]
        return fn(key, solve.consts, *solve_consts, *b)

    return _emulated_primal_original_tangent(ctx, eqn, invals, primal)


@register("custom_vjp_call", kind="control")
def custom_vjp_call(ctx: Context, eqn: Any, invals: list) -> list:
    """A ``jax.custom_vjp`` whose primal is the emulated function and whose backward pass is the
    original rule (its forward re-run, unemulated, on the rounded inputs to get its residuals)."""
    jaxpr, consts = body_of(eqn)
    fn = ctx.subfunction(jaxpr)
    key = ctx.site_key()

    @jax.custom_vjp
    def emulated(key, consts, *args):
        return fn(key, consts, *args)

    def fwd(key, consts, *args):
        return emulated(key, consts, *args), (key, consts, args)

    def bwd(residuals, cotangents):
        key, consts, args = residuals
        out_cotangents, _ = cotangents
        return (None, [None] * len(consts), *original_vjp(eqn, args, out_cotangents))

    emulated.defvjp(fwd, bwd)
    outs, stats = emulated(key, consts, *invals)
    ctx.merge_stats(stats)
    return list(outs)
