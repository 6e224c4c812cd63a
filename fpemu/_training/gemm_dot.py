"""`quantized_dot_general`: a dot with each operand quantized by a recipe along its own contraction.

`quantized_dot_general` checks its arguments once and calls `quantized_dot_core`, the jitted core that
internal callers (the GEMMs of `fpemu._training.gemm_vjp`) call directly with checked arguments.
`fpemu._training.gemm_conv` is its convolution.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from fpemu._args import int_arg, key_arg
from fpemu._core.format import fits
from fpemu._core.registry import get_format
from fpemu._engine import rng
from fpemu._ops.fusion import computed_once
from fpemu._ops.geometry import dot_geometry
from fpemu._ops.matmul import tensor_scaled_dot
from fpemu._training.hadamard import hadamard_along, hadamard_signs
from fpemu._training.layout import contracting_dims_arg
from fpemu._training.operands import operand_arg
from fpemu._training.quantize_operand import quantize_operand_split
from fpemu._training.quantizer import Quantizer, amax_arg, quantizer_key_arg
from fpemu._training.recipes import GemmRecipe

__all__ = ["bf16_exact", "dimension_numbers_arg", "quantized_dot_core", "quantized_dot_general", "split_key"]

_BF16 = get_format("bf16")
_DN_FORM = "((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))"

DimensionNumbers = tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]


def dimension_numbers_arg(
    dimension_numbers: Any, lhs_shape: Sequence[int], rhs_shape: Sequence[int]
) -> DimensionNumbers:
    """``dimension_numbers`` as tuples of non-negative ints, the contractions checked against the shapes
    (`fpemu.dot_general` checks the rest)."""
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise TypeError(f"dimension_numbers must be {_DN_FORM}, got {dimension_numbers!r}") from None
    lc = contracting_dims_arg(lc, len(lhs_shape), "dimension_numbers (lhs contracting)")
    rc = contracting_dims_arg(rc, len(rhs_shape), "dimension_numbers (rhs contracting)")
    lb = contracting_dims_arg(lb, len(lhs_shape), "dimension_numbers (lhs batch)")
    rb = contracting_dims_arg(rb, len(rhs_shape), "dimension_numbers (rhs batch)")
    if len(lc) != len(rc):
        raise ValueError(
            f"dimension_numbers contract {len(lc)} lhs dimensions with {len(rc)} rhs dimensions: {lc}, {rc}"
        )
    sizes = ([lhs_shape[d] for d in lc], [rhs_shape[d] for d in rc])
    if sizes[0] != sizes[1]:
        raise ValueError(
            f"the contracting dimensions differ in size: lhs {lc} of shape {tuple(lhs_shape)} has {sizes[0]}, "
            f"rhs {rc} of shape {tuple(rhs_shape)} has {sizes[1]}"
        )
    return (lc, rc), (lb, rb)


def bf16_exact(q: Quantizer | None) -> bool:
    """Whether every value `quantize_operand_split` gives for ``q`` is a bfloat16 value (float32-subnormal
    products aside, which XLA:CPU's dot flushes anyway): elements that fit bfloat16 times powers of
    two or a per-tensor scale (taken out), or NVFP4's elements times narrow block scales whose
    significands fit bfloat16's precision together, in its normal range."""
    if q is None or not fits(q.element, _BF16):
        return False
    if q.tensor_scale:  # two levels: the blocks are element times block scale, exact
        e, s = q.element, q.scale_format
        normal = e.min_subnormal * s.min_subnormal >= _BF16.min_normal and e.max * s.max <= _BF16.max
        return normal and e.precision + s.precision <= _BF16.precision
    return q.pow2 or q.tensor_scaled


def quantized_dot_general(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    gemm: GemmRecipe,
    *,
    key: jax.Array | None = None,
    lhs_amax: Any = None,
    rhs_amax: Any = None,
    preferred_element_type: DTypeLike | None = None,
    margin: int = 0,
) -> jax.Array:
    """`jax.lax.dot_general` with each operand quantized as ``gemm`` says, along its own contraction.

    Special values first: a block (tile, row, tensor) holding NaN or ±inf dequantizes to NaN, so
    every product that reads it is NaN; otherwise NaN and infinity propagate as in
    `fpemu.dot_general`. See `quantize_operand` for the quantization of one operand.

    The computation:

    1. An operand with a quantizer is converted to float32 (exact).
    2. With ``gemm.hadamard = n``: both operands are transformed along their merged contraction axis
       (`hadamard_along`, blocks of ``n``) with the same signs, which leaves the exact product unchanged.
    3. Each operand is quantized by its `Quantizer` along *its* contracting dimensions of
       ``dimension_numbers`` and dequantized to float32 (`quantize_operand`), except for a float32
       per-tensor scale ``t`` (`Quantizer.tensor_scaled`: FP8 current and delayed scaling, NVFP4's
       second level), which is kept apart (`quantize_operand_split`); an operand whose quantizer is
       None is used as it is.
    4. `fpemu.dot_general` multiplies the operands (exact products) and sums them in float32,
       rounding the running sum to ``gemm.accumulate`` every ``gemm.accumulate_every`` products
       when set. When both operands hold bfloat16 values (elements of at most 8 significant bits
       times power-of-two scales, or NVFP4's elements times their E4M3 block scales) the dot takes
       bfloat16 operands, which is exact and faster.
    5. The per-tensor scales multiply the float32 result once, ``fl(y * fl(t_lhs * t_rhs))``, as
       cuBLAS applies them (docs/training.md), then it is rounded to ``preferred_element_type``.

    Keys: ``key`` is split as ``jax.random.split(key, 3)`` into the lhs's, the rhs's and the
    Hadamard transform's keys (a raw key of two uint32 words as a Threefry key, whatever
    ``jax_default_prng_impl`` says); each is used only where needed (stochastic rounding, the signs).
    Without a key, stochastic rounding is an error and the Hadamard transform takes Transformer
    Engine's fixed signs (size 16).

    The gradient is that of the transform followed by straight-through quantization and
    `fpemu.dot_general`'s straight-through product (with per-tensor scales: the product with the
    other operand's ``fl(blocks * t)``).

    Args:
      lhs, rhs: float16, bfloat16 or float32 arrays.
      dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``.
      gemm: the `GemmRecipe`.
      key: a JAX PRNG key (see above).
      lhs_amax, rhs_amax: the float32 scalar amax of a ``scaling="delayed"`` operand (only then).
      preferred_element_type: the result dtype (None: float32).
      margin: Transformer Engine's ``margin`` (scales times ``2**margin``), for every operand.

    Returns:
      An array of shape ``batch + lhs free + rhs free``.

    Raises:
      TypeError, ValueError: naming the argument, for operands that are not float16/bfloat16/float32
        arrays, malformed or mismatched ``dimension_numbers``, a missing key for stochastic rounding
        (or a Hadamard transform of a size other than 16), a missing or superfluous amax.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu import training_recipe
      >>> x = jnp.linspace(-1.0, 1.0, 64).reshape(2, 32); w = jnp.ones((32, 3))
      >>> y = quantized_dot_general(x, w, (((1,), (0,)), ((), ())), training_recipe("mxfp8").forward)
      >>> y.shape, y.dtype.name
      ((2, 3), 'float32')
    """
    if not isinstance(gemm, GemmRecipe):
        raise TypeError(f"gemm must be a GemmRecipe, got {type(gemm).__name__}")
    a = operand_arg(lhs, "lhs")
    b = operand_arg(rhs, "rhs")
    (lc, rc), (lb, rb) = dimension_numbers_arg(dimension_numbers, a.shape, b.shape)
    for q, amax, name in ((gemm.lhs, lhs_amax, "lhs_amax"), (gemm.rhs, rhs_amax, "rhs_amax")):
        if q is None:
            if amax is not None:
                raise ValueError(f"{name} is only used with scaling='delayed'; this operand is not quantized")
            continue
        amax_arg(amax, q, name)  # errors name lhs_amax / rhs_amax
        quantizer_key_arg(key, q, "key")
    if key is not None:
        key_arg(key, True, "key", what="quantized_dot_general")
    if gemm.hadamard is not None and key is None:
        hadamard_signs(None, gemm.hadamard)  # raises for a size without fixed signs
    margin = int_arg(margin, "margin", minimum=-64, maximum=64)
    amaxes = tuple(
        None if q is None or q.scaling != "delayed" else jnp.asarray(amax).astype(jnp.float32)
        for q, amax in ((gemm.lhs, lhs_amax), (gemm.rhs, rhs_amax))
    )
    try:
        dtype = None if preferred_element_type is None else np.dtype(preferred_element_type)
    except TypeError:
        raise TypeError(
            f"preferred_element_type must be a float dtype or None, got {preferred_element_type!r}"
        ) from None
    keys = split_key(key)
    return quantized_dot_core(a, b, keys, *amaxes, dn=((lc, rc), (lb, rb)), gemm=gemm, result=dtype, margin=margin)


def split_key(key: Any) -> tuple[Any, Any, Any]:
    """(lhs key, rhs key, Hadamard key): ``jax.random.split(key, 3)`` (a raw key of two words as a Threefry key,
    `fpemu._engine.rng.split`), or three Nones without a key."""
    if key is None:
        return None, None, None
    split = rng.split(key, 3)
    return split[0], split[1], split[2]


@functools.partial(jax.jit, static_argnames=("dn", "gemm", "result", "margin"))
def quantized_dot_core(
    a, b, keys, lhs_amax, rhs_amax, probe=None, *, dn: DimensionNumbers, gemm: GemmRecipe, result: Any, margin: int
) -> jax.Array:
    """`quantized_dot_general` on checked arguments (the key already split, `split_key`'s three; float32
    amaxes of the delayed operands only; a result dtype or None): the checked-once core internal callers
    use. ``probe``: what the materializations of both operands' chains read for their predicate (None:
    each operand as it came)."""
    (lc, rc), _ = dn
    f32 = jnp.float32
    if gemm.lhs is not None:
        a = a.astype(f32)
    if gemm.rhs is not None:
        b = b.astype(f32)
    # The materializations of an operand's chain (the Hadamard transform, before its quantizer, inside
    # it) read ``probe`` for their predicate (emulate's: one for the whole traced body), else the first
    # element of the operand as it came, and the chunked sum reads the lhs's: XLA computes one predicate
    # for all of them instead of one each, a kernel fewer per materialization (bench/RESULTS_training.md,
    # "seventh session" and "eighth session"). Each probe is an input of the body or depends on its
    # operand only, so that an operand's quantization in two GEMMs (a weight in the forward GEMM and
    # in dgrad) stays one computation, which XLA computes once. The quantized rhs's materialization
    # reads the rhs's probe too (18 kernels fewer on the transformer block's mxfp8, nvfp4 and
    # fp8_rowwise steps, the same buffers: bench/RESULTS_training.md, "eleventh session"); the quantized
    # lhs keeps its own predicate: shared, it let XLA schedule the transformer block's MX wgrad
    # quantizer (whose lhs is the forward's activation) beside the forward one, and the buffer of
    # intermediate values grew 30 -> 32 MiB, over glibc's mmap threshold.
    probes = (a, b) if probe is None else (probe, probe)
    if gemm.hadamard is not None:
        a = hadamard_along(a.astype(f32), lc, gemm.hadamard, keys[2], probe=probes[0])
        b = hadamard_along(b.astype(f32), rc, gemm.hadamard, keys[2], probe=probes[1])
    tensor_scaled = any(q is not None and q.tensor_scaled for q in (gemm.lhs, gemm.rhs))
    args = a, b, keys[0], keys[1], lhs_amax, rhs_amax, *probes
    if not tensor_scaled:
        return _quantized_product(*args, dn, gemm, result, margin)[0]
    return _tensor_scaled_product(*args, dn, gemm, result, margin)


def _quantized_product(
    a, b, key_a, key_b, lhs_amax, rhs_amax, probe_a, probe_b, dn, gemm: GemmRecipe, result, margin: int
):  # fmt: skip
    """(the product, the quantized lhs, the quantized rhs) of steps 3 and 4 (see `quantized_dot_general`);
    ``probe_a``, ``probe_b``: the arrays the operands' materializations read for their predicates."""
    (lc, rc), _ = dn
    ta = tb = None
    # Quantized operands are materialized before and after their quantizer (the same bits either way).
    # Before: a quantizer reads its operand in several loops (the amax reduction, the rounding), and XLA
    # would recompute the operand's producers (the backward pass's elementwise chain) in each of them
    # (the transformer block's MXFP8 step: 1.74x emulated bf16 -> 1.07x). After: XLA would fuse the dot's
    # operand transposes into the quantizer's rounding loop, which then runs in the transposed order,
    # unvectorised (bench/RESULTS_training.md); so an operand the dot transposes is materialized after
    # its quantizer even when small (the digits MLP's fp8_blockwise step: 1.9x emulated bf16 -> 1.3x).
    if gemm.lhs is not None:
        a, ta = quantize_operand_split(
            computed_once(a, probe=probe_a), lc, gemm.lhs, key=key_a, amax=lhs_amax, margin=margin, probe=probe_a
        )
    if gemm.rhs is not None:
        b, tb = quantize_operand_split(
            computed_once(b, probe=probe_b), rc, gemm.rhs, key=key_b, amax=rhs_amax, margin=margin, probe=probe_b
        )
    quantized = (a if ta is None else lax.mul(a, ta), b if tb is None else lax.mul(b, tb))
    if bf16_exact(gemm.lhs) and bf16_exact(gemm.rhs):
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    plain = dot_geometry(a.shape, b.shape, dn).plain
    if gemm.lhs is not None:
        a = computed_once(a, reordered=not plain[0])  # its own predicate: see quantized_dot_core
    if gemm.rhs is not None:
        b = computed_once(b, reordered=not plain[1], probe=probe_b)
    y = tensor_scaled_dot(
        a, b, ta, tb, dn, accumulate=gemm.accumulate, accumulate_every=gemm.accumulate_every, result=result,
        probe=probe_a,
    )  # fmt: skip
    return y, *quantized


@functools.partial(jax.custom_jvp, nondiff_argnums=(8, 9, 10, 11))
def _tensor_scaled_product(a, b, key_a, key_b, lhs_amax, rhs_amax, probe_a, probe_b, dn, gemm, result, margin):
    """`_quantized_product` with per-tensor scales, whose gradient stays the straight-through product
    with the quantized other operand (``fl(blocks * t)``), as for every other recipe."""
    return _quantized_product(a, b, key_a, key_b, lhs_amax, rhs_amax, probe_a, probe_b, dn, gemm, result, margin)[0]


@_tensor_scaled_product.defjvp
def _tensor_scaled_jvp(dn, gemm, result, margin, primals, tangents):
    a, b, key_a, key_b, lhs_amax, rhs_amax, probe_a, probe_b = primals
    y, a_q, b_q = _quantized_product(a, b, key_a, key_b, lhs_amax, rhs_amax, probe_a, probe_b, dn, gemm, result, margin)
    da, db = (t.astype(jnp.float32) for t in tangents[:2])
    dot = functools.partial(lax.dot_general, dimension_numbers=dn, precision=lax.Precision.HIGHEST)
    y_dot = dot(da, b_q.astype(jnp.float32)) + dot(a_q.astype(jnp.float32), db)
    return y, y_dot.astype(y.dtype)
