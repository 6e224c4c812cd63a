"""Pytree functions that keep `ScaledArray` leaves whole (``jax.tree_util`` with
``is_leaf=is_scaled_leaf``), as jax-scalify's ``jsa.tree``."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from fpemu.scalify._array import is_scaled_leaf

__all__ = ["all", "astype", "flatten", "leaves", "map", "structure", "unflatten"]


def astype(tree: Any, dtype: Any, floating_only: bool = False) -> Any:
    """Every leaf (array or `ScaledArray`: its data) cast to ``dtype``; with ``floating_only``,
    only floating-point leaves."""

    def cast(leaf):
        if floating_only and not jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf
        return leaf.astype(dtype)

    return jax.tree_util.tree_map(cast, tree, is_leaf=is_scaled_leaf)


def all(tree: Any) -> bool:
    """Whether every leaf is true (jax-scalify's version recursed forever)."""
    return builtins.all(bool(leaf) for leaf in jax.tree_util.tree_leaves(tree, is_leaf=is_scaled_leaf))


def flatten(tree: Any) -> tuple[list, Any]:
    """``(leaves, treedef)`` with `ScaledArray` leaves."""
    return jax.tree_util.tree_flatten(tree, is_leaf=is_scaled_leaf)


def leaves(tree: Any) -> list:
    """The leaves, `ScaledArray`s whole."""
    return jax.tree_util.tree_leaves(tree, is_leaf=is_scaled_leaf)


def map(f: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """``jax.tree_util.tree_map`` with `ScaledArray` leaves."""
    return jax.tree_util.tree_map(f, tree, *rest, is_leaf=is_scaled_leaf)


def structure(tree: Any) -> Any:
    """The treedef, with `ScaledArray` leaves."""
    return jax.tree_util.tree_structure(tree, is_leaf=is_scaled_leaf)


unflatten = jax.tree_util.tree_unflatten
