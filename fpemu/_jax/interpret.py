"""The interpreter core that `fpemu.emulate` and `fpemu.scalify` share: the loop over a jaxpr's
equations, and how each higher-order primitive's bodies are opened and its combinator rebuilt.

Both transforms interpret a jaxpr with an environment dict and rebuild each control-flow or call
primitive with its public combinator around a transformed body. What they do with values differs
(emulate rounds them and counts statistics; scalify carries scales), what they do with the jaxprs
does not: that part is here, once, so that a change of JAX's jaxprs is made in one place.

- `evaluate`: the equation loop. The transform gives how a literal is read and how one equation is
  applied; constants and arguments arrive as the transform's values.
- The bodies of a primitive and its operands split by role: `body_of` (the primitives with one
  body: calls, ``jit``, ``remat2``, ``shard_map``, custom derivatives), `scan_parts`,
  `while_parts`, `cond_parts`.
- The combinators rebuilt with the equation's own parameters: `scan_like`, `checkpoint_like`,
  `JitCache` (``jax.jit`` around a transformed body, cached per jaxpr and configuration),
  `shard_map_like` (with `manual_axis_names`); and `switch_agreeing`, ``lax.switch`` over
  transformed branches whose outputs are brought to one structure (emulate's statistics sites,
  scalify's scaled outputs), each branch traced once (`staged`).
- The original derivative rules of an equation with custom derivatives (``custom_jvp_call``,
  ``custom_vjp_call``, ``custom_linear_solve``): `original_jvp`, `original_vjp`, the equation bound
  unchanged and differentiated, which is its own rule; `float0_zeros`, the tangent or cotangent of
  integer operands.

Version-dependent facts (where a body lives in ``params``, ``scan``'s operand counts) come from
`fpemu._jax.compat`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import lax

from fpemu._jax.compat import (
    DropVar,
    Jaxpr,
    Literal,
    bind,
    call_body,
    jaxpr_as_fun,
    manual_axes,
    open_jaxpr,
    scan_counts,
)

__all__ = [
    "Body",
    "JitCache",
    "ScanParts",
    "WhileParts",
    "body_of",
    "checkpoint_like",
    "cond_parts",
    "evaluate",
    "float0_zeros",
    "manual_axis_names",
    "original_jvp",
    "original_vjp",
    "scan_like",
    "scan_parts",
    "shard_map_like",
    "staged",
    "switch_agreeing",
    "while_parts",
]


# -- the equation loop ---------------------------------------------------------------------------------


def evaluate(
    jaxpr: Jaxpr,
    consts: Sequence,
    args: Sequence,
    *,
    literal: Callable[[Literal, Any], Any],
    equation: Callable[[Any, list], list],
) -> list:
    """Evaluate ``jaxpr`` on ``args`` (its constvars bound to ``consts``) equation by equation.

    ``literal(var, eqn)`` gives the value of a literal operand of ``eqn`` (``eqn`` None: a literal
    output of the jaxpr); ``equation(eqn, invals)`` gives the equation's outputs. Outputs bound to
    dropped variables are not kept."""
    env: dict = {}

    def read(var: Any, eqn: Any) -> Any:
        return literal(var, eqn) if isinstance(var, Literal) else env[var]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        outvals = equation(eqn, [read(var, eqn) for var in eqn.invars])
        for var, value in zip(eqn.outvars, outvals, strict=True):
            if not isinstance(var, DropVar):
                env[var] = value
    return [read(var, None) for var in jaxpr.outvars]


# -- the bodies of higher-order primitives, and their operands by role ----------------------------------


class Body(NamedTuple):
    """A body of a higher-order primitive: the open jaxpr and the consts of its closed form (they
    feed its first constvars; operand consts, if any, are its leading arguments)."""

    jaxpr: Jaxpr
    consts: list


class ScanParts(NamedTuple):
    """A ``scan``: its body, and its operands as consts, initial carry and scanned-over values."""

    body: Body
    consts: list
    init: list
    xs: list


class WhileParts(NamedTuple):
    """A ``while``: its condition and body, each with its operand consts, and the initial carry."""

    cond: Body
    cond_consts: list
    body: Body
    body_consts: list
    init: list


# where the primitives with one body keep it (the inlined calls: `compat.call_body`)
_BODY_PARAM = {
    "jit": "jaxpr",
    "remat2": "jaxpr",
    "shard_map": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vmap_call": "call",  # jax.custom_batching.custom_vmap: the function (its batching rule aside)
}


def body_of(eqn: Any) -> Body:
    """The body of an equation with one: ``jit``, ``remat2``, ``shard_map``, ``custom_jvp_call``,
    ``custom_vjp_call``, ``custom_vmap_call``, and the calls interpreted in place (``call``,
    ``closed_call``, ``eval_jaxpr``, ``composite``: `compat.call_body`)."""
    param = _BODY_PARAM.get(eqn.primitive.name)
    return Body(*(open_jaxpr(eqn.params[param]) if param is not None else call_body(eqn.params)))


def scan_parts(params: dict, invals: Sequence) -> ScanParts:
    """A ``scan`` equation's body and its operands by role (`compat.scan_counts`)."""
    n_consts, n_carry = scan_counts(params)
    invals = list(invals)
    return ScanParts(
        Body(*open_jaxpr(params["jaxpr"])),
        invals[:n_consts],
        invals[n_consts : n_consts + n_carry],
        invals[n_consts + n_carry :],
    )


def while_parts(params: dict, invals: Sequence) -> WhileParts:
    """A ``while`` equation's condition and body and its operands by role (``cond_nconsts`` operand
    consts of the condition, then ``body_nconsts`` of the body, then the carry)."""
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    invals = list(invals)
    return WhileParts(
        Body(*open_jaxpr(params["cond_jaxpr"])),
        invals[:nc],
        Body(*open_jaxpr(params["body_jaxpr"])),
        invals[nc : nc + nb],
        invals[nc + nb :],
    )


def cond_parts(params: dict, invals: Sequence) -> tuple[list[Body], Any, list]:
    """A ``cond`` equation's branches, its branch index and the branches' operands."""
    index, *ops = invals
    return [Body(*open_jaxpr(branch)) for branch in params["branches"]], index, list(ops)


# -- the combinators, rebuilt with the equation's parameters -------------------------------------------


def scan_like(params: dict, step: Callable, init: Any, xs: Any) -> Any:
    """``lax.scan(step, init, xs)`` with the equation's length, direction and unroll."""
    return lax.scan(step, init, xs, length=params["length"], reverse=params["reverse"], unroll=params["unroll"])


def staged(fn: Callable, *args: Any) -> tuple[Callable, Any]:
    """Trace ``fn(*args)`` once: a replay of the traced jaxpr (cheap to trace again, with arguments of
    the same structure) and the abstract outputs (a pytree of `jax.ShapeDtypeStruct`). For a
    combinator that needs a body's output structure before it traces the body."""
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    tree = jax.tree_util.tree_structure(shapes)

    def replay(*call_args: Any) -> Any:
        return jax.tree_util.tree_unflatten(tree, jaxpr_as_fun(closed)(*jax.tree_util.tree_leaves(call_args)))

    return replay, shapes


def switch_agreeing(index: Any, branches: Sequence[Callable], operands: Sequence, agree: Callable) -> Any:
    """``lax.switch(index, branches, *operands)`` for transformed branches whose outputs may differ in
    structure: each branch is traced once (`staged`), ``agree(shapes)`` receives every branch's
    abstract outputs and returns ``conform(outputs)``, which brings one branch's outputs to the
    structure that all of them return."""
    replays = [staged(branch, *operands) for branch in branches]
    conform = agree([shapes for _, shapes in replays])

    def conformed(replay: Callable) -> Callable:
        return lambda *args: conform(replay(*args))

    return lax.switch(index, [conformed(replay) for replay, _ in replays], *operands)


def checkpoint_like(params: dict, fn: Callable) -> Callable:
    """``jax.checkpoint(fn)`` with a ``remat2`` equation's ``prevent_cse`` and ``policy``."""
    return jax.checkpoint(fn, prevent_cse=params["prevent_cse"], policy=params["policy"])


class JitCache:
    """``jax.jit`` around a transformed body, as a nested ``jit`` equation had it (its name, its
    ``inline``), cached per body (JAX reuses the ``ClosedJaxpr`` while its trace is cached; the
    cache holds it weakly) and per the transform's configuration."""

    def __init__(self) -> None:
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, params: dict, config: Hashable, make: Callable[[], Callable]) -> Callable:
        """The jitted body of a ``jit`` equation with these ``params`` under ``config``; ``make()``
        builds the function to jit on a miss."""
        cached = self._cache.setdefault(params["jaxpr"], {})
        jitted = cached.get(config)
        if jitted is None:
            fn = make()
            fn.__name__ = fn.__qualname__ = str(params.get("name", "jit"))
            jitted = cached[config] = jax.jit(fn, inline=bool(params.get("inline", False)))
        return jitted


def manual_axis_names(params: dict) -> tuple[str, ...]:
    """The mesh axes a ``shard_map`` equation makes manual, in the mesh's order (`compat.manual_axes`)."""
    manual = manual_axes(params)
    return tuple(name for name in params["mesh"].axis_names if name in manual)


def shard_map_like(params: dict, fn: Callable, *, replicated_in: int = 0, replicated_out: bool = False) -> Callable:
    """``jax.shard_map(fn)`` with a ``shard_map`` equation's mesh, specs, manual axes and ``check_vma``.

    ``fn`` takes ``replicated_in`` leading arguments replicated over the mesh (a key...), then the
    equation's operands; with ``replicated_out`` it returns ``(outputs, extra)``, ``extra`` a pytree
    replicated over the mesh (statistics reduced over the manual axes...), else the outputs."""
    spec = jax.sharding.PartitionSpec
    out_specs = list(params["out_specs"])
    return jax.shard_map(
        fn,
        mesh=params["mesh"],
        in_specs=(*[spec()] * replicated_in, *params["in_specs"]),
        out_specs=(out_specs, spec()) if replicated_out else out_specs,
        axis_names=manual_axes(params),
        check_vma=params["check_vma"],
    )


# -- the original derivative rules ---------------------------------------------------------------------


def float0_zeros(tree: Any) -> Any:
    """Zero tangents or cotangents (``float0``) shaped as the leaves of ``tree``."""
    return jax.tree_util.tree_map(lambda v: np.zeros(np.shape(v), jax.dtypes.float0), tree)


def _original(eqn: Any) -> Callable:
    return lambda *args: bind(eqn, list(args))


def original_jvp(eqn: Any, primals: Sequence, tangents: Sequence) -> list:
    """The output tangents of ``eqn`` bound unchanged at ``primals``: for an equation with custom
    derivatives, its own rule (a ``custom_jvp``'s tangent function, a ``custom_vjp``'s forward and
    backward). ``tangents`` has one entry per operand; None is the zero tangent of an operand that
    has none (an integer, ``float0``)."""
    filled = [float0_zeros(p) if t is None else t for p, t in zip(primals, tangents, strict=True)]
    return list(jax.jvp(_original(eqn), tuple(primals), tuple(filled))[1])


def original_vjp(eqn: Any, primals: Sequence, cotangents: Sequence) -> list:
    """The operand cotangents of ``eqn`` bound unchanged at ``primals``, for the output
    ``cotangents``: for an equation with custom derivatives, its own rule. Integer operands get
    ``float0`` cotangents."""
    _, vjp = jax.vjp(_original(eqn), *primals)
    return list(vjp(list(cotangents)))
