"""Where XLA may fuse: `materialize`, which computes arrays once instead of inside every consumer's loop.

XLA fuses an elementwise producer into each of its consumers, recomputing it there. That is right for
cheap producers and wrong for expensive ones read by several loops: a block's scale exponent or NVFP4's
E4M3 block scale (dozens of operations per group) broadcast to each of its elements, or a training recipe's operand (the
backward pass's chain of elementwise work) read by a quantizer's amax reduction and again by its
rounding loop, or the Hadamard transform's signs (a hash of the key) read by each of its elements,
or its input, read several times by each butterfly pass.
A quantized operand is also materialized after its quantizer: XLA would fuse the dot's operand
transpose into the quantizer's rounding loop, which then runs in the transposed order, unvectorised
(for an operand the dot transposes, from `REORDERED_MIN_SIZE` elements on). A chunked accumulation's
running sum is materialized too (`fpemu._ops.accumulate`).
`fpemu.scaled` and the training recipes' GEMMs and Hadamard transform use `materialize` there; under
`fpemu.emulate`, a value that several GEMMs read (a layer's input, a cotangent) is materialized once
for all of them. A materialized array has the identity's derivative.

Each materialization costs compile time: the conditional, its predicate and a loop of its own for each
array (on the bench transformer block's mxfp8 step, `fpemu.scaled`'s made up about 40% of XLA:CPU's
time). The materialization (its custom derivative and its conditional) is a jitted function, traced
and lowered once per combination of shapes and dtypes and inlined by XLA: the conditional built at
every site was 40% of the lowering of the transformer block's nvfp4 step (0.56 -> 0.33 s), and the
custom derivative traced at every site about 0.3 ms more per materialization. The predicate is a
kernel of its own, reading the first element of ``probe``: materializations that pass the same probe
share one (XLA computes identical predicates once). So a training GEMM passes each operand as it
came to every materialization of that operand's chain (16-17 kernels fewer on the transformer
block's fp8_blockwise, mxfp8 and nvfp4 steps, bench/RESULTS_training.md, "seventh session"), and
under `fpemu.emulate` every materialization of the recipe GEMMs of one traced body reads one probe,
`shared_probe` of the body's arguments (18-19 kernels fewer again, "eighth session"). Only the long
chains are materialized; values a few operations away from them (a block's grid limits from its
scale exponent, NaN masks, NVFP4's encode scale) are recomputed in the elements' loop
(bench/RESULTS_training.md, "fewer materializations"; tests/scaled/test_layout.py).

`fpemu.emulate` also materializes every second link of a chain of rounded sums (a deep model's
residual stream and its gradient), which XLA:CPU would otherwise recompute in every loop that reads a
later link. A cheaper cut without a kernel of its own, a division by ones that XLA cannot see to be
ones, made jax 0.12's XLA:CPU take minutes to compile a loop of several of them (its code generator), so
it was removed (bench/RESULTS_training.md, "nineteenth session").

The opposite case is `computed_together`: a quantizer's per-tensor scalars (a scale and its
reciprocal) that XLA would compute in a kernel each are stacked, so that they are one kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "MATERIALIZE_MIN_SIZE",
    "REORDERED_MIN_SIZE",
    "computed_once",
    "computed_together",
    "materialize",
    "shared_probe",
]

#: Arrays computed for this many elements or more are materialized (smaller ones: not worth the compile time).
MATERIALIZE_MIN_SIZE = 1 << 16

#: Arrays that their consumer reads in another order are materialized from this many elements.
REORDERED_MIN_SIZE = 1 << 10


def materialize(arrays: tuple[jnp.ndarray, ...], probe: jnp.ndarray | None = None) -> tuple[jnp.ndarray, ...]:
    """The same arrays, computed once rather than fused into every consumer's loop.

    XLA fuses an elementwise producer into its consumer even through a broadcast, so per-group
    values (the scale exponent, the grid's limits: dozens of operations) would be recomputed for
    each of a group's elements. On CPU (where optimization barriers are removed before fusion) they
    are passed through an identity ``lax.cond`` on a data-dependent predicate, which fusion cannot
    cross; either branch returns the arrays unchanged, so the predicate does not matter. The
    derivative is the identity's (`_materialized`).

    The predicate reads the first element of ``arrays[0]``, or of ``probe`` if given: a
    data-dependent array that is already computed (a reduction's result), so that XLA does not
    compute the first element's chain a second time, in the predicate's own fusion, where that
    chain is short enough to duplicate. Explicitly sharded arrays (JAX's sharding in types) are
    returned as they are: JAX refuses the predicate's slice of them.
    """
    if not arrays or any(a.size == 0 or _sharded_in_type(a) for a in arrays):
        return arrays
    if probe is None or probe.size == 0 or _sharded_in_type(probe):
        probe = arrays[0]
    return _materialized_jit(tuple(arrays), probe)


def shared_probe(values: Sequence[Any]) -> jnp.ndarray | None:
    """A probe that every materialization of one traced program can share: ``bool[1]``, whether the
    first element of the first of ``values`` that can give one is zero (None if none can).

    Such a value is a JAX array (a tracer of the program, or a concrete array; a NumPy constant would
    fold the predicate away), non-empty, of a numeric or boolean dtype, and not explicitly sharded.
    Its gradient is stopped, and the comparison is boolean, so that it carries no tangent through
    the custom derivatives that pass it on. XLA then computes one predicate for all the program's
    conditionals, instead of a kernel each (`fpemu.emulate` passes it to every materialization of
    its recipe GEMMs: bench/RESULTS_training.md, 2026-11-29, "eighth session").
    """
    for value in values:
        if not isinstance(value, jax.Array) or value.size == 0 or _sharded_in_type(value):
            continue
        if not (jnp.issubdtype(value.dtype, jnp.number) or value.dtype == jnp.bool_):
            continue  # typed PRNG keys and other extended dtypes
        first = lax.stop_gradient(value).reshape(-1)[:1]
        return lax.eq(first, _zero_of(first))
    return None


def _zero_of(a: jnp.ndarray) -> np.ndarray:
    """A zero of ``a``'s dtype, as a NumPy constant (a `lax` comparison with it binds one equation)."""
    return np.zeros((), a.dtype)


def _sharded_in_type(a: jnp.ndarray) -> bool:
    """Whether ``a`` has explicitly sharded dimensions (JAX's sharding in types, ``AxisType.Explicit``):
    JAX refuses the predicate's one-element slice of such an array, so it is left to XLA as it is."""
    typeof = getattr(jax, "typeof", None)  # JAX versions without it have no Explicit axes either
    spec = getattr(getattr(typeof(a), "sharding", None), "spec", None) if typeof is not None else None
    return spec is not None and any(s is not None for s in spec)


@jax.custom_jvp
def _materialized(arrays: tuple[jnp.ndarray, ...], probe_of: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    return _barrier(arrays, probe_of)


@jax.jit
def _barrier(arrays: tuple[jnp.ndarray, ...], probe_of: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """The conditional, jitted: traced and lowered once per combination of shapes and dtypes (a
    program materializes a hundred arrays, many alike), then inlined by XLA as any call is."""
    return _conditional(arrays, probe_of)


@jax.custom_batching.custom_vmap
def _conditional(arrays: tuple[jnp.ndarray, ...], probe_of: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    probe = _xor_zero(probe_of.reshape(-1)[:1])
    pred = lax.reduce_or(probe if probe.dtype == jnp.bool_ else lax.eq(probe, _zero_of(probe)), (0,))
    return lax.platform_dependent(pred, arrays, cpu=_on_cpu, default=_as_they_are)


@_conditional.def_vmap
def _conditional_vmap(axis_size: int, in_batched: Any, arrays: tuple[jnp.ndarray, ...], probe_of: jnp.ndarray):
    """Under ``vmap``: one conditional for the whole batch, its predicate read from the first element of
    the batched probe, and each array batched as it came. JAX's own rule turns a conditional whose
    predicate is batched into a select of both branches, with every array broadcast to the batch: a
    weight that the batch shares, materialized with a batched probe (`shared_probe` of a batched
    argument), would be copied once per example, and its GEMM would become a batch of GEMMs."""
    del axis_size
    arrays_batched, _ = in_batched
    return _conditional(arrays, probe_of), arrays_batched


def _on_cpu(pred: jnp.ndarray, arrays: tuple[jnp.ndarray, ...]) -> tuple[jnp.ndarray, ...]:
    return lax.cond(pred, _identity, _no_op, arrays)


def _as_they_are(pred: jnp.ndarray, arrays: tuple[jnp.ndarray, ...]) -> tuple[jnp.ndarray, ...]:
    return arrays


def _identity(arrays: tuple[jnp.ndarray, ...]) -> tuple[jnp.ndarray, ...]:
    return arrays


def _no_op(arrays: tuple[jnp.ndarray, ...]) -> tuple[jnp.ndarray, ...]:
    """The identity again, written differently so that XLA keeps the conditional."""
    return tuple(_xor_zero(a) for a in arrays)


@_materialized.defjvp
def _materialized_jvp(primals, tangents):
    """The tangents as they are: the identity's derivative. Differentiated as written, the branch that
    runs when the first element is not zero goes through integer bit patterns, whose derivative is
    zero, and every gradient through a materialized array would be zero."""
    (arrays, probe), (tangent, _) = primals, tangents
    return _materialized(arrays, probe), tangent


#: `_materialized` jitted: its custom derivative traced once per combination of shapes and dtypes, not at
#: every call (about 0.3 ms of tracing and lowering per materialization; XLA inlines the call).
_materialized_jit = jax.jit(_materialized)


def _xor_zero(a: jnp.ndarray) -> jnp.ndarray:
    if a.dtype == jnp.bool_:
        return lax.bitwise_or(a, jnp.zeros((), jnp.bool_))
    if jnp.issubdtype(a.dtype, jnp.integer):
        return lax.bitwise_xor(a, jnp.zeros((), a.dtype))
    uint = jnp.dtype(f"uint{8 * a.dtype.itemsize}")
    bits = lax.bitcast_convert_type(a, uint)
    return lax.bitcast_convert_type(lax.bitwise_xor(bits, jnp.zeros((), uint)), a.dtype)


def computed_once(x: jnp.ndarray, *, reordered: bool = False, probe: jnp.ndarray | None = None) -> jnp.ndarray:
    """``x`` materialized (`materialize`) if it has `MATERIALIZE_MIN_SIZE` elements or more, else as it is.

    ``reordered``: its consumer reads it in another order (a dot that transposes its operand), so
    it is materialized if it has `REORDERED_MIN_SIZE` elements or more. Fused into that consumer, the
    loop computing ``x`` would run in the consumer's order, unvectorised: a transposed operand's
    quantizer took 100 us for 8,192 elements (the digits MLP's fp8_blockwise step). ``probe``:
    `materialize`'s.
    """
    return materialize((x,), probe)[0] if x.size >= (REORDERED_MIN_SIZE if reordered else MATERIALIZE_MIN_SIZE) else x


def computed_together(*arrays: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """The same values, computed in one XLA kernel: one-element arrays of one shape and dtype (a
    quantizer's per-tensor scales) stacked behind an optimization barrier, which keeps XLA's
    simplifier from taking the stack apart again, then read back.

    XLA:CPU computes a value that several loops read, and that is too costly to recompute in each (a
    division), in a kernel of its own, however small: a per-tensor scale from the amax, its
    reciprocal, and the decode scale with its NaN were two or three scalar kernels per quantized
    operand. Stacked, they are one (fp8_current: 9 kernels fewer on the digits MLP's step; NVFP4's
    tensor scales: 14 fewer on the digits MLP, 32 on the transformer block; bench/RESULTS_training.md,
    "eleventh session"). Anything else (fewer than two arrays, larger arrays, or several shapes or
    dtypes) is returned as it is. The derivative is the identity's.
    """
    if len(arrays) < 2 or any(a.size != 1 for a in arrays) or len({(a.shape, a.dtype) for a in arrays}) != 1:
        return arrays
    shape = arrays[0].shape
    rows = [lax.reshape(a, (1, *shape)) for a in arrays]  # lax, not jnp.stack and indexing: no nested jit to lower
    stacked = lax.optimization_barrier(lax.concatenate(rows, 0))
    return tuple(lax.reshape(lax.slice_in_dim(stacked, i, i + 1), shape) for i in range(len(arrays)))
