"""The one place where fpemu's jaxpr interpreters reach past JAX's documented API, or across its versions.

`fpemu.emulate` and `fpemu.scalify` are written on documented APIs (``jax.make_jaxpr``,
``jax.extend.core``, ``jax.named_scope``, the public combinators), but a few facts they need live in
JAX's own structures or have changed between releases. Everything of that kind is here, checked
against every release of the README's support window, jax 0.10.0, 0.10.1, 0.10.2, 0.11.0, 0.11.1,
0.11.2 and 0.12.0.1 (each run through tests/test_emulate*.py, tests/scalify, tests/training,
tests/emulate/test_model_zoo.py and tests/jax/test_primitives.py); the interpreters and their shared
core (fpemu/_jax/interpret.py) import these names and never the internals (as fpemu/_jax/pallas.py
does for Pallas). What a rule reads
from its primitive's ``params`` that every supported release spells the same way (the operand counts
of ``while``, the mesh of ``shard_map``...) stays in that rule, next to the code that interprets it.

- ``jax.extend.core``: the jaxpr classes the interpreters walk (``DropVar`` and ``jaxprs_in_params``
  from jax 0.10).
- Name stacks: an equation's ``source_info.name_stack.stack`` holds ``Scope`` elements (from
  ``jax.named_scope``) and ``Transform`` elements (``jvp``, ``transpose``...); neither class is
  public, so they are told apart by class name.
- An equation's ``ctx.manager`` (compute type, threefry partitioning...): a private attribute,
  re-entered as ``jax.core.eval_jaxpr`` does.
- Closed or open jaxprs in params: ``closed_call`` holds a ``ClosedJaxpr``; ``remat2``,
  ``shard_map``, ``eval_jaxpr`` and, from jax 0.11, ``scan`` and ``composite`` a ``Jaxpr``
  (`open_jaxpr`); ``composite``'s body is ``jaxpr`` up to jax 0.11.1, ``call_jaxpr`` from 0.11.2
  (`call_body`).
- ``scan``'s operand counts: ``num_consts``/``num_carry`` up to jax 0.10, the flat tree ``ft_in``
  from jax 0.11 (`scan_counts`).
- An equation's user source line: ``jax._src.source_info_util.user_frame`` of its
  ``source_info.traceback`` (the innermost frame outside JAX), as JAX's own error messages find it
  (`source_line`).
- Primitives of some releases only: ``jax.lax.tile_p`` and ``stage_p`` (jax 0.12): `lax_primitive`.
- shard_map's manual axes: ``manual_axes`` in jax 0.10.0, ``newly_manual_axes`` from 0.10.2
  (`manual_axes`); its varying-manual-axes types: ``aval.manual_axis_type.varying``; ``lax.pcast``
  marks a value varying.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
from jax import lax
from jax._src import source_info_util
from jax.extend.core import ClosedJaxpr, DropVar, Jaxpr, Literal, jaxpr_as_fun, jaxprs_in_params

__all__ = [
    "ClosedJaxpr",
    "DropVar",
    "Jaxpr",
    "Literal",
    "bind",
    "call_body",
    "equation_scopes",
    "has_sub_jaxprs",
    "is_transposed",
    "jaxpr_as_fun",
    "lax_primitive",
    "manual_axes",
    "mark_varying",
    "name_stack",
    "open_jaxpr",
    "scan_counts",
    "scope_names",
    "source_line",
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
    if overrides:
        params = {**params, **overrides}
    out = eqn.primitive.bind(*invals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def source_line(eqn: Any) -> tuple[str, int, str] | None:
    """Where the user's code made this equation: (file, line, function) of the innermost frame outside
    JAX (the user's function, or a library's such as optax), or None where JAX kept no traceback."""
    traceback = getattr(getattr(eqn, "source_info", None), "traceback", None)
    frame = source_info_util.user_frame(traceback) if traceback is not None else None
    if frame is None:
        return None
    return frame.file_name, frame.start_line, frame.function_name


def has_sub_jaxprs(eqn: Any) -> bool:
    """Whether the equation's parameters hold a jaxpr (a higher-order primitive)."""
    return any(True for _ in jaxprs_in_params(eqn.params))


def open_jaxpr(value: Jaxpr | ClosedJaxpr) -> tuple[Jaxpr, list]:
    """A jaxpr parameter as (jaxpr, its consts): closed ones carry consts, open ones none."""
    if isinstance(value, ClosedJaxpr):
        return value.jaxpr, list(value.consts)
    return value, []


def call_body(params: dict) -> tuple[Jaxpr, list]:
    """The body of a call interpreted in place, as (jaxpr, its consts): ``call_jaxpr`` of ``call``,
    ``closed_call``, ``eval_jaxpr`` and (from jax 0.11.2) ``composite``; ``jaxpr`` of ``composite``
    before."""
    return open_jaxpr(params["call_jaxpr"] if "call_jaxpr" in params else params["jaxpr"])


def lax_primitive(name: str) -> Any:
    """``jax.lax``'s primitive of that name (``lax.<name>_p``), or None in a release without it."""
    return getattr(lax, f"{name}_p", None)


def scan_counts(params: dict) -> tuple[int, int]:
    """How many of a ``scan``'s operands are constants and how many the carry (the rest are scanned
    over): ``num_consts`` and ``num_carry`` up to jax 0.10; from jax 0.11 the leaf counts of the three
    parts of ``ft_in`` (a flat tree of constants, carry and scanned-over operands)."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)


# -- shard_map ----------------------------------------------------------------------------------------


def manual_axes(params: dict) -> frozenset[str]:
    """The mesh axes a ``shard_map`` makes manual: ``manual_axes`` in jax 0.10.0, ``newly_manual_axes``
    in 0.10.2 and later."""
    return frozenset(params["newly_manual_axes"] if "newly_manual_axes" in params else params["manual_axes"])


def mark_varying(value: Any, axes: tuple[str, ...]) -> Any:
    """``value`` marked as varying over every manual mesh axis of ``axes`` (shard_map's check_vma
    types), so that a ``psum`` over all of them adds every device's value once."""
    varying = jax.typeof(value).manual_axis_type.varying
    missing = tuple(a for a in axes if a not in varying)
    if not missing:
        return value
    return lax.pcast(value, missing, to="varying")
