"""The one place where `fpemu.emulate` reaches past JAX's documented API, or across its versions.

The interpreter is written on documented APIs (``jax.make_jaxpr``, ``jax.extend.core``,
``jax.named_scope``, the public combinators), but a few facts it needs live in JAX's own
structures or have changed between releases. Everything of that kind is here, checked against
jax 0.10.2; the other modules of fpemu/_emulate import these names and never the internals (as
kernels/_pallas.py does for Pallas). What each rule reads from its primitive's ``params`` (the
operand counts of ``while``, the mesh of ``shard_map``...) stays in that rule, next to the code
that interprets it.

- ``jax.extend.core``: the jaxpr classes the interpreter walks.
- Name stacks: an equation's ``source_info.name_stack.stack`` holds ``Scope`` elements (from
  ``jax.named_scope``) and ``Transform`` elements (``jvp``, ``transpose``...); neither class is
  public, so they are told apart by class name.
- An equation's ``ctx.manager`` (compute type, threefry partitioning...): a private attribute,
  re-entered as ``jax.core.eval_jaxpr`` does.
- ``Primitive.get_bind_params`` returned ``(subfuns, params)`` before jax 0.7, ``params`` since.
- Closed or open jaxprs in params: ``closed_call`` holds a ``ClosedJaxpr``, ``remat2`` and
  ``shard_map`` a ``Jaxpr``.
- ``scan``'s ``_split_transpose`` parameter exists in some releases only.
- shard_map's varying-manual-axes types: ``aval.manual_axis_type.varying`` since jax 0.10,
  ``aval.vma`` before; ``lax.pcast`` marks a value varying.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
from jax import lax
from jax.extend.core import ClosedJaxpr, DropVar, Jaxpr, Literal, jaxpr_as_fun, jaxprs_in_params

__all__ = [
    "ClosedJaxpr",
    "DropVar",
    "Jaxpr",
    "Literal",
    "bind",
    "equation_scopes",
    "has_sub_jaxprs",
    "is_transposed",
    "jaxpr_as_fun",
    "mark_varying",
    "name_stack",
    "open_jaxpr",
    "scan_options",
    "scope_names",
    "stack_key",
]


# -- name stacks --------------------------------------------------------------------------------------


def name_stack(eqn: Any) -> tuple:
    """The elements of the equation's name stack (scopes and transforms), outermost first."""
    return tuple(eqn.source_info.name_stack.stack)


def scope_names(stack: tuple) -> list[str]:
    """The ``jax.named_scope`` names of a name stack, outermost first."""
    return [element.name for element in stack if type(element).__name__ == "Scope"]


def is_transposed(stack: tuple) -> bool:
    """Whether the stack is under a transposition (the backward pass of a ``jax.grad``)."""
    return any(type(element).__name__ == "Transform" and element.name == "transpose" for element in stack)


def stack_key(stack: tuple) -> tuple:
    """A hashable description of a name stack (for caches keyed by where a call sits)."""
    return tuple((type(element).__name__, element.name) for element in stack)


def equation_scopes(eqn: Any) -> contextlib.AbstractContextManager:
    """Re-enter the equation's named scopes, so that traces of the emulated function keep them, and
    its context (``eqn.ctx``: compute type, threefry partitioning...), as ``jax.core.eval_jaxpr`` does."""
    names = scope_names(name_stack(eqn))
    manager = getattr(getattr(eqn, "ctx", None), "manager", None)
    if not names and manager is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if manager is not None:
        stack.enter_context(manager)
    for name in names:
        stack.enter_context(jax.named_scope(name))
    return stack


# -- equations ----------------------------------------------------------------------------------------


def bind(eqn: Any, invals: list, **overrides: Any) -> list:
    """The primitive of ``eqn`` applied to ``invals`` (as ``jax.core.eval_jaxpr`` does), with
    ``overrides`` replacing some of its parameters; always a list of outputs."""
    params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # jax < 0.7: (subfuns, params)
        subfuns, params = params
        invals = [*subfuns, *invals]
    if overrides:
        params = {**params, **overrides}
    out = eqn.primitive.bind(*invals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def has_sub_jaxprs(eqn: Any) -> bool:
    """Whether the equation's parameters hold a jaxpr (a higher-order primitive)."""
    return any(True for _ in jaxprs_in_params(eqn.params))


def open_jaxpr(value: Jaxpr | ClosedJaxpr) -> tuple[Jaxpr, list]:
    """A jaxpr parameter as (jaxpr, its consts): closed ones carry consts, open ones none."""
    if isinstance(value, ClosedJaxpr):
        return value.jaxpr, list(value.consts)
    return value, []


def scan_options(params: dict) -> dict:
    """The keyword arguments of ``lax.scan`` that only some releases have, from a scan's params."""
    return {"_split_transpose": params["_split_transpose"]} if "_split_transpose" in params else {}


# -- shard_map ----------------------------------------------------------------------------------------


def mark_varying(value: Any, axes: tuple[str, ...]) -> Any:
    """``value`` marked as varying over every manual mesh axis of ``axes`` (shard_map's check_vma
    types), so that a ``psum`` over all of them adds every device's value once."""
    aval = jax.typeof(value)
    manual = getattr(aval, "manual_axis_type", None)  # jax >= 0.10; earlier: aval.vma
    varying = manual.varying if manual is not None else getattr(aval, "vma", None)
    missing = tuple(a for a in axes if varying is not None and a not in varying)
    if not missing:
        return value
    return lax.pcast(value, missing, to="varying")
