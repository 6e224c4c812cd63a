"""What a training recipe adds to `fpemu.emulate` beside the function's value: the amax histories of
delayed scaling, and the classification of the dots.

- `init_training_state` (public as `fpemu.init_training_state`): the first state of a stateful
  recipe, ``{"<dot>.<x|w|g>": float32[amax_history_len]}`` of zeros, one history per tensor of each
  dot emulate will quantize with delayed scaling (its activation, weight and gradient).
- `check_state` and `advance`: the state checked on entry, and the next one: each history shifted by
  one step with this step's amax in row 0 (Transformer Engine's ``DelayedScaling``, as
  `fpemu.scaled.DelayedScaling` keeps it).
- `gemm_roles` (public as `fpemu.gemm_roles`): how each dot of a function is classified.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from fpemu._core.registry import FormatLike
from fpemu._emulate import stats as _stats
from fpemu._emulate.gemm import history_keys, quantized
from fpemu._emulate.gemm_roles import GemmRoles, classify
from fpemu._emulate.inputs import input_flags, trace
from fpemu._emulate.policy import Policy, as_policy
from fpemu._training.recipes import INFERENCE_RECIPES, TrainingRecipe

__all__ = ["advance", "check_state", "classify_for", "gemm_roles", "init_training_state", "weight_inputs"]


# -- roles and histories -----------------------------------------------------------------------------------


def _recipe_for(policy: Policy, primitive: str) -> TrainingRecipe | None:
    dot = policy.dot_policy if primitive == "dot_general" else policy.conv_policy
    return dot if isinstance(dot, TrainingRecipe) else None


def _histories_needed(roles: GemmRoles, policy: Policy) -> dict[str, int]:
    """``{state key: history length}`` of every history (a tensor of a dot) the program reads."""
    out: dict[str, int] = {}
    for entry in roles.entries:
        recipe = _recipe_for(policy, entry.eqn.primitive.name)
        dtypes = [v.aval.dtype for v in entry.eqn.invars[:2]]
        if recipe is None or not quantized(entry, recipe, dtypes):
            continue
        for key, _ in history_keys(entry, recipe):
            out[key] = recipe.amax_history_len
    return out


def weight_inputs(selection: Any, args: tuple, kwargs: dict, dynamic: list[int]) -> tuple[int, ...] | None:
    """The positions among the traced inputs (``dynamic``: their leaf indices) of the arguments that
    ``selection`` (`Policy.weights`: None, argument numbers, a mask or a predicate) names."""
    if selection is None:
        return None
    flags = input_flags(selection, args, kwargs, "Policy.weights")
    return tuple(j for j, leaf in enumerate(dynamic) if flags[leaf])


def classify_for(closed: Any, policy: Policy, weights: tuple[int, ...] | None = None) -> GemmRoles:
    """The roles of ``closed``'s dots under ``policy`` (the pre-pass of `fpemu.emulate`; ``weights``:
    `weight_inputs`). Every dot's histories can be kept, in loops and on meshes too: nothing to check
    beyond the roles."""
    del policy
    return classify(closed, weights)


def init_training_state(fn: Callable, policy: Policy | FormatLike, *args: Any, **kwargs: Any) -> dict:
    """The first training state of ``emulate(fn, policy, state=True)``: every amax history at zero.

    One float32 history of ``recipe.amax_history_len`` steps per tensor of each dot the recipe
    quantizes with delayed scaling, as Transformer Engine keeps one per tensor: ``"<dot>.x"`` (the
    activation: forward's lhs, wgrad's lhs), ``"<dot>.w"`` (the weight: forward's rhs, dgrad's rhs)
    and ``"<dot>.g"`` (the output's gradient: dgrad's lhs, wgrad's rhs), where ``<dot>`` names the
    forward dot (``"scope/dot_general"``, ``#k`` for the k-th of the same name). Every GEMM that
    quantizes a tensor with delayed scaling reads its history, each with its own format. A dot in a
    ``scan`` or ``shard_map`` body has one history per tensor, which records the largest amax of the
    step's iterations or devices. A zero history gives scale 1 (Transformer Engine's initial scale).
    ``fn`` is traced with ``args`` (shapes and dtypes matter, values do not), as `fpemu.emulate` will
    trace it.

    Args:
      fn: the function that will be emulated (e.g. ``jax.value_and_grad(loss)``).
      policy: the `Policy` (with a stateful recipe, e.g. ``Policy(dot="fp8_delayed")``).
      *args, **kwargs: example arguments.

    Returns:
      A dict of float32 arrays (a pytree: donate it to the jitted step).

    Raises:
      ValueError: a policy without a stateful training recipe.

    Example:
      >>> import jax, jax.numpy as jnp, fpemu
      >>> loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))
      >>> policy = fpemu.Policy(dot="fp8_delayed")
      >>> w, x = jnp.ones((4, 3)), jnp.ones((2, 4))
      >>> state = fpemu.init_training_state(jax.value_and_grad(loss), policy, w, x)
      >>> sorted(state)
      ['dot_general.g', 'dot_general.w', 'dot_general.x']
      >>> (value, grad), state = fpemu.emulate(jax.value_and_grad(loss), policy, state=True)(state, w, x)
      >>> state["dot_general.x"][:2].tolist()       # this step's amax of x, then the older steps
      [1.0, 0.0]
    """
    policy = as_policy(policy)
    if not policy.stateful:
        raise ValueError(
            "init_training_state needs a policy whose training recipe keeps amax histories (delayed scaling), e.g. "
            f"fpemu.Policy(dot='fp8_delayed'); got {policy}"
        )
    closed, _, _, _ = trace(fn, args, kwargs)
    needed = _histories_needed(classify(closed), policy)
    return {key: jnp.zeros((length,), jnp.float32) for key, length in sorted(needed.items())}


def check_state(state: Any, policy: Policy) -> dict:
    """The state given to a stateful emulated function: a dict of 1-D float32 histories."""
    if not isinstance(state, dict):
        raise TypeError(
            f"the training state must be the dict made by fpemu.init_training_state (or returned by the last step), "
            f"got {type(state).__name__}"
        )
    for key, history in state.items():
        shape, dtype = np.shape(history), getattr(history, "dtype", None)
        if not isinstance(key, str) or len(shape) != 1 or dtype != jnp.float32:
            raise ValueError(
                f"the training state's entry {key!r} must be a float32 amax history of shape (length,), got shape "
                f"{shape} and dtype {dtype} (make the state with fpemu.init_training_state)"
            )
    return dict(state)


def advance(histories: dict, found: dict) -> dict:
    """The next state: each history that saw an amax this step gets it in row 0, the older steps
    shifted down by one (the oldest dropped); the others are returned unchanged."""
    out = {}
    for key, history in histories.items():
        channel = found.get(_stats.STATE + key)
        if channel is None:
            out[key] = history
            continue
        amax = _stats.amax_value(channel).reshape(1)
        out[key] = jnp.concatenate([amax, jnp.asarray(history)[:-1]])
    return out


# -- the roles, for people ------------------------------------------------------------------------------


def gemm_roles(fn: Callable, *args: Any, weights: Any = None, **kwargs: Any) -> list[tuple[str, str | None, str]]:
    """How `fpemu.emulate` classifies each dot of ``fn`` under a training or inference recipe, in program order.

    ``weights`` is `Policy.weights` (which arguments hold an inference recipe's weights): a forward
    dot's reason then says which operand is the weight (docs/inference.md).

    Each entry is ``(name, gemm, reason)``: ``name`` is the forward dot the GEMM belongs to (the
    dgrad and wgrad of a layer carry its forward dot's name; statistics and histories use it),
    ``gemm`` is ``"forward"``, ``"dgrad"``, ``"wgrad"`` or None (both operands carry cotangents:
    left in high precision), and ``reason`` says how it was decided (docs/training.md).

    Example:
      >>> import jax, jax.numpy as jnp, fpemu
      >>> def loss(w, x):
      ...     with jax.named_scope("layer"):
      ...         return jnp.sum(jnp.tanh(x @ w))
      >>> for name, gemm, _ in fpemu.gemm_roles(jax.grad(loss, argnums=(0, 1)), jnp.ones((4, 3)), jnp.ones((2, 4))):
      ...     print(name, gemm)
      layer/dot_general forward
      layer/dot_general wgrad
      layer/dot_general dgrad
    """
    closed, _, dynamic, _ = trace(fn, args, kwargs)
    if weights is not None:
        from_policy = Policy(dot=INFERENCE_RECIPES[0], weights=weights).weights  # checked as Policy checks it
        weights = weight_inputs(from_policy, args, kwargs, dynamic)
    return [
        (
            e.name,
            None if e.role is None else e.role.gemm,
            "both operands carry cotangents" if e.role is None else e.role.reason,
        )
        for e in classify(closed, weights).entries
    ]
