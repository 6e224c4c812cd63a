"""A training recipe's three GEMMs in role order, and the VJPs that make a forward GEMM differentiable as the recipe says.

The recipe's GEMMs are written ``forward = x . W``, ``dgrad = g . W^T``, ``wgrad = x^T . g``:

- `role_dot` and `role_conv` compute ``dot_general(a, b, dims)`` / ``conv_general_dilated(a, b)`` as
  GEMM ``which``. JAX's transpose rule emits ``dot_general(g, x)`` for wgrad, so a GEMM whose
  cotangent sits on the other side (`swapped`) is computed with its operands in role order: a dot
  with its operands swapped (and the swapped dimension numbers), its result transposed back; a
  convolution with the quantizers, keys and amaxes swapped. Each operand is quantized by the
  quantizer of its role along its own contraction, exactly as ``quantized_dot_general(x, g, ...)``
  would. Both call the checked-once cores (`quantized_dot_core`, `quantized_conv_core`).
- `forward_with_vjp` and `forward_conv_with_vjp` are the forward GEMM as a `jax.custom_vjp` whose
  backward pass computes dgrad and wgrad with the same functions (a convolution's: the transposed
  convolutions JAX's own VJP emits, `conv_transposes`), so that ``jax.grad(emulate(loss))`` quantizes
  the backward GEMMs as ``emulate(jax.grad(loss))`` does, bit for bit when the cotangents agree.

Keys: ``keys[which]`` is GEMM ``which``'s key split in three (`fpemu._training.gemm_dot.split_key`: the lhs's,
the rhs's, the Hadamard transform's; three Nones without a key); ``amaxes`` maps
``"gemm.side"`` to the float32 amax of a delayed-scaling operand.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._jax.compat import Literal, bind
from fpemu._ops.fusion import computed_once
from fpemu._training.gemm_conv import quantized_conv_core
from fpemu._training.gemm_dot import quantized_dot_core
from fpemu._training.quantizer import Quantizer
from fpemu._training.recipes import TrainingRecipe

__all__ = [
    "SIDES",
    "current_gradients",
    "forward_conv_with_vjp",
    "forward_with_vjp",
    "role_conv",
    "role_dot",
    "swapped",
    "transpose_lhs",
]

SIDES = ("lhs", "rhs")
F32 = jnp.float32


def swapped(which: str, gradient: int | None) -> bool:
    """Whether the cotangent sits on the other side than the recipe writes it (dgrad: lhs; wgrad: rhs)."""
    return (which == "dgrad" and gradient == 1) or (which == "wgrad" and gradient == 0)


def _amaxes(recipe: TrainingRecipe, which: str, amaxes: Mapping[str, Any]) -> tuple[Any, Any]:
    """(lhs amax, rhs amax) of GEMM ``which`` in the recipe's order: float32 for delayed operands, else None."""
    gemm = recipe.gemm(which)
    out = []
    for q, side in zip(gemm.quantizers, SIDES, strict=True):
        amax = amaxes.get(f"{which}.{side}")
        delayed = q is not None and q.scaling == "delayed"
        out.append(jnp.asarray(amax).astype(F32) if delayed else None)
    return out[0], out[1]


def _dn(dims: Any) -> Any:
    (lc, rc), (lb, rb) = dims
    return tuple(tuple(int(d) for d in x) for x in (lc, rc)), tuple(tuple(int(d) for d in x) for x in (lb, rb))


# -- one GEMM, operands in role order ------------------------------------------------------------------


def role_dot(
    recipe: TrainingRecipe,
    which: str,
    a: Any,
    b: Any,
    dims: Any,
    gradient: int | None,
    keys: tuple[Any, Any, Any],
    amaxes: Mapping[str, Any],
    out: Any,
    probe: Any = None,
) -> jax.Array:
    """``dot_general(a, b, dims)`` as GEMM ``which`` of ``recipe`` (``gradient``: the operand that
    carries the cotangent), in the layout of ``dot_general(a, b, dims)``. ``keys``: the GEMM's key split
    in three (`fpemu._training.gemm_dot.split_key`). ``probe``: what every materialization of the GEMM reads
    for its predicate (`quantized_dot_core`'s)."""
    options = dict(gemm=recipe.gemm(which), result=None if out is None else np.dtype(out), margin=int(recipe.margin))
    lhs_amax, rhs_amax = _amaxes(recipe, which, amaxes)
    if not swapped(which, gradient):
        return quantized_dot_core(a, b, keys, lhs_amax, rhs_amax, probe, dn=_dn(dims), **options)
    (lc, rc), (lb, rb) = dims
    y = quantized_dot_core(b, a, keys, lhs_amax, rhs_amax, probe, dn=_dn(((rc, lc), (rb, lb))), **options)
    nb, na, nr = len(lb), a.ndim - len(lc) - len(lb), b.ndim - len(rc) - len(rb)
    return lax.transpose(y, (*range(nb), *range(nb + nr, nb + nr + na), *range(nb, nb + nr)))


def role_conv(
    recipe: TrainingRecipe,
    which: str,
    a: Any,
    b: Any,
    params: Mapping[str, Any],
    gradient: int | None,
    keys: tuple[Any, Any, Any],
    amaxes: Mapping[str, Any],
    out: Any,
    probe: Any = None,
) -> jax.Array:
    """``conv_general_dilated(a, b, **params)`` as GEMM ``which``: each operand quantized by its role's
    quantizer along the dimension the convolution contracts as its input feature (with the Hadamard
    transform there), then the emulated convolution with the GEMM's accumulator. ``keys``, ``probe``: as `role_dot`'s."""
    gemm = recipe.gemm(which)
    quantizers, k, amax = gemm.quantizers, keys, _amaxes(recipe, which, amaxes)
    if swapped(which, gradient):
        quantizers, k, amax = quantizers[::-1], (k[1], k[0], k[2]), amax[::-1]
    return quantized_conv_core(a, b, params, gemm, quantizers, k, amax, out, recipe.margin, probe)


# -- the custom_vjp of a forward dot -------------------------------------------------------------------


def _remaining(n: int, *removed: Sequence[int]) -> list[int]:
    gone = set(itertools.chain(*removed))
    return [i for i in range(n) if i not in gone]


def _ranges_like(*xs: Sequence[int]) -> list[list[int]]:
    out, start = [], 0
    for x in xs:
        out.append(list(range(start, start + len(x))))
        start += len(x)
    return out


def transpose_lhs(dims: Any, x_ndim: int, y_ndim: int, swap_ans: bool = False) -> tuple[Any, tuple[int, ...]]:
    """JAX's transpose of ``dot_general(x, y, dims)`` with respect to ``x``: the dimension numbers of
    ``dot_general(g, y, ...)`` and the permutation of its result (as in ``jax._src.lax``)."""
    (xc, yc), (xb, yb) = dims
    x_kept, y_kept = _remaining(x_ndim, xc, xb), _remaining(y_ndim, yc, yb)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
    new = ((tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(yb)))
    x_contract_sorted_by_y = [int(v) for v in np.take(np.asarray(xc, int), np.argsort(yc))]
    axes = tuple(int(i) for i in np.argsort([*xb, *x_kept, *x_contract_sorted_by_y]))
    return new, axes


@functools.lru_cache(maxsize=64)
def current_gradients(recipe: TrainingRecipe) -> TrainingRecipe:
    """``recipe`` with delayed scaling of the gradient operands (dgrad's lhs, wgrad's rhs) replaced by
    current (per-tensor) scaling: their amax lives in a backward pass that emulate does not see."""

    def current(q: Quantizer | None) -> Quantizer | None:
        return dataclasses.replace(q, scaling="tensor") if q is not None and q.scaling == "delayed" else q

    dgrad = dataclasses.replace(recipe.dgrad, lhs=current(recipe.dgrad.lhs))
    wgrad = dataclasses.replace(recipe.wgrad, rhs=current(recipe.wgrad.rhs))
    return dataclasses.replace(recipe, dgrad=dgrad, wgrad=wgrad)


def forward_with_vjp(
    recipe: TrainingRecipe, a: Any, b: Any, dims: Any, keys: dict, amaxes: dict, out: Any, probe: Any = None
) -> Any:
    """The forward GEMM, differentiable as the recipe says: its VJP computes dgrad (``g . W^T``)
    and wgrad (``x^T . g``) on the operands the forward pass received, as JAX's transpose rule lays
    them out (so ``jax.grad(emulate(f))`` equals ``emulate(jax.grad(f))`` bit for bit when the
    cotangents agree). Delayed-scaling gradients are scaled from their current amax there
    (`current_gradients`). ``probe``: as `role_dot`'s, for the three GEMMs."""

    backward = current_gradients(recipe)

    def forward(a, b, keys, amaxes, probe):
        return role_dot(recipe, "forward", a, b, dims, None, keys["forward"], amaxes, out, probe)

    def gradients(a, b, g, keys, amaxes, probe):
        g = computed_once(g, probe=probe)  # read by dgrad and by wgrad: computed once for both
        (lc, rc), (lb, rb) = dims
        dims_a, axes_a = transpose_lhs(dims, a.ndim, b.ndim)
        da = lax.transpose(role_dot(backward, "dgrad", g, b, dims_a, 0, keys["dgrad"], amaxes, out, probe), axes_a)
        dims_b, axes_b = transpose_lhs(((rc, lc), (rb, lb)), b.ndim, a.ndim, swap_ans=True)
        db = lax.transpose(role_dot(backward, "wgrad", g, a, dims_b, 0, keys["wgrad"], amaxes, out, probe), axes_b)
        return da, db

    return _with_gradients(forward, gradients)(a, b, keys, amaxes, probe)


def _with_gradients(forward: Callable, gradients: Callable) -> Callable:
    """``forward(a, b, keys, amaxes, probe)`` as a `jax.custom_vjp` whose backward pass is
    ``gradients(a, b, g, keys, amaxes, probe) -> (da, db)`` on the operands the forward pass received
    (cast back to their dtypes; the keys, amaxes and probe get no cotangent)."""

    @jax.custom_vjp
    def gemm(a, b, keys, amaxes, probe):
        return forward(a, b, keys, amaxes, probe)

    def fwd(a, b, keys, amaxes, probe):
        return gemm(a, b, keys, amaxes, probe), (a, b, keys, amaxes, probe)

    def bwd(res, g):
        a, b, keys, amaxes, probe = res
        da, db = gradients(a, b, g, keys, amaxes, probe)
        return da.astype(a.dtype), db.astype(b.dtype), None, None, None

    gemm.defvjp(fwd, bwd)
    return gemm


# -- the custom_vjp of a forward convolution -----------------------------------------------------------


def forward_conv_with_vjp(
    recipe: TrainingRecipe,
    params: Mapping[str, Any],
    a: Any,
    b: Any,
    keys: dict,
    amaxes: dict,
    out: Any,
    probe: Any = None,
) -> Any:
    """The forward convolution ``conv_general_dilated(a, b, **params)`` (result dtype ``out``),
    differentiable as the recipe says: its VJP computes the transposed convolutions that JAX's own
    VJP emits (``conv(g, rev(W))``: dgrad; ``conv(x, g)``: wgrad), each by `role_conv` as
    ``emulate(jax.grad(f))`` computes them, so that ``jax.grad(emulate(f))`` equals it bit for bit
    when the cotangents agree. Delayed-scaling gradients are scaled from their current amax there
    (`current_gradients`). ``probe``: as `role_dot`'s, for the three GEMMs."""

    backward = current_gradients(recipe)

    def forward(a, b, keys, amaxes, probe):
        return role_conv(recipe, "forward", a, b, params, None, keys["forward"], amaxes, out, probe)

    def gradients(a, b, g, keys, amaxes, probe):
        g = computed_once(g.astype(out), probe=probe)  # read by dgrad and by wgrad
        return conv_transposes(backward, params, a, b, g, keys, amaxes, probe)

    return _with_gradients(forward, gradients)(a, b, keys, amaxes, probe)


def conv_transposes(
    recipe: TrainingRecipe,
    params: Mapping[str, Any],
    a: Any,
    b: Any,
    g: Any,
    keys: dict,
    amaxes: dict,
    probe: Any = None,
) -> tuple[Any, Any]:
    """``(da, db)``: JAX's VJP of ``conv_general_dilated(a, b, **params)`` applied to ``g``, with each
    of its convolutions computed by `role_conv`. A convolution reading the cotangent is dgrad when
    its other operand is computed from the kernel ``b`` (``rev(W)``), wgrad otherwise; the other
    equations (``rev``, layout changes of grouped convolutions) are bound as they are."""
    conv = lambda a, b: lax.conv_general_dilated_p.bind(a, b, **params)
    vjp = lambda a, b, g: jax.vjp(conv, a, b)[1](g)
    closed = jax.make_jaxpr(vjp)(a, b, g)
    jaxpr = closed.jaxpr
    env = dict(zip([*jaxpr.constvars, *jaxpr.invars], [*closed.consts, a, b, g], strict=True))
    cotangent, kernel = {jaxpr.invars[2]}, {jaxpr.invars[1]}
    read = lambda v: v.val if isinstance(v, Literal) else env[v]
    for inner in jaxpr.eqns:
        ins = [v for v in inner.invars if not isinstance(v, Literal)]
        carried = [not isinstance(v, Literal) and v in cotangent for v in inner.invars[:2]]
        if inner.primitive.name == "conv_general_dilated" and sum(carried) == 1:
            gradient = carried.index(True)
            which = "dgrad" if inner.invars[1 - gradient] in kernel else "wgrad"
            x, y = (read(v) for v in inner.invars)
            dtype = cast(Any, inner.outvars[0].aval).dtype  # a ShapedArray (newer JAX types it AbstractValue)
            out = role_conv(recipe, which, x, y, inner.params, gradient, keys[which], amaxes, dtype, probe)
            outs = [out.astype(dtype)]
        else:
            outs = bind(inner, [read(v) for v in inner.invars])
        for tainted in (cotangent, kernel):
            if any(v in tainted for v in ins):
                tainted.update(inner.outvars)
        env.update(zip(inner.outvars, outs, strict=True))
    da, db = (read(v) for v in jaxpr.outvars)
    return da, db
