"""`fpemu.emulate`: run a JAX function with every floating-point result rounded as a `Policy` says.

The transform is a jaxpr interpreter on documented APIs (``jax.make_jaxpr``, ``jax.extend.core``,
``jax.tree_util``): ``fn`` is traced to a closed jaxpr, its equations are evaluated in order with an
environment dict (`fpemu._emulate.interpreter`), and each primitive is handled by the rule
registered for its name (`fpemu._emulate.registry`). This module imports the rule modules, which
registers them: plain primitives (`rules_plain`), dots and convolutions (`rules_dot`), calls and
custom derivatives (`rules_calls`), control flow (`rules_control`). Statistics are in
`fpemu._emulate.stats`, the policy in `fpemu._emulate.policy`. The contract is docs/emulate.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.typing import ArrayLike

from fpemu._args import bit_source_arg, bool_arg, key_arg
from fpemu._core.registry import FormatLike
from fpemu._emulate import rules_calls, rules_control, rules_dot, rules_plain
from fpemu._emulate import stats as _stats
from fpemu._emulate.inputs import input_flags, trace
from fpemu._emulate.interpreter import Context, State, Training, interpret
from fpemu._emulate.policy import Policy, as_policy, recipe_needs_key
from fpemu._emulate.training_state import advance, check_state, classify_for, weight_inputs
from fpemu._emulate.watch import Watch
from fpemu._engine.rng import seeds_from_key
from fpemu._training.recipes import TrainingRecipe

__all__ = ["EmulateOptions", "checked_options", "emulate", "emulated_function"]

# The rule modules register their rules when imported; nothing else of them is used here.
RULE_MODULES = (rules_plain, rules_dot, rules_calls, rules_control)


def emulate(
    fn: Callable,
    policy: Policy | FormatLike,
    *,
    with_stats: bool = False,
    key: jax.Array | None = None,
    random: Callable[[jax.Array, tuple[int, ...], int], ArrayLike] | None = None,
    state: bool = False,
) -> Callable:
    """Return a function with ``fn``'s signature that runs ``fn`` with its floating-point results
    rounded as ``policy`` says.

    Every primitive that computes new floating-point values (arithmetic, transcendental functions,
    reductions, ``dot_general``...) has its results rounded to the policy's format for it
    (``overrides`` first, else ``default``); data movement and selection (reshape, slice, select,
    max, neg...) is exact and left alone; ``dot_general`` / ``conv_general_dilated`` follow
    ``Policy.dot`` / ``Policy.conv``; nested ``jit``, ``cond``, ``while``, ``scan``,
    ``custom_jvp``/``custom_vjp``, ``jax.checkpoint`` and ``shard_map`` are emulated inside. The
    function's floating-point array arguments (and arrays it closes over) are rounded to ``default``
    on entry unless ``round_inputs=False``; Python scalar constants are always rounded. The rule
    table and every choice are in docs/emulate.md.

    Special values: NaN stays NaN; overflow gives infinity, NaN or ±max as `fpemu.quantize` says for
    the format and mode (``saturate=True`` clamps). A format at least as wide as a result's dtype
    leaves that result unchanged, so ``emulate(f, "fp32")`` on a float32 function is bit-identical
    to ``f``.

    Composition: ``jax.jit(emulate(f, p))`` compiles the emulated program (do this for speed: called
    eagerly, it runs primitive by primitive as ``f`` would). ``jax.grad(emulate(f, p))``
    differentiates the rounded forward pass with straight-through rounding (the backward pass runs
    unrounded, in the dtype); ``emulate(jax.grad(f), p)`` rounds the backward computation too.
    ``jax.vmap`` composes either way.

    Args:
      fn: the function. Array leaves of its arguments (JAX or NumPy arrays) are traced; other leaves
        (Python numbers, strings, None) are treated as static and closed over.
      policy: a `Policy`, or a format (name, dtype or `Format`) meaning ``Policy(default=fmt)``.
      with_stats: also return a statistics pytree:
        ``{site: {"elements", "overflow", "saturated", "underflow", "subnormal", "inf", "nan"}}`` of
        int32 counts, where ``site`` is ``"scope/.../primitive"`` (named scopes from
        ``jax.named_scope``), ``"inputs"`` for the arguments, and ``.lhs``/``.rhs`` suffixes for
        dot operands.
      key: a JAX PRNG key, for (and only for) a stochastic policy (`Policy.stochastic`:
        ``rounding="stochastic"``, a stochastic accumulator, a training recipe with stochastic
        rounding or a random Hadamard transform). Every rounding site folds its own index (and its
        loop iteration) into it.
      random: for a stochastic policy, the source of the random bits instead of fpemu's generator:
        ``random(site_key, shape, random_bits)`` returns integers in ``[0, 2**random_bits)``
        broadcastable to ``shape`` (it runs while the function is traced, on traced keys), and each
        stochastic rounding of a result (with ``Policy.random_bits``) and of a `DotPolicy` dot
        (``random_bits`` 32: its operands' streams, and its running sum's once per chunk, from the
        keys of docs/matmul.md) takes its bits from it. ``random=fpemu.stochastic_bits`` gives
        exactly the bits ``key`` alone gives. Needs ``key``; a training recipe's stochastic
        rounding, and a convolution's stochastic accumulator, are refused with it.
      state: for training recipes with delayed scaling (``Policy(dot="fp8_delayed")``): the emulated
        function takes the amax histories first and returns the new ones,
        ``emulated(state, *args) -> (value, new_state)``; make the first state with
        `fpemu.init_training_state` (docs/training.md).

    Returns:
      ``emulated(*args, **kwargs)``: ``fn``'s value, or ``(value, stats)`` with ``with_stats``;
      with ``state=True``, ``emulated(state, *args, **kwargs) -> (that, new_state)``.

    Raises:
      ValueError: a bad policy field, stochastic rounding without a key (or a key without it), a
        key array of several keys, a format that a result's dtype cannot hold and that cannot hold
        the dtype either (fp16 and a bfloat16 result).
      TypeError: ``fn`` not callable, ``with_stats`` not a bool, ``key`` not a PRNG key.
      NotImplementedError: a primitive without a rule (unless ``passthrough_unknown=True``).

    Example:
      >>> import jax, jax.numpy as jnp, fpemu
      >>> def f(x):
      ...     return jnp.exp(x) * 3.0
      >>> x = jnp.array([0.1, 1.0, 5.0])
      >>> fpemu.emulate(f, "e4m3fn")(x).tolist()
      [3.5, 8.0, 448.0]
      >>> q = lambda v: fpemu.quantize(v, "e4m3fn")           # the same, by hand
      >>> q(q(jnp.exp(q(x))) * 3.0).tolist()
      [3.5, 8.0, 448.0]
      >>> bool((jax.jit(fpemu.emulate(f, "fp32"))(x) == jax.jit(f)(x)).all())
      True
      >>> _, stats = fpemu.emulate(lambda v: jnp.exp(v) * 100.0, "e4m3fn", with_stats=True)(x)
      >>> {field: int(n) for field, n in stats["mul"].items()}  # e**5 * 100 overflows e4m3fn
      {'elements': 3, 'overflow': 1, 'saturated': 0, 'underflow': 0, 'subnormal': 0, 'inf': 0, 'nan': 1}
      >>> jax.grad(lambda v: fpemu.emulate(f, "bf16")(v).sum())(x).tolist()  # straight-through
      [3.3158364295959473, 8.154845237731934, 445.239501953125]
    """
    options = checked_options(fn, policy, with_stats=with_stats, key=key, random=random, state=state)
    return emulated_function(fn, options)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmulateOptions:
    """`emulate`'s options, checked once (`checked_options`)."""

    policy: Policy
    with_stats: bool
    key: jax.Array | None
    random: Callable | None
    stateful: bool


def checked_options(
    fn: Callable, policy: Policy | FormatLike, *, with_stats: bool, key: Any, random: Any, state: bool
) -> EmulateOptions:
    """`emulate`'s arguments checked, each error naming the argument (what `emulate` raises)."""
    policy = as_policy(policy)
    with_stats = bool_arg(with_stats, "with_stats")
    stateful = bool_arg(state, "state")
    if policy.stochastic and key is None:
        raise ValueError(
            "stochastic rounding (Policy.rounding, a DotPolicy's accumulate_rounding, or a training recipe's "
            "stochastic quantizers or random Hadamard transform) needs emulate(..., key=jax.random.key(...))"
        )
    key = key_arg(key, policy.stochastic, "key", what=f"with {policy}")
    random = bit_source_arg(random, policy.stochastic, key is not None)
    if random is not None:
        _check_bit_source(policy)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if policy.stateful and not stateful:
        raise ValueError(
            "this policy's training recipe keeps amax histories (delayed scaling): use "
            "emulate(fn, policy, state=True), which returns emulated(state, *args) -> (value, new_state), with the "
            "first state from fpemu.init_training_state(fn, policy, *args)"
        )
    return EmulateOptions(policy=policy, with_stats=with_stats, key=key, random=random, stateful=stateful)


def emulated_function(fn: Callable, options: EmulateOptions, watch: Watch | None = None) -> Callable:
    """`emulate`'s result for checked options; with ``watch``, every equation is watched
    (`fpemu._emulate.watch`: `fpemu.find_nonfinite`)."""
    policy, with_stats, key, random = options.policy, options.with_stats, options.key, options.random

    def run(histories, args, kwargs):
        flags = input_flags(policy.round_inputs, args, kwargs)
        closed, out_shapes, dynamic, values = trace(fn, args, kwargs)
        root = None if key is None else seeds_from_key(key)  # uint32[2]; sites fold into it
        training = None
        if policy.has_recipe:
            weights = weight_inputs(policy.weights, args, kwargs, dynamic)
            training = Training(classify_for(closed, policy, weights), histories)
        channel = with_stats or histories is not None
        state = State(
            policy, root, {} if channel else None, counting=with_stats, training=training, random=random, watch=watch,
            arguments=tuple(values),  # as they came: the probe of the materializations reads one of them
        )  # fmt: skip
        ctx = Context(state)
        inputs = [ctx.constant(value, "inputs", selected=flags[i]) for value, i in zip(values, dynamic, strict=True)]
        outs = interpret(ctx, closed.jaxpr, list(closed.consts), inputs)
        value = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shapes), outs)
        found = state.stats or {}
        result = (value, _stats.as_pytree(found)) if with_stats else value
        return result, found

    if not options.stateful:

        @functools.wraps(fn)
        def emulated(*args, **kwargs):
            return run(None, args, kwargs)[0]

        return emulated

    @functools.wraps(fn)
    def emulated_with_state(state, *args, **kwargs):
        histories = check_state(state, policy)
        result, found = run(histories, args, kwargs)
        return result, advance(histories, found)

    return emulated_with_state


def _check_bit_source(policy: Policy) -> None:
    """``random=`` supplies the bits of the policy's stochastic roundings (results, DotPolicy dots); a
    training recipe's quantizers draw from keys of their own."""
    for dot in (policy.dot, policy.conv):
        if isinstance(dot, TrainingRecipe) and recipe_needs_key(dot):
            raise ValueError(
                f"emulate(random=...) does not reach the stochastic rounding of the training recipe {dot.name!r}; "
                "pass key= alone"
            )
