"""The jaxpr interpreter of `fpemu.emulate`: the context a rule sees, and the loop over equations.

`interpret` evaluates a jaxpr's equations in order with an environment dict, each handled by the
rule `fpemu._emulate.registry.RULES` holds for its primitive. A rule gets a `Context`: the shared
state of one interpretation (policy, key, statistics) plus the equation and its name stack, and
the services rules share: ``bind`` (the primitive, unchanged), ``bind_and_round`` (the ``rounded``
kind), ``bind_identity`` (the same, not rounded again where the result is an input already
rounded), ``round_output`` (round one result and count it), ``round_operand`` (round without
counting), ``interpret`` (inline a sub-jaxpr), ``subfunction`` (a sub-jaxpr as an emulated
function for a control-flow combinator), ``site_key`` and ``merge_stats``. The rule modules import
this one; control-flow rules recurse through the context, never through an import back.

After its rule, each equation passes through `Context.cut_chain`: the chains of rounded sums (a deep
model's residual stream and its gradient) are cut every `CHAIN_CUT_DEPTH` links, so that XLA:CPU
computes each link once instead of in every loop that reads a later one (the same bits).

Under a training recipe the state also carries `Training`: the roles of the program's dots (the
pre-pass `fpemu._emulate.gemm_roles`), looked up by the path of enclosing equations a context
keeps, and the amax histories of delayed scaling. The statistics dict is then also the channel
that brings amax values out of nested bodies (sites of `fpemu._emulate.stats`'s max kind), so it
exists whenever counts are wanted (``counting``) or histories are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._core.format import Format
from fpemu._core.registry import get_format
from fpemu._emulate import precision, readers
from fpemu._emulate import stats as _stats
from fpemu._emulate.gemm_roles import Entry, GemmRoles
from fpemu._emulate.policy import Policy
from fpemu._emulate.registry import RULES
from fpemu._emulate.rounding import (
    counts,
    fold_key,
    is_float,
    is_identity,
    is_inexact,
    round_literal_on_host,
    round_to_format,
)
from fpemu._emulate.watch import Watch
from fpemu._jax import compat
from fpemu._jax.compat import Jaxpr, Literal
from fpemu._jax.interpret import body_of, evaluate
from fpemu._ops.fusion import computed_once, materialize, shared_probe

#: The primitives whose rounded results are the links of the chains that `Context.cut_chain` cuts: sums and
#: differences (a residual stream, its gradient's ``add_any``).
CHAIN_LINKS = frozenset(("add", "add_any", "sub"))

#: A rounded link is cut when it is this many links deep since the last cut, itself included: every second link.
#: (Every third link compiles the 4-block transformer stack 15% slower: bench/RESULTS_training.md, "nineteenth
#: session".)
CHAIN_CUT_DEPTH = 2

_DEFAULT = object()  # "the policy's format for the current primitive"
_UNMADE = object()  # State.probe before its first use


@dataclasses.dataclass(frozen=True)
class Training:
    """What a training recipe adds to an interpretation: the roles of the program's dots, and the
    amax histories of delayed scaling (``{"name.gemm.lhs": float32[history]}``; None: stateless)."""

    roles: GemmRoles
    histories: dict[str, Any] | None = None


@dataclasses.dataclass
class State:
    """What every view of one interpretation (one traced function body) shares."""

    policy: Policy
    key: Any  # None, or the uint32[2] key this body's rounding sites fold their index into
    stats: dict[str, jax.Array] | None  # None: no statistics channel (no counts, no amax values)
    sites: int = 0
    counting: bool = False  # count roundings (with_stats); else the channel only carries amax values
    training: Training | None = None
    # emulate's random=: random(site key, shape, random_bits) -> the bits, replacing those the key would give
    random: Callable[[Any, tuple[int, ...], int], Any] | None = None
    # id(value) -> (value, (format, rounding)): values known to be values of that format, so that rounding
    # them again (an operand of a dot) is skipped; the value is kept so that its id cannot be reused
    rounded: dict[int, tuple[Any, tuple]] = dataclasses.field(default_factory=dict)
    # id(value) -> (value, the value materialized): the operands of recipe GEMMs, computed once for every
    # GEMM that reads them (`Context.computed_once`); the value is kept so that its id cannot be reused
    computed: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    # the literals whose change of meaning was warned of in this trace (shared with the bodies it traces)
    warned: set[tuple] = dataclasses.field(default_factory=set)
    watch: Watch | None = None  # fpemu.find_nonfinite's watch of every equation (shared with the bodies)
    # the body's arguments as they came (emulate's function's, or a combinator body's); the first one that
    # can gives the probe that every materialization of its recipe GEMMs reads (`Context.probe`, made on first use)
    arguments: tuple = ()
    probe: Any = _UNMADE
    # id(value) -> (value, its link count): the rounded sums of this body (`CHAIN_LINKS`) and how many such sums
    # lead to each through other sums since the last cut (`Context.cut_chain`); the value keeps its id from reuse
    links: dict[int, tuple[Any, int]] = dataclasses.field(default_factory=dict)
    # the variables of this body's jaxprs that one equation alone reads, and in one loop (`readers.read_in_one_loop`)
    read_in_one_loop: set[Any] = dataclasses.field(default_factory=set)
    # (forward dot's ordinal, GEMM) -> that GEMM's key split in three, for every recipe GEMM of the program: split
    # all at once from this body's key when one of them first draws random bits (`fpemu._emulate.gemm`)
    gemm_keys: dict[tuple[int, str], tuple[Any, Any, Any]] | None = None


def site_name(stack: tuple, primitive: str) -> str:
    """``scope/.../primitive``; under a transposition (the backward pass of a ``jax.grad`` traced
    inside ``emulate``), ``transpose(scope/...)/primitive``."""
    path = "/".join(compat.scope_names(stack))
    if compat.is_transposed(stack):
        path = f"transpose({path})" if path else "transpose"
    return f"{path}/{primitive}" if path else primitive


class Context:
    """The interpreter's view of one equation: shared state, the absolute name stack, the equation."""

    __slots__ = ("eqn", "path", "stack", "state")

    def __init__(self, state: State, stack: tuple = (), eqn: Any = None, path: tuple[int, ...] = ()):
        self.state, self.stack, self.eqn, self.path = state, stack, eqn, path

    @property
    def policy(self) -> Policy:
        return self.state.policy

    @property
    def stats_enabled(self) -> bool:
        """Whether the statistics dict exists (counts, or amax values of a training recipe)."""
        return self.state.stats is not None

    @property
    def counting(self) -> bool:
        """Whether roundings are counted (``with_stats=True``)."""
        return self.state.counting and self.state.stats is not None

    @property
    def training(self) -> Training | None:
        return self.state.training

    def gemm_entry(self) -> Entry | None:
        """The classification of this dot (None: not classified, or no training recipe)."""
        training = self.state.training
        return None if training is None else training.roles.entry(self.path, self.eqn)

    def inner_path(self) -> tuple[int, ...]:
        """The path of this equation's bodies: the enclosing equations, then this one."""
        return (*self.path, id(self.eqn)) if self.eqn is not None else self.path

    # -- services for the rules

    def bind(self, eqn: Any, invals: list, **overrides: Any) -> list:
        """The primitive of ``eqn`` applied to ``invals``, unchanged (``overrides``: parameters replaced)."""
        return compat.bind(eqn, invals, **overrides)

    def bind_and_round(self, eqn: Any, invals: list) -> list:
        """Bind, then round every floating-point result to the policy's format for this primitive."""
        return [self.round_output(out) for out in self.bind(eqn, invals)]

    def bind_identity(self, eqn: Any, invals: list, source: Any, survives_flush: bool) -> list:
        """`bind_and_round` of an equation that returns its input ``source`` as it is (``x * 1``: the rule's
        proof), without the rounding where that rounding would give its input back: ``source`` is known
        rounded to this primitive's format in the policy's rounding, and ``survives_flush`` (a subnormal
        that the backend's arithmetic flushes to ±0 stays a value of the format). XLA drops the identity but
        would compile the rounding (an optax Adam step rounds ``g ** 1``, ``b2 * t`` with b2 = 0.999 = 1.0 in
        bf16, and ``v + 0.0``; with its bias gradients' sums over an axis of size 1, 39 of the 279 roundings
        of the digits MLP's compiled step, bench/RESULTS_training.md). The result counts as rounded, and its
        site still takes its index, so that the keys of stochastic rounding are those of every other site;
        roundings that are counted (``with_stats``) are made."""
        fmt, rounding = self.format_for(), self.policy.rounding
        if fmt is None or self.counting or not survives_flush or not self.is_rounded(source, fmt, rounding):
            return self.bind_and_round(eqn, invals)
        outvals = self.bind(eqn, invals)
        for y in outvals:
            self.pass_site(rounding)
            self.state.rounded[id(y)] = (y, (fmt, rounding))
        return outvals

    def format_for(self) -> Format | None:
        return self.policy.format_for(self.eqn.primitive.name)

    def site_key(self) -> Any:
        """A fresh key for the next rounding site (None without stochastic rounding)."""
        if self.state.key is None:
            return None
        self.state.sites += 1
        return fold_key(self.state.key, self.state.sites)

    def pass_site(self, rounding: str) -> None:
        """A rounding site that is not rounded takes its index all the same (stochastic ``rounding`` with a
        key), so that the keys of the sites after it are those they would have."""
        if self.state.key is not None and rounding == "stochastic":
            self.state.sites += 1

    def site(self, suffix: str = "") -> str:
        """This equation's site name (`site_name`) + ``suffix``."""
        return site_name(self.stack, self.eqn.primitive.name) + suffix

    def round_output(self, x: Any, *, fmt: Any = _DEFAULT, suffix: str = "") -> Any:
        """``x``, an output of this equation, rounded to ``fmt`` (default: the policy's format for
        this primitive) and counted at this equation's site (+ ``suffix``)."""
        if fmt is _DEFAULT:
            fmt = self.format_for()
        return self.round_and_count(x, fmt, lambda: self.site(suffix))

    def round_and_count(
        self, x: Any, fmt: Format | None, site: str | Callable[[], str], rounding: str | None = None
    ) -> Any:
        """``x`` rounded to ``fmt`` (in ``rounding``, default the policy's), counted under ``site``
        (a name, or a function giving it: names are only built where counts or errors need them)."""
        if fmt is None or not is_inexact(_dtype_of(x)):
            return x
        rounding = rounding or self.policy.rounding
        key = self.site_key() if rounding == "stochastic" else None
        y = round_to_format(x, fmt, self.policy, rounding, key, site, self.state.random)
        if self.counting:
            self.merge_stats({site if isinstance(site, str) else site(): counts(x, y, fmt)})
        self.state.rounded[id(y)] = (y, (fmt, rounding))
        return y

    def round_operand(self, x: Any, fmt: Format | None) -> Any:
        """``x`` rounded to ``fmt``, not counted (operands that are already counted where produced).
        A value this interpretation already rounded to ``fmt`` in the policy's rounding (or moved
        unchanged from such values: `propagate_rounded`) is returned as it is: rounding a value of the
        format gives it back bit for bit (NaN included), in every mode and saturation, and XLA would
        compile the second rounding (compile time, bench/RESULTS_training.md). Its site still takes its
        index, so that the keys of stochastic rounding are those of every other site."""
        if fmt is None or not is_inexact(_dtype_of(x)):
            return x
        rounding = self.policy.rounding
        if self.is_rounded(x, fmt, rounding):
            self.pass_site(rounding)
            return x
        key = self.site_key() if rounding == "stochastic" else None
        y = round_to_format(x, fmt, self.policy, rounding, key, self.site, self.state.random)
        self.state.rounded[id(y)] = (y, (fmt, rounding))
        return y

    def computed_once(self, x: Any) -> Any:
        """``x`` materialized (`fpemu._ops.fusion.computed_once`: the same bits), once per interpretation.

        The GEMMs of a training step read some values twice: a layer's input in its forward GEMM and
        in wgrad, a cotangent in dgrad and in wgrad. Each GEMM materializes what it quantizes, so that
        its quantizer's loops do not each recompute the value's producers; materialized here first,
        the value is computed once for all of them, instead of once per GEMM (the transformer block's
        step under ``Policy(default="bf16", dot="nvfp4")``: bench/RESULTS_training.md)."""
        known = self.state.computed.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        y = computed_once(x, probe=self.probe())
        self.state.computed[id(x)] = (x, y)
        self.propagate_rounded([x], [y])
        return y

    def cut_chain(self, eqn: Any, invals: list, outvals: list) -> list:
        """The outputs of ``eqn``; a rounded sum that is a link of a chain of them (`CHAIN_LINKS`) computed
        once (`fpemu._ops.fusion.materialize`, with the body's probe: the same bits) every `CHAIN_CUT_DEPTH`
        links.

        A deep model's residual stream is such a chain (``x + f(x)`` block after block), and so is its
        gradient (the ``add_any`` of each block's cotangent, or of the parts of a loss). Each link is read
        by the next and by other loops (a LayerNorm's reductions, a dot's conversion to bfloat16).
        XLA:CPU fuses a cheap elementwise producer into every loop that reads it, so each of those loops
        recomputes the chain above it, link after link: with every link rounded (about ten instructions
        each once XLA expands the rounding) the program grows with the square of the depth (a stack of L
        transformer blocks under ``Policy(default="bf16")``: 3.9 s to compile at L=4, 10.3 s at L=8,
        against fp32's 1.5 s and 3.1 s). With jax 0.12 it is worse: L=4 did not compile in 280 s, nor a
        stack of three small blocks (8 x 16) in a minute (bench/RESULTS_training.md, "eighteenth" and
        "nineteenth session"). Cut, a loop recomputes at most the one link above the last cut; links of
        every size are cut, since the small ones blow up too.
        The cut is a conditional, not a division by ones that XLA cannot see (which would cost no kernel):
        a loop of several such divisions, fused, did not compile in minutes with jax 0.12.
        Unrounded sums (a policy that leaves ``add`` alone) are not cut: XLA recomputes a bare addition
        cheaply, as it does without emulate. A link that one reduction or exponential alone reads
        (`fpemu._emulate.readers`: a cross-entropy's ``logits - max`` read by ``exp``) is computed in that one
        loop: it is not cut, and the chain ends there (the digits MLP's two cuts; with the identities that
        `fpemu._emulate.rules_plain` leaves unrounded, 7% of its first call, bench/RESULTS_training.md,
        "twentieth session")."""
        if eqn.primitive.name not in CHAIN_LINKS or len(outvals) != 1:
            return outvals
        (y,) = outvals
        if not self._rounded(y):
            return outvals
        links = self.state.links
        depth = 1 + max((links[id(x)][1] for x in invals if id(x) in links and links[id(x)][0] is x), default=0)
        if depth >= CHAIN_CUT_DEPTH and eqn.outvars[0] not in self.state.read_in_one_loop:
            cut = materialize((y,), self.probe())[0]
            self.state.computed[id(cut)] = (cut, cut)  # computed once already: a recipe GEMM reads it as it is
            self.propagate_rounded([y], [cut])
            y, depth = cut, 0
        links[id(y)] = (y, depth)
        return [y]

    def _rounded(self, y: Any) -> bool:
        """Whether ``y`` is a real floating-point value that this interpretation rounded to a format that
        changes values of its dtype (not an excluded equation's result, nor one rounded to a format that
        holds every value of its dtype)."""
        known = self.state.rounded.get(id(y))
        if known is None or known[0] is not y or not is_float(_dtype_of(y)):
            return False
        return not is_identity(get_format(_dtype_of(y)), known[1][0], self.policy)

    def probe(self) -> Any:
        """The probe of this body (`fpemu._ops.fusion.shared_probe` of its arguments; None if none can
        give one), made once: every materialization of its recipe GEMMs reads it for its predicate, so
        that XLA computes one predicate for the body instead of a kernel per materialization."""
        state = self.state
        if state.probe is _UNMADE:
            state.probe = shared_probe(state.arguments)
        return state.probe

    def is_rounded(self, x: Any, fmt: Format, rounding: str) -> bool:
        """Whether ``x`` is known to hold values of ``fmt`` rounded in ``rounding`` under this policy."""
        known = self.state.rounded.get(id(x))
        return known is not None and known[0] is x and known[1] == (fmt, rounding)

    def propagate_rounded(self, invals: list, outvals: list) -> None:
        """Outputs of a primitive that only moves bits (`fpemu._emulate.registry.BIT_COPIES`) are known
        values of a format when every floating-point input is a known value of it."""
        tag = None
        for x in invals:
            if not is_inexact(_dtype_of(x)):
                continue
            known = self.state.rounded.get(id(x))
            if known is None or known[0] is not x or (tag is not None and known[1] != tag):
                return
            tag = known[1]
        if tag is None:
            return
        for y in outvals:
            if is_inexact(_dtype_of(y)):
                self.state.rounded[id(y)] = (y, tag)

    def merge_stats(self, other: dict) -> None:
        if self.state.stats is not None:
            _stats.merge(self.state.stats, other)

    def interpret(self, jaxpr: Jaxpr, consts: list, args: list) -> list:
        """Interpret a sub-jaxpr in place (same state: sites, keys and counts continue)."""
        return interpret(Context(self.state, self.stack, path=self.inner_path()), jaxpr, consts, args)

    def subfunction(self, jaxpr: Jaxpr) -> Callable:
        """``fn(key, consts, *args) -> (outs, stats)``: the sub-jaxpr as an emulated function with its
        own state, for a combinator to trace (``lax.scan``, ``jax.custom_jvp``...)."""
        policy, with_stats, prefix = self.policy, self.stats_enabled, self.stack  # not the state: it holds tracers
        counting, training, path = self.state.counting, self.state.training, self.inner_path()
        random, warned, watch = self.state.random, self.state.warned, self.state.watch

        def fn(key, consts, *args):
            sub = State(
                policy, key, {} if with_stats else None, counting=counting, training=training, random=random,
                warned=warned, watch=watch, arguments=tuple(args),
            )  # fmt: skip
            outs = interpret(Context(sub, prefix, path=path), jaxpr, list(consts), list(args))
            return outs, dict(sub.stats or {})

        return fn

    # -- values entering the program

    def literal(self, literal: Literal, eqn: Any = None) -> Any:
        """A Python-scalar constant of the program read by ``eqn`` (None: an output of the body), rounded
        to ``default`` (nearest even when the policy is stochastic) and counted under ``"constants"``
        each time it is used. A rounding that changes its meaning (to 0, ±inf, NaN or exactly 1.0) gives
        a `fpemu.PrecisionWarning` at the user's source line, once per literal and line in a trace."""
        value = literal.val
        fmt = self.policy.default
        dtype = np.result_type(value)
        if fmt is None or not is_inexact(dtype) or not isinstance(value, (np.ndarray, np.generic, float, complex)):
            return value
        array = np.asarray(value, dtype)
        counting = self.counting
        rounded, vector = round_literal_on_host(dtype.name, array.tobytes(), array.shape, fmt, self.policy, counting)
        if counting:
            self.merge_stats({"constants": jnp.asarray(vector)})
        if rounded is None:
            return value
        if eqn is not None:
            self._changed_meaning(array, rounded, cast(Format, fmt), eqn)
        return rounded

    def _changed_meaning(self, array: np.ndarray, rounded: np.ndarray, fmt: Format, eqn: Any) -> None:
        source = compat.source_line(eqn)
        change = precision.describe(array, rounded, fmt, eqn, source)
        if change is None:
            return
        key = (change.value, change.format, change.primitive, change.source)
        if key in self.state.warned:
            return
        self.state.warned.add(key)
        if self.state.watch is not None:
            self.state.watch.literals.append(change)
        precision.warn(change, source)

    def constant(self, value: Any, site: str, *, selected: bool = True) -> Any:
        """An argument (``site="inputs"``) or closed-over constant array (``"constants"``, nearest
        even when the policy is stochastic), rounded to ``default`` unless ``round_inputs`` is False
        or the caller did not select it (``round_inputs`` naming other arguments)."""
        if self.policy.round_inputs is False or not selected or self.policy.default is None:
            return value
        stochastic = self.policy.rounding == "stochastic"
        rounding = "nearest_even" if stochastic and site == "constants" else None
        return self.round_and_count(value, cast(Format, self.policy.default), site, rounding)

    # -- one equation

    def view(self, eqn: Any) -> Context:
        """The context of one equation of this body."""
        return Context(self.state, self.stack + compat.name_stack(eqn), eqn, self.path)

    def apply(self, eqn: Any, invals: list) -> list:
        name = eqn.primitive.name
        view = self.view(eqn)
        if view.excluded(name):
            return view.bind(eqn, invals)
        if name == "jit" and self.state.training is not None:
            # under a training recipe, nested jit bodies are interpreted in place: each call site keeps
            # its own dot roles and reads the histories of this trace (a cached jit would not)
            jaxpr, consts = body_of(eqn)
            return view.interpret(jaxpr, consts, invals)
        entry = RULES.get(name)
        if entry is not None:
            return entry.rule(view, eqn, invals)
        has_float_result = any(is_inexact(v.aval.dtype) for v in eqn.outvars if hasattr(v.aval, "dtype"))
        if not has_float_result and not compat.has_sub_jaxprs(eqn):
            return view.bind(eqn, invals)  # integer, bool and key primitives: nothing to round
        if self.policy.passthrough_unknown:
            return view.bind_and_round(eqn, invals)
        raise NotImplementedError(
            f"fpemu.emulate has no rule for the primitive {name!r} (at {site_name(view.stack, name)!r}). "
            f"Policy(passthrough_unknown=True) binds it unchanged and rounds its floating-point results; "
            f"Policy(exclude=({name!r},)) leaves it alone entirely."
        )

    def excluded(self, primitive: str) -> bool:
        exclude = self.policy.exclude
        if not exclude:
            return False
        if primitive in exclude:
            return True
        scopes = compat.scope_names(self.stack)
        path = "/".join(scopes)
        return any(name in scopes or path == name or path.startswith(name + "/") for name in exclude)


def _dtype_of(x: Any) -> Any:
    """The dtype of an array or tracer, else of a Python or NumPy scalar (as JAX would type it)."""
    dtype = getattr(x, "dtype", None)
    return jnp.result_type(x) if dtype is None else dtype


def interpret(ctx: Context, jaxpr: Jaxpr, consts: list, args: list) -> list:
    """Evaluate ``jaxpr`` on ``args`` with every equation handled by its rule (the loop is the shared
    `fpemu._jax.interpret.evaluate`): closed-over constants are rounded as ``"constants"``, literals
    as `Context.literal` (an excluded equation's literals are left alone too), and each equation runs
    under its named scopes and context, watched by `fpemu.find_nonfinite`."""

    def literal(var: Literal, eqn: Any) -> Any:
        if eqn is not None and ctx.policy.exclude and ctx.view(eqn).excluded(eqn.primitive.name):
            return var.val
        return ctx.literal(var, eqn)

    def equation(eqn: Any, invals: list) -> list:
        with compat.equation_scopes(eqn):
            outvals = ctx.apply(eqn, invals)
            outvals = ctx.cut_chain(eqn, invals, outvals)
            if ctx.state.watch is not None and not compat.has_sub_jaxprs(eqn):
                view = ctx.view(eqn)
                fmt = view.format_for()
                ctx.state.watch.check(
                    eqn, invals, outvals, site_name(view.stack, eqn.primitive.name), "-" if fmt is None else fmt.name
                )
        return outvals

    ctx.state.read_in_one_loop.update(readers.read_in_one_loop(jaxpr))
    consts = [ctx.constant(value, "constants") for _, value in zip(jaxpr.constvars, consts)]
    return evaluate(jaxpr, consts, args, literal=literal, equation=equation)
