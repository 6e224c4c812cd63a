"""Quantized matmul as a Pallas kernel: `fpemu.matmul`'s semantics, the emulated running sum fused in.

The kernel computes ``C = A @ B`` for 2-D ``A`` (M, K) and ``B`` (K, N). Its own job is what XLA
cannot do in one pass: a running sum in a narrow format (``accumulate="bf16"``,
``accumulate_every=32``, stochastic accumulation), rounded once per chunk while the tile stays in
registers. The XLA path (`fpemu.matmul`) runs a chunked sum as a scan that writes the whole (M, N)
running sum to memory after every chunk; at 8192**3 with chunks of 32 it takes 68 ms on an H200, and
a prototype of this kernel (the same tiles and running-sum step) 7.9 ms, with the same bits
(bench/RESULTS_gpu.md). With a float32 running sum and no ``accumulate_every``, XLA's own matmul is
faster: `fpemu.matmul` never dispatches here, and this kernel is for the narrow sums.

Around the kernel, XLA does what it does at memory speed, with the XLA path's code and random
bits: the operands are divided by their scales and rounded to ``lhs``/``rhs`` once
(`fpemu._ops.accumulate.rounded_operands`; bfloat16 when every value is a bfloat16 value, which
halves what the kernel reads), and the float32 result is scaled, rounded to ``out`` and cast
(`fpemu._ops.accumulate.finished_output`). The kernel runs a grid of (M / block_m, N / block_n)
output tiles; each walks the contraction with a loop over K steps of ``step`` elements: a dot
(bfloat16 operands with float32 accumulation, or float32 at ``Precision.HIGHEST``) per step, and
per chunk the running sum's step (`kernels/_accumulator.py`: on a GPU, nine PTX instructions for a
bf16 sum; otherwise `fpemu._ops.accumulate.round_accumulator`, the XLA path's step, with the
integer engine's rounding of the tile).

The step ``s`` is ``block_k``, or ``gcd(accumulate_every, block_k)`` with an emulated accumulator,
so chunk boundaries fall on step boundaries for every ``accumulate_every`` and every block size.
Steps narrower than 16 (Triton's smallest dot) are computed as rank-1 updates, one contraction
index at a time, in interpret mode too, so that interpret mode runs the code a GPU would compile.
docs/kernels.md spells out the tile order; `matmul_kernel_reference` (which is `fpemu.matmul`) is
the reference. The kernel asks for the Triton backend explicitly (`TritonCompilerParams`): JAX
(0.10 to 0.12) would otherwise lower a ``pallas_call`` on a GPU to Mosaic GPU. No gradient: use
`fpemu.matmul` (straight-through) for training.
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
from fpemu._jax.pallas import BlockSpec, TritonCompilerParams, ds, pallas_call, program_id
from fpemu._ops.accumulate import (
    device_operands,
    finished_output,
    positive_zero,
    round_accumulator,
    rounded_operands,
)
from fpemu._ops.backends import COMPILED_PLATFORM, interpret_mode
from fpemu._ops.dot_policy import DotPolicy
from fpemu._ops.geometry import MatmulGeometry, matmul_geometry
from fpemu._ops.matmul import matmul
from fpemu._ops.matmul_config import (
    MatmulConfig,
    MatmulOptions,
    matmul_call,
)
from fpemu.kernels._accumulator import bf16_step, ptx_step_applies
from fpemu.kernels._matmul_inputs import accumulate_bits, pow2_at_least, seed_table

_FP32 = get_format("fp32")
_MIN_DOT = 16  # Triton's dot needs every dimension >= 16: narrower K steps are rank-1 updates
_MAX_INDEX = 1 << 32  # stochastic rounding indexes elements with uint32
_DIMS = (((1,), (0,)), ((), ()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlockSizes:
    """Tile sizes and Triton's launch parameters: a block_m x block_n output tile per grid step,
    block_k contraction elements per loop step, ``num_warps`` warps per tile and ``num_stages``
    stages of Triton's software pipelining of the loop (ignored in interpret mode).

    Every size is a positive power of two (Triton's tensor sizes are). With ``accumulate_every=k``
    a loop step takes ``gcd(k, block_k)`` contraction elements, so any k works with any block_k.
    On a GPU, block_m and block_n must be at least 16 (Triton's smallest dot).
    """

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"{name}={value!r} must be a positive power of two")
        stages = self.num_stages
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
            raise ValueError(f"num_stages={stages!r} must be a positive int")

    @classmethod
    def default(cls, platform: str) -> BlockSizes:
        """Per-device defaults. On a GPU, the fastest of the tiles timed on an H200 for a bf16 running
        sum rounded every 32 products at 8192**3 (64 x 128 tiles, 4 warps, 4 stages: 7.97 ms; 128 x
        128 with 8 warps 9.2 ms, 128 x 256 14.8 ms; bench/RESULTS_gpu.md). Elsewhere (interpret
        mode, where every grid step costs milliseconds) few, large tiles."""
        if platform == COMPILED_PLATFORM:
            return cls(block_m=64, block_n=128, block_k=32)
        return cls(block_m=256, block_n=256, block_k=256)


def _fitted(blocks: BlockSizes, m: int, n: int, k: int, platform: str) -> BlockSizes:
    """Default blocks no larger than the (power-of-two rounded) problem; at least 16 on a GPU."""
    low = _MIN_DOT if platform == COMPILED_PLATFORM else 1
    return dataclasses.replace(
        blocks,
        block_m=min(blocks.block_m, max(pow2_at_least(m), low)),
        block_n=min(blocks.block_n, max(pow2_at_least(n), low)),
        block_k=min(blocks.block_k, max(pow2_at_least(k), low)),
    )


def _round(
    x: jax.Array, fmt: Format, cfg: MatmulConfig, rounding: Rounding, saturate: Any, random: jax.Array | None
) -> jax.Array:
    """`fpemu.quantize` of float32 values to ``fmt`` in ``rounding`` (the same engine, options and
    random bits), on their bits: the running sum's rounding inside the kernel."""
    options = {**cfg.rounding_options(rounding), "saturate": saturate}
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
    a_ref,
    b_ref,
    *refs,
    cfg: MatmulConfig,
    n: int,
    step: int,
    steps: int,
    chunk_steps: int,
    block_m: int,
    block_n: int,
    ptx: bool,
):
    """One (block_m, block_n) tile of the float32 sum: a loop over ``steps`` K steps of ``step`` elements.

    Refs: ``seeds_ref`` (uint32 seed pairs of the running sum's chunks), ``a_ref`` (block_m, K) and
    ``b_ref`` (K, block_n), the rounded operands (bfloat16 or float32, K padded with zeros to whole
    steps), then, with explicit bits for the running sum, its bits (`accumulate_bits`' layout),
    then ``out_ref`` (block_m, block_n) float32. Rows and columns beyond M and N are padding,
    computed and sliced off by the caller.
    """
    *bits_refs, out_ref = refs
    rows = (lax.broadcasted_iota(jnp.int32, (block_m, 1), 0) + program_id(0) * block_m).astype(jnp.uint32)
    cols = (lax.broadcasted_iota(jnp.int32, (1, block_n), 1) + program_id(1) * block_n).astype(jnp.uint32)

    def products(t) -> jax.Array:
        """The sum, in float32, of the products of K step ``t`` (exact when its partial sums are)."""
        start = t * step
        if step >= _MIN_DOT:
            x, y = a_ref[:, ds(start, step)], b_ref[ds(start, step), :]
            return lax.dot_general(x, y, _DIMS, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)

        def rank1(c):
            x, y = a_ref[:, ds(start + c, 1)], b_ref[ds(start + c, 1), :]
            return x.astype(jnp.float32) * y.astype(jnp.float32)

        total = rank1(0)
        for c in range(1, step):  # rank-1 updates, one contraction index at a time
            total = total + rank1(c)
        return total

    def accumulate(acc: jax.Array, chunk_sum: jax.Array, j) -> jax.Array:
        """The running sum after chunk ``j``: the XLA path's step, with the kernel's rounding."""
        if ptx:
            return bf16_step(acc, chunk_sum)

        def round_to(total: jax.Array, rounding: Rounding, saturate: Saturation) -> jax.Array:
            random = None
            if rounding == "stochastic" and bits_refs:  # chunk j's columns of the tile's row
                random = bits_refs[0][:, ds(j * block_n, block_n)]
            elif rounding == "stochastic":  # the chunk's key; element (i, j) of the (M, N) result: i * N + j
                random = rng.hash_index((seeds_ref[2 * j], seeds_ref[2 * j + 1]), rows * jnp.uint32(n) + cols)
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
    out_ref[...] = acc


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
    # Steps 1 and 4 of the model are XLA's (memory-bound, once per element); the kernel sums.
    a, b = rounded_operands(a, b, lhs_scale, rhs_scale, key, random, cfg)
    operand_dtype = jnp.bfloat16 if cfg.bf16_operands else jnp.float32  # exact: bfloat16 values
    a, b = a.astype(operand_dtype), b.astype(operand_dtype)

    bm, bn, bk = block_sizes.block_m, block_sizes.block_n, block_sizes.block_k
    every = cfg.accumulate_every
    step = bk if every is None else math.gcd(every, bk)
    steps = -(-k // step)
    chunks = 0 if every is None else -(-k // every)
    k_pad = max(steps, 1) * step
    m_pad, n_pad = -(-m // bm) * bm, -(-n // bn) * bn
    # Zeros after the rounding: the padding never becomes a product (0 rounds to NaN in E8M0).
    a = jnp.pad(a, ((0, m_pad - m), (0, k_pad - k)))
    b = jnp.pad(b, ((0, k_pad - k), (0, n_pad - n)))
    seeds = seed_table(key, cfg, chunks)
    bits, bit_specs = [], []
    if cfg.accumulate_stochastic and cfg.explicit_random:
        assert random is not None
        array, spec = accumulate_bits(random["accumulate"], m, n, chunks, (m_pad, n_pad), (bm, bn))
        bits, bit_specs = [array], [spec]
    kernel = functools.partial(
        _matmul_kernel, cfg=cfg, n=n, step=step, steps=steps, chunk_steps=1 if every is None else every // step,
        block_m=bm, block_n=bn, ptx=ptx_step_applies(cfg, interpret),
    )  # fmt: skip
    y = pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m_pad, n_pad), jnp.float32),
        grid=(m_pad // bm, n_pad // bn),
        in_specs=[
            BlockSpec(seeds.shape, lambda i, j: (0,)),
            BlockSpec((bm, k_pad), lambda i, j: (i, 0)),
            BlockSpec((k_pad, bn), lambda i, j: (0, j)),
            *bit_specs,
        ],
        out_specs=BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=TritonCompilerParams(num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages),
        interpret=interpret,
        name="fpemu_matmul_kernel",
    )(seeds, a, b, *bits)
    return finished_output(y[:m, :n], lhs_scale, rhs_scale, key, random, cfg)


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
    policy: DotPolicy | None = None,
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
        policy: a `fpemu.DotPolicy`, as for `fpemu.matmul`.
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
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type, policy=policy,
    )  # fmt: skip
    call = matmul_call(a, b, _kernel_shapes, options)
    cfg = call.cfg
    if cfg.tensor_core is not None:
        raise ValueError(
            f"accumulate={cfg.tensor_core.name!r}: matmul_kernel does not model a tensor core's own sum; use "
            "fpemu.matmul (the XLA path implements it)"
        )
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
