"""`emulate`: run a JAX function with every floating-point result rounded as a `Policy` says.

The transform is a jaxpr interpreter on documented APIs (``jax.make_jaxpr``, ``jax.extend.core``,
``jax.tree_util``): ``fn`` is traced to a closed jaxpr, its equations are evaluated in order with an
environment dict, and each primitive is handled by the rule registered for its name in
`fpemu._emulate.rules` (bind and round, bind unchanged, recurse into a sub-jaxpr...). Statistics
are in `fpemu._emulate.stats`, the policy in `fpemu._emulate.policy`. The contract is docs/emulate.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import DropVar, Jaxpr, Literal, jaxprs_in_params

from fpemu._engine import rng as _random

from fpemu._emulate import stats as _stats
from fpemu._engine.convert import fits
from fpemu._emulate.rules import RULES, fold, is_float, is_identity, round_results
from fpemu._core.format import Format
from fpemu._emulate.policy import DotPolicy, Policy, as_policy
from fpemu._ops.quantize import quantize
from fpemu._core.registry import get_format

__all__ = ["DotPolicy", "Policy", "emulate"]

_QUANTIZE_DTYPES = ("float16", "bfloat16", "float32", "float64")
_DEFAULT = object()  # "the policy's format for the current primitive"


# -- rounding one value -------------------------------------------------------------------------------


def _round_value(x: jax.Array, fmt: Format, policy: Policy, rounding: str, key, where: str) -> jax.Array:
    """``x`` rounded to ``fmt`` under ``policy`` (``rounding`` and ``key`` given separately)."""
    container = get_format(x.dtype)
    if not fits(fmt, container):
        if fits(container, fmt):
            return x  # the dtype is narrower than the format: its values are values of the format
        raise ValueError(
            f"fpemu.emulate: cannot round the {container.name} values of {where} to {fmt.name}: neither format "
            f"holds the other's values ({fmt.name}: {fmt.mantissa_bits} mantissa bits, max {fmt.max:g}; "
            f"{container.name}: {container.mantissa_bits} mantissa bits, max {container.max:g}). Compute in a dtype "
            "that holds the format (e.g. call the function with float32 arrays) or pick a format that fits."
        )
    if is_identity(container, fmt, policy):
        return x
    options = dict(saturate=policy.saturate, subnormals=policy.subnormals, rounding=rounding)
    if rounding == "stochastic":
        options.update(key=key, random_bits=policy.random_bits)
    if container.name in _QUANTIZE_DTYPES:
        return quantize(x, fmt, **options)
    return quantize(x.astype(jnp.float32), fmt, **options).astype(x.dtype)  # float8 data: exact round trip


@functools.lru_cache(maxsize=4096)
def _round_literal(dtype: str, data: bytes, shape: tuple, fmt: Format, policy: Policy) -> tuple:
    """A literal's rounded value (None if unchanged) and its counts, computed once on the host."""
    value = np.frombuffer(data, dtype=jnp.dtype(dtype)).reshape(shape)
    rounding = "nearest_even" if policy.rounding == "stochastic" else policy.rounding
    with jax.ensure_compile_time_eval():
        x = jnp.asarray(value)
        rounded = _round_value(x, fmt, policy, rounding, None, "a literal")
        out, counts = np.asarray(rounded), np.asarray(_stats.counts(x, rounded, fmt))
    return (None if out.tobytes() == value.tobytes() else out), counts


# -- the interpreter ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _State:
    """What every view of one interpretation (one traced function body) shares."""

    policy: Policy
    key: Any  # None, or the uint32[2] key this body's rounding sites fold their index into
    stats: dict[str, jax.Array] | None  # None: statistics off
    sites: int = 0


def _site_name(stack: tuple, primitive: str) -> str:
    """``scope/.../primitive``; under a transposition (the backward pass of a ``jax.grad`` traced
    inside ``emulate``), ``transpose(scope/...)/primitive``."""
    scopes = [element.name for element in stack if type(element).__name__ == "Scope"]
    transposed = any(type(e).__name__ == "Transform" and e.name == "transpose" for e in stack)
    path = "/".join(scopes)
    if transposed:
        path = f"transpose({path})" if path else "transpose"
    return f"{path}/{primitive}" if path else primitive


class Context:
    """The interpreter's view of one equation: shared state, the absolute name stack, the equation."""

    __slots__ = ("state", "stack", "eqn")

    def __init__(self, state: _State, stack: tuple = (), eqn=None):
        self.state, self.stack, self.eqn = state, stack, eqn

    @property
    def policy(self) -> Policy:
        return self.state.policy

    @property
    def stats_enabled(self) -> bool:
        return self.state.stats is not None

    # -- services for the rules

    def bind(self, eqn, invals: list) -> list:
        """The primitive of ``eqn`` applied to ``invals``, unchanged (as ``jax.core.eval_jaxpr`` does)."""
        params = eqn.primitive.get_bind_params(eqn.params)
        if isinstance(params, tuple):  # jax < 0.7: (subfuns, params)
            subfuns, params = params
            invals = [*subfuns, *invals]
        out = eqn.primitive.bind(*invals, **params)
        return list(out) if eqn.primitive.multiple_results else [out]

    def format_for(self) -> Format | None:
        return self.policy.format_for(self.eqn.primitive.name)

    def site_key(self):
        """A fresh key for the next rounding site (None without stochastic rounding)."""
        if self.state.key is None:
            return None
        self.state.sites += 1
        return fold(self.state.key, self.state.sites)

    def round_result(self, x, *, fmt: Any = _DEFAULT, suffix: str = "") -> Any:
        """``x`` rounded to ``fmt`` (default: the policy's format for this primitive), and counted."""
        if fmt is _DEFAULT:
            fmt = self.format_for()
        site = _site_name(self.stack, self.eqn.primitive.name) + suffix
        return self.round(x, fmt, site)

    def round(self, x, fmt: Format | None, site: str, rounding: str | None = None) -> Any:
        if fmt is None or not is_float(jnp.result_type(x)):
            return x
        rounding = rounding or self.policy.rounding
        key = self.site_key() if rounding == "stochastic" else None
        y = _round_value(x, fmt, self.policy, rounding, key, site)
        if self.state.stats is not None:
            _stats.merge(self.state.stats, {site: _stats.counts(x, y, fmt)})
        return y

    def round_value(self, x, fmt: Format | None) -> Any:
        """``x`` rounded to ``fmt``, not counted (operands that are already counted where produced)."""
        if fmt is None or not is_float(jnp.result_type(x)):
            return x
        key = self.site_key() if self.policy.rounding == "stochastic" else None
        where = _site_name(self.stack, self.eqn.primitive.name)
        return _round_value(x, fmt, self.policy, self.policy.rounding, key, where)

    def merge_stats(self, stats: dict) -> None:
        if self.state.stats is not None:
            _stats.merge(self.state.stats, stats)

    def interpret(self, jaxpr: Jaxpr, consts: list, args: list) -> list:
        """Interpret a sub-jaxpr in place (same state: sites, keys and counts continue)."""
        return interpret(Context(self.state, self.stack), jaxpr, consts, args)

    def subfunction(self, jaxpr: Jaxpr) -> Callable:
        """``fn(key, consts, *args) -> (outs, stats)``: the sub-jaxpr as an emulated function with its
        own state, for a combinator to trace (``lax.scan``, ``jax.custom_jvp``...)."""
        policy, with_stats, prefix = self.policy, self.stats_enabled, self.stack  # not the state: it holds tracers

        def fn(key, consts, *args):
            sub = _State(policy, key, {} if with_stats else None)
            outs = interpret(Context(sub, prefix), jaxpr, list(consts), list(args))
            return outs, dict(sub.stats or {})

        return fn

    # -- values entering the program

    def literal(self, literal: Literal) -> Any:
        """A Python-scalar constant of the program, rounded to ``default`` (nearest even when the
        policy is stochastic) and counted under ``"constants"`` each time it is used."""
        value = literal.val
        fmt = self.policy.default
        dtype = np.result_type(value)
        if fmt is None or not is_float(dtype) or not isinstance(value, (np.ndarray, np.generic, float)):
            return value
        array = np.asarray(value, dtype)
        rounded, counts = _round_literal(dtype.name, array.tobytes(), array.shape, fmt, self.policy)
        if self.state.stats is not None:
            _stats.merge(self.state.stats, {"constants": jnp.asarray(counts)})
        return value if rounded is None else rounded

    def constant(self, value: Any, site: str) -> Any:
        """An argument (``site="inputs"``) or closed-over constant array (``"constants"``, nearest
        even when the policy is stochastic), rounded to ``default`` if ``round_inputs``."""
        if not self.policy.round_inputs or self.policy.default is None:
            return value
        stochastic = self.policy.rounding == "stochastic"
        rounding = "nearest_even" if stochastic and site == "constants" else None
        return self.round(value, self.policy.default, site, rounding)

    # -- one equation

    def apply(self, eqn, invals: list) -> list:
        name = eqn.primitive.name
        view = Context(self.state, self.stack + tuple(eqn.source_info.name_stack.stack), eqn)
        if view.excluded(name):
            return view.bind(eqn, invals)
        entry = RULES.get(name)
        if entry is not None:
            return entry.rule(view, eqn, invals)
        has_float_result = any(is_float(v.aval.dtype) for v in eqn.outvars if hasattr(v.aval, "dtype"))
        if not has_float_result and not any(True for _ in jaxprs_in_params(eqn.params)):
            return view.bind(eqn, invals)  # integer, bool and key primitives: nothing to round
        if self.policy.passthrough_unknown:
            return round_results(view, eqn, invals)
        raise NotImplementedError(
            f"fpemu.emulate has no rule for the primitive {name!r} (at {_site_name(view.stack, name)!r}). "
            f"Policy(passthrough_unknown=True) binds it unchanged and rounds its floating-point results; "
            f"Policy(exclude=({name!r},)) leaves it alone entirely."
        )

    def excluded(self, primitive: str) -> bool:
        exclude = self.policy.exclude
        if not exclude:
            return False
        if primitive in exclude:
            return True
        scopes = [e.name for e in self.stack if type(e).__name__ == "Scope"]
        path = "/".join(scopes)
        return any(name in scopes or path == name or path.startswith(name + "/") for name in exclude)


def _scopes(eqn) -> contextlib.AbstractContextManager:
    """Re-enter the equation's named scopes, so that traces of the emulated function keep them, and
    its context (``eqn.ctx``: compute type, threefry partitioning...), as ``jax.core.eval_jaxpr`` does."""
    names = [e.name for e in eqn.source_info.name_stack.stack if type(e).__name__ == "Scope"]
    manager = getattr(getattr(eqn, "ctx", None), "manager", None)
    if not names and manager is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if manager is not None:
        stack.enter_context(manager)
    for name in names:
        stack.enter_context(jax.named_scope(name))
    return stack


def interpret(ctx: Context, jaxpr: Jaxpr, consts: list, args: list) -> list:
    """Evaluate ``jaxpr`` on ``args`` with every equation handled by its rule."""
    env: dict = {}

    def read(var):
        return ctx.literal(var) if isinstance(var, Literal) else env[var]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = ctx.constant(value, "constants")
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        invals = [read(var) for var in eqn.invars]
        with _scopes(eqn):
            outvals = ctx.apply(eqn, invals)
        for var, value in zip(eqn.outvars, outvals, strict=True):
            if not isinstance(var, DropVar):
                env[var] = value
    return [read(var) for var in jaxpr.outvars]


# -- the public transform -----------------------------------------------------------------------------


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def emulate(fn: Callable, policy: Policy | Any, *, with_stats: bool = False, key: jax.Array | None = None) -> Callable:
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
      key: a JAX PRNG key, for (and only for) ``Policy(rounding="stochastic")``. Every rounding site
        folds its own index (and its loop iteration) into it.

    Returns:
      ``emulated(*args, **kwargs)``: ``fn``'s value, or ``(value, stats)`` with ``with_stats``.

    Raises:
      ValueError: a bad policy field, stochastic rounding without a key (or a key without it), a
        format that a result's dtype cannot hold and that cannot hold the dtype either (fp16 and a
        bfloat16 result).
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
    policy = as_policy(policy)
    if not isinstance(with_stats, (bool, np.bool_)):
        raise TypeError(f"with_stats must be a bool, got {with_stats!r}")
    if policy.stochastic and key is None:
        raise ValueError(
            "stochastic rounding (Policy.rounding or a DotPolicy's accumulate_rounding) needs "
            "emulate(..., key=jax.random.key(...))"
        )
    if key is not None and not policy.stochastic:
        raise ValueError(f"key is only used with stochastic rounding, and this policy has none: {policy!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")

    @functools.wraps(fn)
    def emulated(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        dynamic = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

        def flat_fn(*values):
            full = list(leaves)
            for i, value in zip(dynamic, values):
                full[i] = value
            call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
            return fn(*call_args, **call_kwargs)

        values = [jnp.asarray(leaves[i]) if not isinstance(leaves[i], jax.Array) else leaves[i] for i in dynamic]
        closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*values)
        root = None if key is None else _random.seeds_from_key(key)  # uint32[2]; sites fold into it
        state = _State(policy, root, {} if with_stats else None)
        ctx = Context(state)
        inputs = [ctx.constant(value, "inputs") for value in values]
        outs = interpret(ctx, closed.jaxpr, list(closed.consts), inputs)
        value = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shapes), outs)
        if with_stats:
            return value, _stats.as_pytree(state.stats)
        return value

    return emulated
