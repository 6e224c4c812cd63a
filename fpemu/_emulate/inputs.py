"""What enters `fpemu.emulate`: the function traced with its array leaves as inputs, and which of those
arguments ``Policy.round_inputs`` rounds.

- `trace`: ``fn`` traced with its array leaves (JAX and NumPy arrays) as inputs, every other leaf
  static and closed over.
- `input_flags`: ``Policy.round_inputs`` (True, False, argument numbers, a pytree mask of the
  positional arguments, or a predicate) as one flag per leaf of ``(args, kwargs)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._emulate.policy import InputMask

__all__ = ["input_flags", "trace"]


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def input_flags(round_inputs: Any, args: tuple, kwargs: dict, field: str = "Policy.round_inputs") -> list[bool]:
    """One flag per leaf of ``(args, kwargs)`` (``jax.tree_util`` order): whether ``Policy.round_inputs``
    (or another selection of arguments of the same kinds, ``field``: ``Policy.weights``) selects it.
    Argument numbers and masks name positional arguments only."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    if isinstance(round_inputs, bool):
        return [round_inputs] * len(leaves)
    if isinstance(round_inputs, tuple):
        bad = [i for i in round_inputs if i >= len(args)]
        if bad:
            raise ValueError(
                f"{field} names positional argument(s) {bad}, but the function was called with "
                f"{len(args)} positional argument(s)"
            )
        per_arg = [[i in round_inputs] * len(jax.tree_util.tree_leaves(a)) for i, a in enumerate(args)]
        return [f for flags in per_arg for f in flags] + [False] * len(jax.tree_util.tree_leaves(kwargs))
    if isinstance(round_inputs, InputMask):
        mask = jax.tree_util.tree_unflatten(round_inputs.treedef, round_inputs.leaves)
        try:
            subtrees = round_inputs.treedef.flatten_up_to(tuple(args) if isinstance(mask, tuple) else args)
        except (ValueError, TypeError) as err:
            raise ValueError(
                f"{field}={mask!r} must be a prefix of the positional arguments (a tuple with one entry "
                f"per argument, or per leaf of it): {err}"
            ) from None
        flags = [
            f
            for m, sub in zip(round_inputs.leaves, subtrees, strict=True)
            for f in [m] * len(jax.tree_util.tree_leaves(sub))
        ]
        return flags + [False] * len(jax.tree_util.tree_leaves(kwargs))
    predicate = cast(Callable[..., Any], round_inputs)
    flags = []
    for path, leaf in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]:
        verdict = predicate(path, leaf)
        if not isinstance(verdict, (bool, np.bool_)):
            raise TypeError(
                f"{field} predicate must return a bool for each argument leaf, got {verdict!r} for "
                f"{jax.tree_util.keystr(path)}"
            )
        flags.append(bool(verdict))
    return flags


def trace(fn: Callable, args: tuple, kwargs: dict) -> tuple[Any, Any, list[int], list]:
    """``fn`` traced with its array leaves as inputs (other leaves static): (closed jaxpr, output
    shapes, the indices of the array leaves among the leaves of ``(args, kwargs)``, their values)."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    dynamic = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

    def flat_fn(*values):
        full = list(leaves)
        for i, value in zip(dynamic, values, strict=True):
            full[i] = value
        call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
        return fn(*call_args, **call_kwargs)

    values = [jnp.asarray(leaves[i]) if not isinstance(leaves[i], jax.Array) else leaves[i] for i in dynamic]
    closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*values)
    return closed, out_shapes, dynamic, values
