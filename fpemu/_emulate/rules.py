"""The rules of `fpemu.emulate`: one per primitive name, in a registry filled by a decorator.

A rule takes the interpretation context, the equation and its input values, and returns the output
values (always a list). The context (`fpemu._emulate.interpreter.Context`) supplies what rules share: ``bind``
(the primitive, unchanged), ``round_result`` (round a result to the policy's format and count it),
``interpret`` (inline a sub-jaxpr), ``subfunction`` (a sub-jaxpr as an emulated function for a
control-flow combinator), ``site_key`` (a fresh key for stochastic rounding) and ``merge_stats``.

Kinds, listed in docs/emulate.md:

- ``rounded``: bind, then round every floating-point result to the policy's format for the
  primitive (its override, else ``default``).
- ``exact``: bind; no rounding. Data movement, selection and sign changes return values that are
  already among their inputs (or their negations), so values of a format stay values of it.
- ``dot``/``conv``: `fpemu.dot_general` / `fpemu.conv_general_dilated` under the policy's `DotPolicy`;
  without one, F operands and the program's own dot (`_implicit_dot`).
- ``convert``: ``convert_element_type``, which rounds only when it creates new values.
- ``inline``: ``closed_call``/``core_call``: the body is interpreted in place.
- ``call``: nested ``jit``: ``jax.jit`` around the emulated body (cached), keeping jit boundaries.
- ``control``: ``cond``, ``while``, ``scan``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat2``
  (``jax.checkpoint``), ``shard_map``: rebuilt with the public combinator around an emulated body.

A primitive without a rule whose outputs are all non-float and that has no sub-jaxpr (comparisons,
integer and bit operations, PRNG key operations, callbacks without results) is bound unchanged.
Any other primitive without a rule raises ``NotImplementedError`` naming it, unless the policy says
``passthrough_unknown=True``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr

from fpemu._emulate import stats as _stats
from fpemu._engine.convert import fits
from fpemu._core.registry import get_format

if TYPE_CHECKING:  # pragma: no cover
    from fpemu._emulate.interpreter import Context

Rule = Callable[["Context", Any, list], list]


@dataclasses.dataclass(frozen=True)
class RuleEntry:
    rule: Rule
    kind: str


RULES: dict[str, RuleEntry] = {}
KINDS = ("rounded", "exact", "dot", "conv", "convert", "inline", "call", "control")


def register(*names: str, kind: str) -> Callable[[Rule], Rule]:
    """Register ``rule`` for the primitives ``names`` (decorator)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")

    def decorate(rule: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"primitive {name!r} already has an emulate rule ({RULES[name].kind})")
            RULES[name] = RuleEntry(rule, kind)
        return rule

    return decorate


def rounded_primitives() -> frozenset[str]:
    """Primitive names whose results `emulate` rounds (the valid keys of ``Policy.overrides``)."""
    return frozenset(name for name, entry in RULES.items() if entry.kind in ("rounded", "dot", "conv", "convert"))


def is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


def is_identity(container, fmt, policy) -> bool:
    """Whether rounding every value of the ``container`` format (a dtype's) to ``fmt`` under
    ``policy`` returns it unchanged, bit for bit."""
    if not fits(container, fmt):
        return False
    if container.has_inf and (policy.saturate or not fmt.has_inf):
        return False
    return policy.subnormals or not container.has_subnormals or container.min_subnormal >= fmt.min_normal


# -- rounded and exact primitives ---------------------------------------------------------------------

ROUNDED = (
    # arithmetic
    "add", "add_any", "sub", "mul", "div", "rem", "pow", "integer_pow", "square", "sqrt", "rsqrt", "cbrt",
    "nextafter", "floor", "ceil", "round",
    # transcendental and special functions
    "exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma", "digamma",
    "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma", "zeta", "bessel_i0e",
    "bessel_i1e", "regularized_incomplete_beta",
    # reductions and scans: the result is rounded, partial sums are not (docs/emulate.md)
    "reduce_sum", "reduce_prod", "reduce", "cumsum", "cumprod", "cumlogsumexp", "reduce_window_sum",
    "reduce_window", "select_and_scatter_add", "scatter-add", "scatter-sub", "scatter-mul", "ragged_dot_general",
    # collectives that add
    "psum", "psum_invariant", "reduce_scatter",
    # new values from non-float data, reinterpretation, precision changes
    "iota", "bitcast_convert_type", "reduce_precision", "rng_uniform", "random_gamma", "real", "imag",
    # linear algebra: computed at the dtype's precision, results rounded
    "cholesky", "cholesky_update", "triangular_solve", "eigh", "eig", "svd", "qr", "householder_product",
    "geqrf", "geqp3", "ormqr", "lu", "schur", "hessenberg", "tridiagonal", "tridiagonal_solve",
    "symmetric_product", "fft",
    # host callbacks: the host function is not emulated, its results are rounded
    "pure_callback", "io_callback",
)  # fmt: skip

EXACT = (
    # sign and selection: the result is an input or its negation
    "neg", "abs", "sign", "max", "min", "clamp", "select_n", "reduce_max", "reduce_min", "argmax", "argmin",
    "cummax", "cummin", "sort", "top_k", "approx_top_k", "reduce_window_max", "reduce_window_min",
    "select_and_gather_add", "scatter", "scatter-min", "scatter-max", "pmax", "pmin",
    # data movement
    "reshape", "broadcast_in_dim", "transpose", "squeeze", "slice", "dynamic_slice", "dynamic_update_slice",
    "gather", "concatenate", "pad", "rev", "split", "copy", "empty", "zeros_like",
    "all_gather", "all_gather_invariant", "all_to_all", "ppermute", "pbroadcast", "pvary",
    # identities and annotations
    "stop_gradient", "name", "optimization_barrier", "sharding_constraint", "device_put", "reshard",
    "layout_constraint",
)  # fmt: skip


@register(*ROUNDED, kind="rounded")
def round_results(ctx: Context, eqn, invals: list) -> list:
    """Bind, then round every floating-point result to the policy's format for this primitive."""
    return [ctx.round_result(out) for out in ctx.bind(eqn, invals)]


@register(*EXACT, kind="exact")
def exact(ctx: Context, eqn, invals: list) -> list:
    """Bind unchanged: the results are values (or negated values) of the inputs."""
    return ctx.bind(eqn, invals)


# -- convert_element_type -----------------------------------------------------------------------------


@register("convert_element_type", kind="convert")
def convert(ctx: Context, eqn, invals: list) -> list:
    """Widening float casts are exact (no rounding). A narrowing float cast rounds once, from the wide
    value, to the policy's format when that format fits the narrow dtype (then the cast is exact), else
    the cast's own rounding is followed by the usual rounding. Casts from integers and bools create new
    values: their results are rounded."""
    (x,) = invals
    new_dtype = eqn.params["new_dtype"]
    if not is_float(new_dtype):
        return ctx.bind(eqn, invals)
    if not is_float(x.dtype):
        return round_results(ctx, eqn, invals)
    src, dst = get_format(x.dtype), get_format(new_dtype)
    if fits(src, dst):
        return ctx.bind(eqn, invals)  # widening (or same type): exact
    fmt = ctx.format_for()
    if fmt is not None and fits(fmt, dst):
        return ctx.bind(eqn, [ctx.round_result(x, fmt=fmt)])  # one rounding, then an exact cast
    return round_results(ctx, eqn, invals)


# -- dot_general and conv_general_dilated -------------------------------------------------------------


def _operands(ctx: Context, dot_policy, a, b) -> tuple:
    """Round the operands here when the counts are wanted or subnormals are flushed (the matmul
    rounds them again, an exact no-op); otherwise the matmul rounds them itself."""
    if ctx.stats_enabled or not ctx.policy.subnormals:
        a = ctx.round_result(a, fmt=dot_policy.lhs, suffix=".lhs")
        b = ctx.round_result(b, fmt=dot_policy.rhs, suffix=".rhs")
    return a, b


def _matmul_options(ctx: Context, dot_policy, out_dtype) -> dict:
    # fpemu.dot_general needs a key whenever any of its roundings is stochastic (a narrow accumulator
    # rounds after every product even without accumulate_every).
    stochastic = "stochastic" in (ctx.policy.rounding, dot_policy.accumulate_rounding)
    return dict(
        lhs=dot_policy.lhs,
        rhs=dot_policy.rhs,
        accumulate=dot_policy.accumulate,
        out=None,  # rounded by round_result below, which also counts
        accumulate_every=dot_policy.accumulate_every,
        rounding=ctx.policy.rounding,
        accumulate_rounding=dot_policy.accumulate_rounding,
        saturate=ctx.policy.saturate,
        key=ctx.site_key() if stochastic else None,
        preferred_element_type=out_dtype,
    )


def _implicit_format(ctx: Context, a, b):
    """Without ``Policy.dot``: the format F for the primitive (override, else default) if it rounds
    the operands, else None (F at least as wide as their dtypes, or unable to hold their values)."""
    fmt = ctx.format_for()
    if fmt is None:
        return None
    containers = [get_format(a.dtype), get_format(b.dtype)]
    if any(is_identity(c, fmt, ctx.policy) or not fits(fmt, c) for c in containers):
        return None
    return fmt


def _implicit_dot(ctx: Context, eqn, a, b, fmt) -> list:
    """A program whose values are F values: operands rounded to F (a no-op for the results of
    rounded primitives), the primitive computed as the program says (exact products of F values,
    accumulation in the result dtype), the result rounded to F. float32 operands of a format that
    fits bfloat16 are cast to bfloat16 (exactly) with a float32 result: the same products and
    accumulator, at bf16 matmul speed."""
    a = ctx.round_value(a, fmt)
    b = ctx.round_value(b, fmt)
    params = dict(eqn.params)
    out_dtype = eqn.outvars[0].aval.dtype
    if a.dtype == b.dtype == out_dtype == jnp.float32 and fits(fmt, get_format("bf16")):
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
        params["preferred_element_type"] = np.dtype(np.float32)
    y = eqn.primitive.bind(a, b, **params)
    return [ctx.round_result(y)]


def _dot_like(ctx: Context, eqn, invals: list, explicit, compute) -> list:
    a, b = invals
    if not (is_float(a.dtype) and is_float(b.dtype)):
        return round_results(ctx, eqn, invals)
    if explicit is None:
        fmt = _implicit_format(ctx, a, b)
        return round_results(ctx, eqn, invals) if fmt is None else _implicit_dot(ctx, eqn, a, b, fmt)
    a, b = _operands(ctx, explicit, a, b)
    out_dtype = eqn.outvars[0].aval.dtype
    y = compute(a, b, _matmul_options(ctx, explicit, out_dtype))
    y = y.astype(out_dtype) if y.dtype != out_dtype else y
    return [ctx.round_result(y, fmt=explicit.out or ctx.format_for())]


@register("dot_general", kind="dot")
def dot_general(ctx: Context, eqn, invals: list) -> list:
    """Under ``Policy.dot``: `fpemu.dot_general` with its formats, the result rounded to
    ``DotPolicy.out``, else to the policy's format for ``dot_general``. Without it: `_implicit_dot`.
    Integer dots, and formats that leave the operands alone: a rounded primitive."""
    from fpemu._ops import matmul as _matmul

    dimension_numbers = eqn.params["dimension_numbers"]
    compute = lambda a, b, options: _matmul.dot_general(a, b, dimension_numbers, **options)  # noqa: E731
    return _dot_like(ctx, eqn, invals, ctx.policy.dot, compute)


@register("conv_general_dilated", kind="conv")
def conv_general_dilated(ctx: Context, eqn, invals: list) -> list:
    """As dot_general, with `fpemu.conv_general_dilated` and ``Policy.conv`` (else ``Policy.dot``)."""
    from fpemu._ops import matmul as _matmul

    p = eqn.params

    def compute(a, b, options):
        return _matmul.conv_general_dilated(
            a, b, p["window_strides"], p["padding"], lhs_dilation=p["lhs_dilation"],
            rhs_dilation=p["rhs_dilation"], dimension_numbers=p["dimension_numbers"],
            feature_group_count=p["feature_group_count"], batch_group_count=p["batch_group_count"], **options,
        )  # fmt: skip

    return _dot_like(ctx, eqn, invals, ctx.policy.conv_policy, compute)


# -- nested calls ------------------------------------------------------------------------------------


def _jaxpr_and_consts(value) -> tuple[Jaxpr, list]:
    if isinstance(value, ClosedJaxpr):
        return value.jaxpr, list(value.consts)
    return value, []


@register("closed_call", "core_call", kind="inline")
def inline(ctx: Context, eqn, invals: list) -> list:
    """Interpret the body in place."""
    jaxpr, consts = _jaxpr_and_consts(eqn.params["call_jaxpr"])
    return ctx.interpret(jaxpr, consts, invals)


# ClosedJaxpr of a nested jit (JAX reuses the object while its trace is cached) -> {configuration: jitted}
_JIT_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@register("jit", "pjit", kind="call")
def nested_jit(ctx: Context, eqn, invals: list) -> list:
    """``jax.jit`` (same ``inline``) around the emulated body, so that the program keeps its jit
    boundaries: eagerly, nested jit functions still run compiled, as they do in ``fn``. The jitted
    body is cached per jaxpr and configuration. Shardings and donation of the inner jit's arguments
    are not re-imposed."""
    closed = eqn.params["jaxpr"]
    inline_flag = bool(eqn.params.get("inline", False))
    key = ctx.site_key()
    scope = tuple((type(e).__name__, e.name) for e in ctx.stack)
    config = (ctx.policy, ctx.stats_enabled, key is None, scope, inline_flag)
    cached = _JIT_CACHE.setdefault(closed, {})
    jitted = cached.get(config)
    if jitted is None:
        body = ctx.subfunction(closed.jaxpr)
        consts = list(closed.consts)

        def call(key, *args):
            return body(key, consts, *args)

        call.__name__ = call.__qualname__ = str(eqn.params.get("name", "jit"))
        jitted = cached[config] = jax.jit(call, inline=inline_flag)
    outs, stats = jitted(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


# -- control flow -------------------------------------------------------------------------------------


def _staged(fn: Callable, *args) -> tuple[Callable, Any]:
    """Trace ``fn(*args)`` once; return a replay of the traced jaxpr (cheap to re-trace) and the output
    shapes. Used where a combinator needs the statistics' structure before it traces the body."""
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    tree = jax.tree_util.tree_structure(shapes)

    def replay(*call_args):
        flat = jax.tree_util.tree_leaves(call_args)
        return jax.tree_util.tree_unflatten(tree, jax.extend.core.jaxpr_as_fun(closed)(*flat))

    return replay, shapes


def _pad(stats: dict, sites: list[str]) -> dict:
    return {site: stats[site] if site in stats else _stats.zeros() for site in sites}


def _float0_zeros(tree):
    return jax.tree_util.tree_map(lambda v: np.zeros(np.shape(v), jax.dtypes.float0), tree)


def fold(key, *data):
    """A new uint32[2] key from ``key`` (uint32[2], or None) and integers (Python ints or traced
    scalars): two rounds of fpemu's counter hash, far cheaper to compile than ``jax.random.fold_in``.
    `fpemu.quantize` and `fpemu.dot_general` accept such legacy-style uint32 keys."""
    from fpemu._engine.rng import _mix

    for d in data:
        if key is None:
            return None
        d = jnp.asarray(d).astype(jnp.uint32)
        h0 = _mix(key[0] ^ _mix(d + jnp.uint32(0x9E3779B9)))
        h1 = _mix(key[1] + h0)
        key = jnp.stack([h0, h1])
    return key


@register("cond", kind="control")
def cond(ctx: Context, eqn, invals: list) -> list:
    """``lax.switch`` over the emulated branches; the statistics of the branch taken are counted."""
    index, *ops = invals
    branches = eqn.params["branches"]
    key = ctx.site_key()
    staged, sites = [], []
    for branch in branches:
        consts = list(branch.consts)
        replay, shapes = _staged(ctx.subfunction(branch.jaxpr), key, consts, *ops)
        staged.append((replay, consts))
        sites += [site for site in shapes[1] if site not in sites]

    def make(replay, consts):
        def branch(key, *ops):
            outs, stats = replay(key, consts, *ops)
            return outs, _pad(stats, sites)

        return branch

    outs, stats = lax.switch(index, [make(r, c) for r, c in staged], key, *ops)
    ctx.merge_stats(stats)
    return list(outs)


@register("while", kind="control")
def while_loop(ctx: Context, eqn, invals: list) -> list:
    """``lax.while_loop`` over the emulated condition and body. With statistics (or stochastic
    rounding) the loop also carries an iteration counter; with statistics the condition is evaluated
    at the end of each body step and its predicate carried, so that the condition's counts are kept."""
    p = eqn.params
    cond_consts = invals[: p["cond_nconsts"]]
    body_consts = invals[p["cond_nconsts"] : p["cond_nconsts"] + p["body_nconsts"]]
    init = invals[p["cond_nconsts"] + p["body_nconsts"] :]
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
    cond_sub, body_sub = ctx.subfunction(cond_jaxpr.jaxpr), ctx.subfunction(body_jaxpr.jaxpr)
    # the closed jaxprs' own consts feed their constvars; the operand consts are leading arguments
    cond_fn = lambda key, consts, *carry: cond_sub(key, cond_jaxpr.consts, *consts, *carry)  # noqa: E731
    body_fn = lambda key, consts, *carry: body_sub(key, body_jaxpr.consts, *consts, *carry)  # noqa: E731
    cond_all, body_all = list(cond_consts), list(body_consts)
    key = ctx.site_key()
    cond_key = lambda i: fold(key, 0, i)  # noqa: E731
    body_key = lambda i: fold(key, 1, i)  # noqa: E731
    zero = jnp.zeros((), jnp.int32)

    if not ctx.stats_enabled:

        def cond_plain(state):
            i, carry = state
            return cond_fn(cond_key(i), cond_all, *carry)[0][0]

        def body_plain(state):
            i, carry = state
            return i + 1, body_fn(body_key(i), body_all, *carry)[0]

        return list(lax.while_loop(cond_plain, body_plain, (zero, list(init)))[1])

    cond_replay, cond_shapes = _staged(cond_fn, cond_key(zero), cond_all, *init)
    body_replay, body_shapes = _staged(body_fn, body_key(zero), body_all, *init)
    sites = list(dict.fromkeys([*cond_shapes[1], *body_shapes[1]]))
    (pred0,), cond_stats0 = cond_replay(cond_key(zero), cond_all, *init)

    def body(state):
        i, carry, _, acc = state
        carry, body_stats = body_replay(body_key(i), body_all, *carry)
        (pred,), cond_stats = cond_replay(cond_key(i + 1), cond_all, *carry)
        acc = dict(acc)
        _stats.merge(acc, body_stats)
        _stats.merge(acc, cond_stats)
        return i + 1, list(carry), pred, acc

    _, out, _, stats = lax.while_loop(lambda s: s[2], body, (zero, list(init), pred0, _pad(cond_stats0, sites)))
    ctx.merge_stats(stats)
    return list(out)


@register("scan", kind="control")
def scan(ctx: Context, eqn, invals: list) -> list:
    """``lax.scan`` over the emulated body (same length, direction and unroll). Per-iteration counts
    leave the loop as stacked outputs and are summed."""
    p = eqn.params
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    consts, init, xs = invals[:n_consts], invals[n_consts : n_consts + n_carry], invals[n_consts + n_carry :]
    closed = p["jaxpr"]
    body_fn = ctx.subfunction(closed.jaxpr)
    key = ctx.site_key()
    length = p["length"]

    def step(carry, x):
        i, x = x
        outs, stats = body_fn(fold(key, i) if key is not None else None, closed.consts, *consts, *carry, *x)
        return outs[:n_carry], (outs[n_carry:], stats)

    index = jnp.arange(length, dtype=jnp.int32) if key is not None else None
    extra = {"_split_transpose": p["_split_transpose"]} if "_split_transpose" in p else {}
    carry, (ys, stats) = lax.scan(
        step, list(init), (index, list(xs)), length=length, reverse=p["reverse"], unroll=p["unroll"], **extra
    )
    ctx.merge_stats({site: jnp.sum(vector, axis=0, dtype=jnp.int32) for site, vector in stats.items()})
    return [*carry, *ys]


def _emulated_primal_original_tangent(ctx: Context, eqn, invals: list, primal: Callable) -> list:
    """A ``jax.custom_jvp`` whose primal is ``primal(key, *invals) -> (outs, stats)`` (emulated) and
    whose tangent is the original primitive's (``jax.jvp`` of it) at the rounded primal inputs."""
    key = ctx.site_key()

    def original(*args):
        return ctx.bind(eqn, list(args))

    @jax.custom_jvp
    def emulated(key, *args):
        return primal(key, *args)

    @emulated.defjvp
    def emulated_jvp(primals, tangents):
        key, *args = primals
        _, *arg_tangents = tangents
        outs, stats = emulated(key, *args)
        _, out_tangents = jax.jvp(original, tuple(args), tuple(arg_tangents))
        return (outs, stats), (list(out_tangents), _float0_zeros(stats))

    outs, stats = emulated(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


@register("custom_jvp_call", kind="control")
def custom_jvp_call(ctx: Context, eqn, invals: list) -> list:
    """A ``jax.custom_jvp`` whose primal is the emulated function and whose tangent is the original
    rule's tangent, evaluated at the (rounded) primal inputs: so ``jax.grad(emulate(f))`` keeps f's
    custom derivatives (relu, gelu, logsumexp...) and its primal values are the emulated ones."""
    closed = eqn.params["call_jaxpr"]
    fn = ctx.subfunction(closed.jaxpr)
    consts = list(closed.consts)
    return _emulated_primal_original_tangent(ctx, eqn, invals, lambda key, *args: fn(key, consts, *args))


@register("custom_linear_solve", kind="control")
def custom_linear_solve(ctx: Context, eqn, invals: list) -> list:
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
def custom_vjp_call(ctx: Context, eqn, invals: list) -> list:
    """A ``jax.custom_vjp`` whose primal is the emulated function and whose backward pass is the
    original rule (its forward re-run, unemulated, on the rounded inputs to get its residuals)."""
    closed = eqn.params["call_jaxpr"]
    fn = ctx.subfunction(closed.jaxpr)
    consts = list(closed.consts)
    key = ctx.site_key()

    def original(*args):
        return ctx.bind(eqn, list(args))

    @jax.custom_vjp
    def emulated(key, consts, *args):
        return fn(key, consts, *args)

    def fwd(key, consts, *args):
        return emulated(key, consts, *args), (key, consts, args)

    def bwd(residuals, cotangents):
        key, consts, args = residuals
        out_cotangents, _ = cotangents
        _, vjp = jax.vjp(original, *args)
        return (None, [None] * len(consts), *vjp(list(out_cotangents)))

    emulated.defvjp(fwd, bwd)
    outs, stats = emulated(key, consts, *invals)
    ctx.merge_stats(stats)
    return list(outs)


@register("remat2", "checkpoint", kind="control")
def remat(ctx: Context, eqn, invals: list) -> list:
    """``jax.checkpoint`` (same ``prevent_cse`` and ``policy``) around the emulated body."""
    jaxpr, consts = _jaxpr_and_consts(eqn.params["jaxpr"])
    fn = ctx.subfunction(jaxpr)
    key = ctx.site_key()
    wrapped = jax.checkpoint(
        lambda key, *args: fn(key, consts, *args), prevent_cse=eqn.params["prevent_cse"], policy=eqn.params["policy"]
    )
    outs, stats = wrapped(key, *invals)
    ctx.merge_stats(stats)
    return list(outs)


def _varying(value, axes):
    """``value`` marked as varying over every axis of ``axes`` (shard_map's check_vma types), so that
    ``psum`` over all of them counts every device's work once."""
    aval = jax.typeof(value)
    manual = getattr(aval, "manual_axis_type", None)  # jax >= 0.10; earlier: aval.vma
    varying = manual.varying if manual is not None else getattr(aval, "vma", None)
    missing = tuple(a for a in axes if varying is not None and a not in varying)
    if not missing:
        return value
    return lax.pcast(value, missing, to="varying")


@register("shard_map", kind="control")
def shard_map(ctx: Context, eqn, invals: list) -> list:
    """``jax.shard_map`` (same mesh, specs, manual axes and ``check_vma``) around the emulated body.

    Inside the body each device rounds its own shard; stochastic rounding folds the device's position
    in the manual axes into the key, so shards draw different bits. Counts are summed over devices
    (``psum``): work replicated over an axis is counted once per device."""
    p = eqn.params
    jaxpr, consts = _jaxpr_and_consts(p["jaxpr"])
    fn = ctx.subfunction(jaxpr)
    axes = tuple(name for name in p["mesh"].axis_names if name in p["newly_manual_axes"])
    key = ctx.site_key()

    def body(*args):
        key, args = (args[0], args[1:]) if has_key else (None, args)
        for name in axes if key is not None else ():
            key = fold(key, lax.axis_index(name))
        outs, stats = fn(key, consts, *args)
        return outs, {site: lax.psum(_varying(vector, axes), axes) for site, vector in stats.items()}

    P = jax.sharding.PartitionSpec
    has_key = key is not None
    mapped = jax.shard_map(
        body,
        mesh=p["mesh"],
        in_specs=(*([P()] if has_key else []), *p["in_specs"]),
        out_specs=(list(p["out_specs"]), P()),
        axis_names=frozenset(p["newly_manual_axes"]),
        check_vma=p["check_vma"],
    )
    outs, stats = mapped(*([key] if has_key else []), *invals)
    ctx.merge_stats(stats)
    return list(outs)
