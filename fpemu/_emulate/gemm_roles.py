"""Which GEMM of a training step each ``dot_general`` / ``conv_general_dilated`` is: forward, dgrad or wgrad.

A pure pre-pass over the closed jaxpr that `fpemu.emulate` is about to interpret; it reads names
and data flow, never values. docs/training.md ("How a dot is classified") is the contract.

JAX marks the backward pass in name stacks: in ``jax.make_jaxpr(jax.value_and_grad(loss))`` the
equations of the backward pass have ``transpose(jvp(...))`` in their name stack (inside a nested
``jit``, ``scan`` or ``checkpoint`` the enclosing equation carries it and the inner equations inherit
it), and the transpose rule of ``dot_general`` always emits ``dot_general(cotangent, residual)``
(of ``conv_general_dilated``: ``conv(cotangent, rev(kernel))`` and ``conv(input, cotangent)``).

1. **Aliases.** A union-find over the program's variables joins the operands of call-like equations
   (``jit``, ``closed_call``, ``checkpoint``, ``custom_jvp_call``, ``custom_vjp_call``, ``scan``,
   ``while``, ``cond``, ``shard_map``...) with the parameters of their bodies, the bodies' results
   with the equations' results, and the input and output of layout-only operations
   (``convert_element_type``, ``copy``, ``transpose``, ``reshape``, ``broadcast_in_dim``,
   ``squeeze``, ``rev``...). A variable is named by its path of enclosing equations, so a body
   shared by two call sites is two sets of variables.
2. **Gradients.** A value is a *gradient* (it carries the cotangent) when an equation under
   ``transpose`` produces it from a gradient, from a float literal (the seed ``1.0``) or from no
   variable at all (``broadcast_in_dim 1.0``); recomputations of a ``jax.checkpoint`` (JAX's scope
   ``rematted_computation``) produce no gradient from literals. A float argument of the function
   that only the backward pass reads (the cotangent given to ``jax.vjp``) is a gradient too, as is
   a float literal passed into a body under ``transpose`` (a scalar carry's seed), and a layout op
   of a literal outside ``transpose`` whose result only the backward pass reads (``shard_map``'s
   ``pvary 1.0``).
3. **Roles.** A dot outside ``transpose``, or under it with no gradient operand (a recomputation),
   is *forward*. A dot under ``transpose`` with one gradient operand is backward; the other operand
   is the residual: if it is (aliases) the right operand of a forward dot, the dot is *dgrad*
   (``g . W^T``), the left operand of one, *wgrad* (``x^T . g``). If it aliases neither, a residual
   that is an argument of the function (a weight) makes it dgrad, anything else wgrad. A dot whose
   two operands both carry cotangents (higher derivatives) has no role: it stays high precision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from fpemu._jax import compat
from fpemu._jax.compat import ClosedJaxpr, DropVar, Jaxpr
from fpemu._jax.compat import Literal as JaxLiteral

Gemm = Literal["forward", "dgrad", "wgrad"]
GEMMS: tuple[str, ...] = ("forward", "dgrad", "wgrad")
DOT_PRIMITIVES = ("dot_general", "conv_general_dilated")

# Unary (or positional) operations whose result is the operand's data, rearranged or re-typed: a weight
# cast to bfloat16 or broadcast for a batched matmul is still the weight.
LAYOUT_OPS = frozenset({
    "convert_element_type", "copy", "copy_p", "transpose", "reshape", "broadcast_in_dim", "squeeze",
    "expand_dims", "rev", "reduce_precision", "sharding_constraint", "device_put", "reshard", "pvary",
    "optimization_barrier", "name",
})  # fmt: skip

# JAX's scope around the recomputed forward equations of a jax.checkpoint in the backward pass.
REMAT_SCOPE = "rematted_computation"

Path = tuple[int, ...]  # ids of the enclosing equations, outermost first
Node = tuple[Path, Any]  # (path, Var)


@dataclasses.dataclass(frozen=True, slots=True)
class GemmRole:
    """The role of one dot in a training step.

    ``gemm``: ``"forward"`` (``y = x . W``), ``"dgrad"`` (``dx = g . W^T``) or ``"wgrad"``
    (``dW = x^T . g``). ``gradient``: the operand (0 left, 1 right) that carries the cotangent, None
    for forward dots. ``reason``: how the role was decided, for `fpemu.gemm_roles` and error messages.
    ``weight``: a forward dot's weight operand for an inference recipe (1: the right one, the
    convention; 0: the left one, when only it comes from the arguments `Policy.weights` selects).
    """

    gemm: Gemm
    gradient: int | None
    reason: str
    weight: int = 1  # a forward dot's weight operand (inference recipes): 1 the right, 0 the left


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One classified dot: where it is (path and name stack), its role (None: no role), and the
    forward dot it belongs to: ``name`` (``"scope/.../dot_general"``, ``#k`` for the k-th forward dot
    of the same name, k >= 1) and ``ordinal`` (its number among the forward dots, in program order).
    A backward dot takes the name and ordinal of its forward dot, so that the three GEMMs of one
    layer share them; a backward dot without one keeps its own (``transpose(...)`` names)."""

    path: Path
    eqn: Any
    stack: tuple
    role: GemmRole | None
    name: str = ""
    ordinal: int = -1
    enclosing: tuple[str, ...] = ()  # the primitives of the enclosing equations (``scan``, ``jit``...)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Node, Node] = {}

    def find(self, node: Node) -> Node:
        parent = self.parent.setdefault(node, node)
        if parent == node:
            return node
        root = self.find(parent)
        self.parent[node] = root
        return root

    def union(self, a: Node, b: Node) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _sub_jaxprs(eqn: Any) -> list[tuple[Jaxpr, list, bool]]:
    """The bodies of a call-like equation, each with the operands of the equation that its parameters
    receive (positionally) and whether its results are the equation's results."""
    name, p, invars = eqn.primitive.name, eqn.params, list(eqn.invars)
    if name == "while":
        cond_n, body_n = p["cond_nconsts"], p["body_nconsts"]
        carry = invars[cond_n + body_n :]
        return [
            (p["cond_jaxpr"].jaxpr, invars[:cond_n] + carry, False),
            (p["body_jaxpr"].jaxpr, invars[cond_n:], True),
        ]
    if name == "cond":
        return [(branch.jaxpr, invars[1:], True) for branch in p["branches"]]
    found = []
    for value in p.values():
        if isinstance(value, (Jaxpr, ClosedJaxpr)):
            jaxpr = value.jaxpr if isinstance(value, ClosedJaxpr) else value
            offset = len(invars) - len(jaxpr.invars)
            if offset >= 0:  # the body's parameters are the last operands (custom_jvp_call: all of them)
                found.append((jaxpr, invars[offset:], len(jaxpr.outvars) == len(eqn.outvars)))
    return found


def _vars(atoms: Any) -> Iterator[Any]:
    return (v for v in atoms if not isinstance(v, (JaxLiteral, DropVar)))


def _is_float(atom: Any) -> bool:
    dtype = getattr(getattr(atom, "aval", None), "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.floating)


class _Analysis:
    def __init__(self, closed: ClosedJaxpr, weights: tuple[int, ...] | None = None) -> None:
        self.closed = closed
        self.weights = weights  # the jaxpr's inputs that hold weights (Policy.weights), None: the convention
        self.uf = _UnionFind()
        self.forward_lhs: list[Node] = []
        self.forward_rhs: list[Node] = []
        self.read_forward: set[Node] = set()  # nodes read by an equation outside transpose (before roots)
        self.read_backward: set[Node] = set()
        self.gradient: set[Node] = set()  # roots
        self.entries: list[Entry] = []

    # -- pass 1: aliases, forward operands, where each value is read

    def alias(self, jaxpr: Jaxpr, path: Path, stack: tuple) -> None:
        for eqn in jaxpr.eqns:
            own = stack + compat.name_stack(eqn)
            transposed = compat.is_transposed(own)
            name = eqn.primitive.name
            subs = _sub_jaxprs(eqn)
            if subs:
                inner = (*path, id(eqn))
                for body, operands, results in subs:
                    for outer, param in zip(operands, body.invars, strict=True):
                        if not isinstance(outer, JaxLiteral):
                            self.uf.union((path, outer), (inner, param))
                    self.alias(body, inner, own)
                    if results:
                        for outer, res in zip(eqn.outvars, body.outvars, strict=True):
                            if not isinstance(outer, DropVar) and not isinstance(res, JaxLiteral):
                                self.uf.union((path, outer), (inner, res))
                continue
            for v in _vars(eqn.invars):
                (self.read_backward if transposed else self.read_forward).add((path, v))
            if name in LAYOUT_OPS and len(eqn.invars) == len(eqn.outvars):
                for a, b in zip(eqn.invars, eqn.outvars, strict=True):
                    if not isinstance(a, JaxLiteral) and not isinstance(b, DropVar):
                        self.uf.union((path, a), (path, b))
            if name in DOT_PRIMITIVES and not transposed:
                lhs, rhs = eqn.invars[:2]
                if not isinstance(lhs, JaxLiteral):
                    self.forward_lhs.append((path, lhs))
                if not isinstance(rhs, JaxLiteral):
                    self.forward_rhs.append((path, rhs))

    # -- pass 2: gradients and roles, in program order

    def is_gradient(self, path: Path, atom: Any) -> bool:
        if isinstance(atom, JaxLiteral):
            return False
        return self.uf.find((path, atom)) in self.gradient

    def classify(self, jaxpr: Jaxpr, path: Path, stack: tuple, enclosing: tuple[str, ...] = ()) -> None:
        for eqn in jaxpr.eqns:
            own = stack + compat.name_stack(eqn)
            transposed = compat.is_transposed(own)
            recompute = REMAT_SCOPE in compat.scope_names(own)
            subs = _sub_jaxprs(eqn)
            if subs:
                inner = (*path, id(eqn))
                for body, operands, _ in subs:
                    if transposed and not recompute:  # a seed passed into a body (a scalar carry's 1.0)
                        for outer, param in zip(operands, body.invars, strict=True):
                            if isinstance(outer, JaxLiteral) and _is_float(outer):
                                self.gradient.add(self.uf.find((inner, param)))
                    self.classify(body, inner, own, (*enclosing, eqn.primitive.name))
                continue
            float_literal = any(isinstance(a, JaxLiteral) and _is_float(a) for a in eqn.invars)
            inputs = list(_vars(eqn.invars))
            produces = any(self.is_gradient(path, v) for v in inputs)
            if transposed and not recompute and (float_literal or not inputs):
                produces = True  # a seed: the cotangent 1.0, or zeros
            if not transposed and float_literal and not inputs and eqn.primitive.name in LAYOUT_OPS:
                # the seed made outside the backward pass (shard_map's pvary/reshard of 1.0): read by it only
                roots = [self.uf.find((path, v)) for v in filter(_is_float, _vars(eqn.outvars))]
                if roots and all(r in self.read_backward_roots and r not in self.read_forward_roots for r in roots):
                    produces = True
            if eqn.primitive.name in DOT_PRIMITIVES:
                self.entries.append(Entry(path, eqn, own, self.role(eqn, path, transposed), enclosing=enclosing))
            if produces:
                for v in filter(_is_float, _vars(eqn.outvars)):
                    self.gradient.add(self.uf.find((path, v)))

    def role(self, eqn: Any, path: Path, transposed: bool) -> GemmRole | None:
        if not transposed:
            return self.forward_role(eqn, path)
        operands = eqn.invars[:2]
        carrying = [
            i
            for i, a in enumerate(operands)
            if self.is_gradient(path, a) or (isinstance(a, JaxLiteral) and _is_float(a))
        ]
        if not carrying:
            return GemmRole("forward", None, "in the backward pass on forward values only (a recomputation)")
        if len(carrying) == 2:
            return None
        g = carrying[0]
        residual = self.uf.find((path, operands[1 - g]))
        if residual in self.forward_rhs_roots:
            return GemmRole("dgrad", g, "the residual is the right operand of a forward dot")
        if residual in self.forward_lhs_roots:
            return GemmRole("wgrad", g, "the residual is the left operand of a forward dot")
        if residual in self.argument_roots:
            return GemmRole("dgrad", g, "fallback: the residual is an argument of the function (a weight)")
        return GemmRole("wgrad", g, "fallback: the residual is computed, not an argument (an activation)")

    def forward_role(self, eqn: Any, path: Path) -> GemmRole:
        """A forward dot, and which operand is its weight: with `Policy.weights`, the one operand that comes
        (through layout operations and calls) from a selected argument or a closed-over constant; else, or
        when both or neither do, the right one (``y = x . W``)."""
        reason = "outside the backward pass (lhs: the activation x, rhs: the weight W)"
        if self.weights is None:
            return GemmRole("forward", None, reason)
        from_weights = [
            i
            for i, a in enumerate(eqn.invars[:2])
            if not isinstance(a, JaxLiteral) and self.uf.find((path, a)) in self.weight_roots
        ]
        if from_weights == [0]:
            return GemmRole(
                "forward", None, "outside the backward pass (lhs: the weight W, from Policy.weights; rhs: the "
                "activation x)", weight=0,
            )  # fmt: skip
        if from_weights == [1]:
            return GemmRole("forward", None, "outside the backward pass (rhs: the weight W, from Policy.weights)")
        which = "both operands" if from_weights else "neither operand"
        return GemmRole("forward", None, f"{reason}: {which} from Policy.weights, so the convention")

    def pair(self) -> list[Entry]:
        """Names and ordinals: each forward dot outside ``transpose`` in program order; each backward
        dot takes the last forward dot not yet paired (JAX transposes in reverse order) whose right
        (dgrad) or left (wgrad) operand its residual aliases; a recomputed forward dot, the forward dot
        whose operands both alias its own."""
        find = self.uf.find
        primary: list[tuple[Entry, Any, Any]] = []  # (entry, lhs root, rhs root)
        counts: dict[str, int] = {}
        out: list[Entry] = []
        taken: dict[str, set[int]] = {"dgrad": set(), "wgrad": set()}

        def named(base: str) -> str:
            k = counts.get(base, 0)
            counts[base] = k + 1
            return base if k == 0 else f"{base}#{k}"

        def roots(e: Entry) -> tuple[Any, Any]:
            return tuple(None if isinstance(a, JaxLiteral) else find((e.path, a)) for a in e.eqn.invars[:2])  # type: ignore[return-value]

        for e in self.entries:
            scopes = compat.scope_names(e.stack)
            base = "/".join([*scopes, e.eqn.primitive.name])
            transposed = compat.is_transposed(e.stack)
            partner = None
            if e.role is not None and transposed:
                lhs, rhs = roots(e)
                if e.role.gemm == "forward":
                    partner = next((i for i, (_, a, b) in enumerate(primary) if (a, b) == (lhs, rhs)), None)
                else:
                    residual = rhs if e.role.gradient == 0 else lhs
                    column = 2 if e.role.gemm == "dgrad" else 1
                    found = [i for i, p in enumerate(primary) if p[column] == residual]
                    free = [i for i in found if i not in taken[e.role.gemm]]
                    candidates = free or found
                    partner = candidates[-1] if candidates else None
                    if partner is not None:
                        taken[e.role.gemm].add(partner)
            if partner is not None:
                forward = primary[partner][0]
                out.append(dataclasses.replace(e, name=forward.name, ordinal=forward.ordinal))
            elif not transposed:
                entry = dataclasses.replace(e, name=named(base), ordinal=len(primary))
                primary.append((entry, *roots(e)))
                out.append(entry)
            else:
                path = "/".join(scopes)
                own = f"transpose({path})/{e.eqn.primitive.name}" if path else f"transpose/{e.eqn.primitive.name}"
                out.append(dataclasses.replace(e, name=named(own), ordinal=UNPAIRED + len(out)))
        return out

    def run(self) -> list[Entry]:
        jaxpr = self.closed.jaxpr
        self.alias(jaxpr, (), ())
        find = self.uf.find
        self.forward_lhs_roots = {find(n) for n in self.forward_lhs}
        self.forward_rhs_roots = {find(n) for n in self.forward_rhs}
        self.argument_roots = {find(((), v)) for v in [*jaxpr.invars, *jaxpr.constvars]}
        selected = [jaxpr.invars[i] for i in self.weights or ()]
        self.weight_roots = {find(((), v)) for v in [*selected, *jaxpr.constvars]}
        read_forward = self.read_forward_roots = {find(n) for n in self.read_forward}
        read_backward = self.read_backward_roots = {find(n) for n in self.read_backward}
        for v in jaxpr.invars:  # a cotangent given as an argument (jax.vjp): read by the backward pass only
            root = find(((), v))
            if _is_float(v) and root in read_backward and root not in read_forward:
                self.gradient.add(root)
        self.classify(jaxpr, (), ())
        return self.pair()


class GemmRoles:
    """The roles of every dot of one program, looked up by (path of enclosing equations, equation)."""

    def __init__(self, entries: list[Entry], closed: ClosedJaxpr) -> None:
        self.entries = tuple(entries)
        self.closed = closed  # keeps the jaxpr, and so the ids of its equations, alive
        self._by_id = {(e.path, id(e.eqn)): e for e in entries}

    def entry(self, path: Path, eqn: Any) -> Entry | None:
        """The entry of ``eqn`` at ``path``; None for a dot the pre-pass did not see (inside a
        ``custom_linear_solve``: emulate then treats it as a forward dot of its own)."""
        return self._by_id.get((path, id(eqn)))


UNPAIRED = 1 << 20  # ordinals of backward dots without a forward dot start here


def classify(closed: ClosedJaxpr, weights: tuple[int, ...] | None = None) -> GemmRoles:
    """The `GemmRole` of every ``dot_general`` and ``conv_general_dilated`` of ``closed`` (``weights``:
    the positions of the inputs that hold weights, `Policy.weights`; None: the right operand's rule).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from fpemu._emulate.gemm_roles import classify
      >>> loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))
      >>> closed = jax.make_jaxpr(jax.value_and_grad(loss))(jnp.ones((4, 3)), jnp.ones((2, 4)))
      >>> [(e.role.gemm, e.role.gradient) for e in classify(closed).entries]
      [('forward', None), ('wgrad', 0)]
    """
    return GemmRoles(_Analysis(closed, weights).run(), closed)


def kept(stack: tuple, keep_scopes: tuple[str, ...]) -> bool:
    """Whether a dot at this name stack is under one of ``keep_scopes`` (a scope name, or a path
    prefix ``"a/b"``): such dots stay high precision."""
    if not keep_scopes:
        return False
    scopes = compat.scope_names(stack)
    path = "/".join(scopes)
    return any(name in scopes or path == name or path.startswith(name + "/") for name in keep_scopes)
