"""Quantized matmul as a Pallas kernel: `fpemu.matmul`'s semantics with the roundings fused in.

The kernel computes ``C = A @ B`` for 2-D ``A`` (M, K) and ``B`` (K, N) on a grid of
(M / block_m, N / block_n) output tiles. Each grid step walks the contraction with a loop over
K steps: it loads a (block_m, s) slice of A and an (s, block_n) slice of B, rounds them to their
formats with the integer engine of `fpemu.quantize` (the same code, on the tile's bits), multiplies
them exactly (bfloat16 dots with float32 accumulation when both formats are bfloat16 values, as
on the XLA path) and accumulates in float32, or in an emulated narrow accumulator that is
rounded after every ``accumulate_every`` products. docs/matmul.md is the contract and
docs/kernels.md spells out the tile order; `matmul_kernel_reference` (which is `fpemu.matmul`)
is the reference. The options are checked by the code that checks `fpemu.matmul`'s, and the
running sum is rounded by the same step (`fpemu._ops.accumulate.round_accumulator`).

The step ``s`` is ``block_k``, or ``gcd(accumulate_every, block_k)`` with an emulated accumulator,
so chunk boundaries fall on step boundaries for every ``accumulate_every`` and every block size.
Steps narrower than 16 (Triton's smallest dot) are computed as rank-1 updates, one contraction
index at a time, in interpret mode too, so that interpret mode runs the code a GPU would compile.

The kernel asks for the Triton backend explicitly (`TritonCompilerParams`): JAX (0.10 to 0.12) would
otherwise lower a ``pallas_call`` on a GPU to Mosaic GPU. It uses only what Pallas lowers to
Triton: ref slices with `ds`, scalar loads of the seeds and the scale, 2-D dots, `fori_loop`.

Status: tested in Pallas interpret mode on CPU against `fpemu.matmul` (bit for bit where the chunk
sums are exact) and against `fpemu.testing.dot_general_reference`. Its lowering to a Triton kernel
is checked in CI (tests/kernels/test_triton_lowering.py), but the compiled GPU path has not yet
been compiled to PTX or run on a GPU. No gradient: use `fpemu.matmul` (straight-through) for training.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from fpemu._core.format import Format
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike, get_format
from fpemu._engine import convert, rng
from fpemu._ops.accumulate import device_operands, positive_zero, round_accumulator, scale_product, times_scale
from fpemu._ops.geometry import MatmulGeometry, matmul_geometry
from fpemu._ops.matmul import matmul
from fpemu._ops.matmul_config import (
    MatmulConfig,
    MatmulOptions,
    matmul_call,
)
from fpemu.kernels._matmul_inputs import (
    SEED_ACC0,
    SEED_LHS,
    SEED_OUT,
    SEED_RHS,
    explicit_bits,
    pow2_at_least,
    seed_table,
)
from fpemu.kernels._pallas import (
    COMPILED_PLATFORM,
    BlockSpec,
    TritonCompilerParams,
    ds,
    interpret_mode,
    pallas_call,
    program_id,
)

_FP32 = get_format("fp32")
_MIN_DOT = 16  # Triton's dot needs every dimension >= 16: narrower K steps are rank-1 updates
_MAX_INDEX = 1 << 32  # stochastic rounding indexes elements with uint32
_DIMS = (((1,), (0,)), ((), ()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockSizes:
    """Tile sizes: a block_m x block_n output tile per grid step, block_k contraction elements per loop step.

    Every size is a positive power of two (Triton's tensor sizes are). With ``accumulate_every=k``
    a loop step takes ``gcd(k, block_k)`` contraction elements, so any k works with any block_k.
    On a GPU, block_m and block_n must be at least 16 (Triton's smallest dot).
    """

    block_m: int
    block_n: int
    block_k: int

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"{name}={value!r} must be a positive power of two")

    @classmethod
    def default(cls, platform: str) -> BlockSizes:
        """Per-device defaults: Triton-sized tiles on a GPU (not yet tuned: never run there), large
        tiles in interpret mode, where every grid step costs milliseconds."""
        if platform == COMPILED_PLATFORM:
            return cls(block_m=64, block_n=64, block_k=32)
        return cls(block_m=256, block_n=256, block_k=256)


def _fitted(blocks: BlockSizes, m: int, n: int, k: int, platform: str) -> BlockSizes:
    """Default blocks no larger than the (power-of-two rounded) problem; at least 16 on a GPU."""
    low = _MIN_DOT if platform == COMPILED_PLATFORM else 1
    return BlockSizes(
        block_m=min(blocks.block_m, max(pow2_at_least(m), low)),
        block_n=min(blocks.block_n, max(pow2_at_least(n), low)),
        block_k=min(blocks.block_k, max(pow2_at_least(k), low)),
    )


def _round(
    x: jax.Array, fmt: Format, cfg: MatmulConfig, rounding: Rounding | None = None, saturate: Any = None,
    random: jax.Array | None = None,
) -> jax.Array:  # fmt: skip
    """`fpemu.quantize` of float32 values in ``rounding`` (None: the call's), on their bits (the same
    engine, options and random bits); ``saturate`` None is the call's."""
    options = cfg.rounding_options(rounding)
    if saturate is not None:
        options["saturate"] = saturate
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    out = convert.round_narrow(
        bits,
        src=_FP32,
        dst=fmt,
        subnormals=True,
        output="src_bits",
        random=random,
        random_bits=convert.DEFAULT_RANDOM_BITS,
        **options,
    )
    return lax.bitcast_convert_type(out.astype(jnp.uint32), jnp.float32)


def _matmul_kernel(
    seeds_ref,
    scale_ref,
    a_ref,
    b_ref,
    *refs,
    explicit: tuple[str, ...],
    cfg: MatmulConfig,
    n: int,
    k: int,
    step: int,
    steps: int,
    chunk_steps: int,
    block_m: int,
    block_n: int,
    scaled: bool,
):
    """One (block_m, block_n) output tile: a loop over ``steps`` K steps of ``step`` elements.

    Refs: ``seeds_ref`` (uint32 seed pairs: lhs, rhs, output, then one per accumulator chunk),
    ``scale_ref`` (the output scale), ``a_ref`` (block_m, K) and ``b_ref`` (K, block_n) in the
    input dtype (K padded with zeros to whole steps), then the explicit random bits of the streams
    named in ``explicit`` (uint32, in the layouts of `_explicit_bits`), then ``out_ref``
    (block_m, block_n). Rows and columns beyond M and N are padding, computed and sliced off by the
    caller.
    """
    *bits_refs, out_ref = refs
    bits = dict(zip(explicit, bits_refs))
    rows = (lax.broadcasted_iota(jnp.int32, (block_m, 1), 0) + program_id(0) * block_m).astype(jnp.uint32)
    cols = (lax.broadcasted_iota(jnp.int32, (1, block_n), 1) + program_id(1) * block_n).astype(jnp.uint32)
    padded = steps * step != k

    def seeds(row):
        return seeds_ref[2 * row], seeds_ref[2 * row + 1]

    def lhs_tile(start, width: int) -> jax.Array:
        """A[:, start:start + width] rounded to `lhs`, in float32; zero beyond K."""
        x = a_ref[:, ds(start, width)].astype(jnp.float32)
        kk = lax.broadcasted_iota(jnp.int32, (1, width), 1) + start  # global contraction index
        if cfg.lhs is not None:
            random = None
            if "lhs" in bits:
                random = bits["lhs"][:, ds(start, width)]
            elif cfg.operands_stochastic:  # element (i, kk) of the (M, K) operand: index i * K + kk
                random = rng.hash_index(seeds(SEED_LHS), rows * jnp.uint32(k) + kk.astype(jnp.uint32))
            x = _round(x, cfg.lhs, cfg, random=random)
        return jnp.where(kk < k, x, 0.0) if padded else x  # a zero may round to non-zero (E8M0)

    def rhs_tile(start, width: int) -> jax.Array:
        """B[start:start + width, :] rounded to `rhs`, in float32; zero beyond K."""
        x = b_ref[ds(start, width), :].astype(jnp.float32)
        kk = lax.broadcasted_iota(jnp.int32, (width, 1), 0) + start
        if cfg.rhs is not None:
            random = None
            if "rhs" in bits:
                random = bits["rhs"][ds(start, width), :]
            elif cfg.operands_stochastic:  # element (kk, j) of the (K, N) operand: index kk * N + j
                random = rng.hash_index(seeds(SEED_RHS), kk.astype(jnp.uint32) * jnp.uint32(n) + cols)
            x = _round(x, cfg.rhs, cfg, random=random)
        return jnp.where(kk < k, x, 0.0) if padded else x

    def products(t) -> jax.Array:
        """The sum, in float32, of the products of K step ``t`` (exact when its partial sums are)."""
        start = t * step
        if step >= _MIN_DOT:
            x, y = lhs_tile(start, step), rhs_tile(start, step)
            if cfg.bf16_operands:  # exact casts: the values are bfloat16 values; exact products
                x, y = x.astype(jnp.bfloat16), y.astype(jnp.bfloat16)
            return lax.dot_general(x, y, _DIMS, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
        total = lhs_tile(start, 1) * rhs_tile(start, 1)
        for c in range(1, step):  # rank-1 updates, one contraction index at a time
            total = total + lhs_tile(start + c, 1) * rhs_tile(start + c, 1)
        return total

    def accumulate(acc: jax.Array, chunk_sum: jax.Array, j) -> jax.Array:
        """The running sum after chunk ``j``: the XLA path's step, with the kernel's rounding."""

        def round_to(total: jax.Array, rounding: Rounding, saturate: Saturation) -> jax.Array:
            random = None
            if rounding == "stochastic" and "accumulate" in bits:  # chunk j's columns of the tile's row
                random = bits["accumulate"][:, ds(j * block_n, block_n)]
            elif rounding == "stochastic":  # the chunk's key; element (i, j) of the (M, N) result: i * N + j
                random = rng.hash_index(seeds(SEED_ACC0 + j), rows * jnp.uint32(n) + cols)
            return _round(total, cfg.accumulate, cfg, rounding, saturate, random)

        return round_accumulator(acc, chunk_sum, cfg, round_to)

    def chunk_sum(first, count: int) -> jax.Array:
        if count == 1:
            return products(first)
        return lax.fori_loop(1, count, lambda u, s: s + products(first + u), products(first))

    zeros = jnp.zeros((block_m, block_n), jnp.float32)
    if cfg.accumulate_every is None:  # one float32 sum over the whole contraction
        acc = positive_zero(lax.fori_loop(0, steps, lambda t, acc: acc + products(t), zeros))
    else:

        def chunk(j, acc):
            return accumulate(acc, chunk_sum(j * chunk_steps, chunk_steps), j)

        full, tail = divmod(steps, chunk_steps)
        acc = lax.fori_loop(0, full, chunk, zeros) if full else zeros
        if tail:  # the last chunk is shorter
            acc = accumulate(acc, chunk_sum(full * chunk_steps, tail), full)

    y = times_scale(acc, scale_ref[0]) if scaled else acc
    if cfg.out is not None:
        random = None
        if "out" in bits:
            random = bits["out"][...]
        elif cfg.operands_stochastic:
            random = rng.hash_index(seeds(SEED_OUT), rows * jnp.uint32(n) + cols)
        y = _round(y, cfg.out, cfg, random=random)
    out_ref[...] = y.astype(out_ref.dtype)


@functools.partial(jax.jit, static_argnames=("cfg", "block_sizes", "interpret"))
def matmul_pallas(
    a: jax.Array,
    b: jax.Array,
    lhs_scale: jax.Array | None,
    rhs_scale: jax.Array | None,
    key: jax.Array | None,
    random: dict[str, jax.Array] | None = None,
    *,
    cfg: MatmulConfig,
    block_sizes: BlockSizes,
    interpret: bool,
) -> jax.Array:
    """The kernel on checked (M, K) and (K, N) float32-or-narrower operands (`matmul_kernel` checks
    them); random bits from ``key``, or with ``cfg.explicit_random`` the checked ``random`` bits
    (`fpemu._ops.matmul_config.MatmulCall.random`)."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return jnp.zeros((m, n), cfg.result)
    # The division by a scale is one XLA operation, correctly rounded on every backend (Triton's
    # float32 division is not guaranteed to be); the rounding that follows is in the kernel.
    if lhs_scale is not None:
        a = a.astype(jnp.float32) / lhs_scale
    if rhs_scale is not None:
        b = b.astype(jnp.float32) / rhs_scale
    product = scale_product(lhs_scale, rhs_scale)
    scaled = product is not None
    scale = jnp.ones((1,), jnp.float32) if product is None else product.reshape(1)

    bm, bn, bk = block_sizes.block_m, block_sizes.block_n, block_sizes.block_k
    every = cfg.accumulate_every
    step = bk if every is None else math.gcd(every, bk)
    steps = -(-k // step)
    chunks = 0 if every is None else -(-k // every)
    k_pad = max(steps, 1) * step
    m_pad, n_pad = -(-m // bm) * bm, -(-n // bn) * bn
    a = jnp.pad(a, ((0, m_pad - m), (0, k_pad - k)))
    b = jnp.pad(b, ((0, k_pad - k), (0, n_pad - n)))
    seeds = seed_table(key, cfg, chunks)
    bits, bit_specs = explicit_bits(random or {}, m, n, k, chunks, (m_pad, n_pad, k_pad), (bm, bn))
    out_dtype = jnp.float32 if cfg.result == "float64" else jnp.dtype(cfg.result)
    kernel = functools.partial(
        _matmul_kernel, explicit=tuple(random or {}), cfg=cfg, n=n, k=k, step=step, steps=steps,
        chunk_steps=1 if every is None else every // step, block_m=bm, block_n=bn, scaled=scaled,
    )  # fmt: skip
    y = pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m_pad, n_pad), out_dtype),
        grid=(m_pad // bm, n_pad // bn),
        in_specs=[
            BlockSpec(seeds.shape, lambda i, j: (0,)),
            BlockSpec((1,), lambda i, j: (0,)),
            BlockSpec((bm, k_pad), lambda i, j: (i, 0)),
            BlockSpec((k_pad, bn), lambda i, j: (0, j)),
            *bit_specs,
        ],
        out_specs=BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=TritonCompilerParams(),  # Triton, not JAX's default Mosaic GPU
        interpret=interpret,
        name="fpemu_matmul_kernel",
    )(seeds, scale, a, b, *bits)
    return y[:m, :n].astype(cfg.result)


def _kernel_shapes(shape_a: Sequence[int], shape_b: Sequence[int]) -> MatmulGeometry:
    """The kernel's shapes: (M, K) and (K, N)."""
    shape_a, shape_b = tuple(shape_a), tuple(shape_b)
    if len(shape_a) != 2 or len(shape_b) != 2:
        raise ValueError(
            f"matmul_kernel takes 2-D a and b, got shapes a: {shape_a} and b: {shape_b}; for batches, "
            "jax.vmap it or use fpemu.matmul"
        )
    if shape_a[1] != shape_b[0]:
        raise ValueError(
            f"matmul_kernel: the last dimension of a ({shape_a[1]}) must equal the first dimension of b "
            f"({shape_b[0]}); shapes {shape_a} and {shape_b}"
        )
    return matmul_geometry(shape_a, shape_b)


def matmul_kernel(
    a: ArrayLike,
    b: ArrayLike,
    *,
    lhs: FormatLike | None = None,
    rhs: FormatLike | None = None,
    accumulate: FormatLike | None = "fp32",
    out: FormatLike | None = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: Saturation = False,
    stochastic_variant: StochasticVariant = "floor",
    exponent_ties: ExponentTies = "away",
    key: jax.Array | None = None,
    random: Mapping[str, ArrayLike] | None = None,
    lhs_scale: ArrayLike | None = None,
    rhs_scale: ArrayLike | None = None,
    preferred_element_type: DTypeLike | None = None,
    block_sizes: BlockSizes | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """`fpemu.matmul` of 2-D operands as a Pallas kernel: the same semantics, the same bits where sums are exact.

    Special values first: NaN and infinity propagate as in IEEE arithmetic (``inf * 0`` and
    ``inf - inf`` are NaN); -0 operands round as in `fpemu.quantize`, and a zero sum is +0
    (``-0 * 1`` summed alone gives +0, as in `fpemu.matmul`); an operand, running sum or
    output beyond its format's range becomes what `fpemu.quantize` gives (infinity, NaN or ±max),
    or ±max with ``saturate=True``; subnormal operands of the format are kept, but like the XLA
    path on CPU, float32 arithmetic in interpret mode flushes float32 subnormal products and sums
    to zero (no product of two formats up to fp16 is one).

    The model (docs/matmul.md, with the kernel's tile order in docs/kernels.md): ``a / lhs_scale``
    and ``b / rhs_scale`` are rounded to ``lhs``/``rhs`` in ``rounding``; the products are exact;
    with ``accumulate="fp32"`` and no ``accumulate_every`` they are summed in float32, otherwise in
    chunks of ``accumulate_every`` products along K, each chunk summed in float32 and added to the
    running sum (from +0) with one rounding to ``accumulate`` in ``accumulate_rounding``; the sum
    times ``lhs_scale * rhs_scale`` is rounded to ``out`` and cast to ``preferred_element_type``.
    Stochastic rounding draws the random bits of `fpemu.matmul` (the same key split and the same
    hash of each element's row-major index), so it gives the same result; explicit bits
    (``random=``, the mapping `fpemu.matmul` takes) give the same result as there too. The float32 summation
    order inside a chunk is the kernel's (K steps in order, a dot within a step): where those sums
    are inexact, the last bits may differ from `fpemu.matmul`'s, within the γ_K bound of
    docs/matmul.md. No gradient (use `fpemu.matmul`); float32 working dtype only.

    Args:
      a, b: 2-D float16, bfloat16 or float32 arrays of shapes (M, K) and (K, N).
      lhs, rhs, accumulate, out, accumulate_every, rounding, accumulate_rounding, saturate,
        stochastic_variant, exponent_ties, key, random, lhs_scale, rhs_scale,
        preferred_element_type: as for `fpemu.matmul`.
      block_sizes: a `BlockSizes`; default `BlockSizes.default` for the platform, shrunk to the
        problem's size.
      interpret: run in Pallas interpret mode (default: on CPU, where nothing else can run it).

    Returns:
      An (M, N) array of ``preferred_element_type`` (default float32).

    Raises:
      TypeError, ValueError: as `fpemu.matmul` (the same checks: the messages name the argument),
        operands that are not 2-D, float64 operands with ``jax_enable_x64`` (the kernel computes
        in float32), a ``block_sizes`` that is not a `BlockSizes`, a non-bool ``interpret``.

    Example:
      >>> import jax.numpy as jnp
      >>> from fpemu.kernels import matmul_kernel
      >>> a = jnp.array([[0.3, 1.0, 2.0]]); b = jnp.array([[1.0], [0.3], [0.3]])
      >>> matmul_kernel(a, b, lhs="e4m3fn", rhs="e4m3fn", interpret=True).tolist()  # 0.3 -> 0.3125
      [[1.25]]
      >>> matmul_kernel(a, b, lhs="e4m3fn", rhs="e4m3fn", out="e2m1fn", interpret=True).tolist()  # a tie
      [[1.0]]
      >>> ones = jnp.ones((1, 32))
      >>> matmul_kernel(ones, ones.T, accumulate="e4m3fn", interpret=True).tolist()  # 16 + 1 -> 16
      [[16.0]]
      >>> matmul_kernel(ones, ones.T, accumulate="e4m3fn", accumulate_every=8, interpret=True).tolist()
      [[32.0]]
    """
    options = MatmulOptions(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate,
        stochastic_variant=stochastic_variant, exponent_ties=exponent_ties, key=key, random=random,
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type,
    )  # fmt: skip
    call = matmul_call(a, b, _kernel_shapes, options)
    cfg = call.cfg
    if cfg.work != "float32":
        raise ValueError(
            "matmul_kernel computes in float32: a and b must be float16, bfloat16 or float32 arrays, got "
            f"{np.dtype(call.a.dtype).name} and {np.dtype(call.b.dtype).name} with jax_enable_x64 on; use fpemu.matmul"
        )
    (m, k), n = np.shape(call.a), np.shape(call.b)[1]
    random_sizes = []  # the arrays whose roundings draw random bits, indexed with uint32
    if cfg.operands_stochastic:
        random_sizes += [size for size, fmt in ((m * k, cfg.lhs), (k * n, cfg.rhs), (m * n, cfg.out)) if fmt]
    if cfg.accumulate_stochastic:
        random_sizes.append(m * n)
    if max(random_sizes, default=0) > _MAX_INDEX:
        raise ValueError(
            f"stochastic rounding supports arrays of at most 2**32 elements, got shapes {(m, k)} and {(k, n)}"
        )
    platform = jax.default_backend()
    if block_sizes is None:
        block_sizes = _fitted(BlockSizes.default(platform), m, n, k, platform)
    elif not isinstance(block_sizes, BlockSizes):
        raise TypeError(
            f"block_sizes must be a fpemu.kernels.matmul.BlockSizes (fpemu.kernels.MatmulBlockSizes), got "
            f"{type(block_sizes).__name__}"
        )
    interpret = interpret_mode(interpret, platform, kernel="fpemu.kernels.matmul_kernel", xla_path="fpemu.matmul")
    if not interpret and min(block_sizes.block_m, block_sizes.block_n) < _MIN_DOT:
        raise ValueError(
            f"block_sizes: block_m={block_sizes.block_m} and block_n={block_sizes.block_n} must be at least "
            f"{_MIN_DOT} on a GPU (Triton's smallest dot)"
        )
    a, b = device_operands(call)  # host float64 rounded once, as fpemu.matmul
    return matmul_pallas(
        a, b, call.lhs_scale, call.rhs_scale, call.key, call.random, cfg=cfg, block_sizes=block_sizes,
        interpret=interpret,
    )  # fmt: skip


def matmul_kernel_reference(a: ArrayLike, b: ArrayLike, **options: Any) -> jax.Array:
    """Plain-JAX reference with the kernel's semantics: `fpemu.matmul` itself (the XLA path).

    Takes the arguments of `matmul_kernel` except ``block_sizes`` and ``interpret``.
    docs/matmul.md is the contract of both; `fpemu.testing.dot_general_reference` is the slow,
    exact oracle behind it.
    """
    return matmul(a, b, **options)


__all__ = ["BlockSizes", "matmul_kernel", "matmul_kernel_reference", "matmul_pallas"]
