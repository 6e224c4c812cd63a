"""Emulated `matmul`, `dot_general`, `conv_general_dilated`: rounded operands, exact products, emulated accumulator.

The model, in five steps (docs/matmul.md is the contract; `fpemu.testing.dot_general_reference`
is its slow, sequential oracle):

1. Operands: ``a_q = quantize(a / lhs_scale, lhs)`` and ``b_q = quantize(b / rhs_scale, rhs)`` in the
   working dtype ``W`` (float32, or float64 when an input is float64 under ``jax_enable_x64``).
2. Products ``a_q[i] * b_q[i]``: exact in ``W`` when the two formats have at most 24 (53) significant
   bits together, which covers every pair of formats up to fp16/bf16/tf32.
3. The contraction is split into chunks of ``k = accumulate_every`` products; each chunk is summed in
   ``W`` by the backend (one ``lax.dot_general``; exact whenever the partial sums fit ``W``).
4. The running sum starts at +0 and after every chunk becomes ``round_acc(acc + chunk_sum)``: the
   addition is exact (TwoSum, then round-to-odd to ``W``, which is innocuous for formats of at most
   ``W``'s precision minus 2 bits) and the one rounding is to the ``accumulate`` format in the
   ``accumulate_rounding`` mode.
5. ``y = acc * (lhs_scale * rhs_scale)`` in ``W``, rounded to ``out``, cast to the result dtype.

With ``accumulate`` equal to ``W`` (the default "fp32") and no ``accumulate_every`` there is no step
4: one ``lax.dot_general`` with float32 accumulation. When both operand formats fit bfloat16 (every
FP8/FP6/FP4 format) the dots take bfloat16 operands with float32 accumulation, which is exact
(the cast is exact) and, on CPUs with AVX-512 BF16 or on GPUs, faster than the float32 dot.

The ops layer is split by job: `fpemu._ops.matmul_config` checks a call (its options, once, for
every op and the kernel), `fpemu._ops.geometry` maps each op to batches of (M, K) @ (K, N), and
`fpemu._ops.accumulate` computes; this module holds the three public ops.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from fpemu._args import input_format
from fpemu._core.modes import ExponentTies, Rounding, Saturation, StochasticVariant
from fpemu._core.registry import FormatLike
from fpemu._ops.accumulate import compute_dot, device_operands, times_tensor_scales
from fpemu._ops.dot_policy import DotPolicy
from fpemu._ops.geometry import Geometry, conv_geometry, dot_geometry, matmul_geometry
from fpemu._ops.matmul_config import MatmulConfig, MatmulOptions, matmul_call, matmul_config
from fpemu._ops.rounding_spec import SPEC_KEY

__all__ = [
    "accumulation_config",
    "conv_general_dilated",
    "conv_with_config",
    "dot_general",
    "dot_with_config",
    "matmul",
    "options_config",
    "tensor_scaled_conv",
    "tensor_scaled_dot",
]


def _run(a: ArrayLike, b: ArrayLike, geometry: Callable[..., Geometry], options: MatmulOptions) -> jax.Array:
    call = matmul_call(a, b, geometry, options)
    return compute_dot(
        *device_operands(call), call.lhs_scale, call.rhs_scale, call.key, call.random, cfg=call.cfg,
        geometry=call.geometry,
    )  # fmt: skip


# -- checked-once cores (the training GEMMs: operands already quantized) --------------------------------


@functools.lru_cache(maxsize=256)
def options_config(a_dtype: Any, b_dtype: Any, options: MatmulOptions, keyed: bool = False) -> MatmulConfig:
    """The checked config of a dot of JAX arrays of these dtypes under ``options`` (no scales, no
    explicit bits, no ``policy=``; its key, if ``keyed``, given with each call to `dot_with_config`):
    what `dot_general` checks for the same keywords, once per combination."""
    if keyed:
        options = dataclasses.replace(options, key=SPEC_KEY)
    return matmul_config(input_format(a_dtype, "a"), input_format(b_dtype, "b"), options)


def accumulation_config(
    a_dtype: Any, b_dtype: Any, accumulate: Any, accumulate_every: int | None, preferred_element_type: Any
) -> MatmulConfig:
    """The checked config of a dot whose operands are used as they are (no formats, scales or keys),
    summed in ``accumulate`` every ``accumulate_every`` products: what `dot_general` checks for
    ``dot_general(a, b, dn, accumulate=..., accumulate_every=..., preferred_element_type=...)``,
    once per combination (`options_config`)."""
    options = MatmulOptions(
        accumulate=accumulate, accumulate_every=accumulate_every, preferred_element_type=preferred_element_type
    )
    return options_config(a_dtype, b_dtype, options)


def dot_with_config(
    a: jax.Array, b: jax.Array, dimension_numbers: Any, cfg: MatmulConfig, key: Any = None, probe: Any = None
) -> jax.Array:
    """`dot_general` of two JAX arrays under a checked ``cfg`` (`options_config`) and its ``key``: the
    same bits. ``probe``: `compute_dot`'s."""
    geometry = dot_geometry(tuple(a.shape), tuple(b.shape), dimension_numbers)
    return compute_dot(a, b, None, None, key, None, probe, cfg=cfg, geometry=geometry)


def conv_with_config(
    a: jax.Array, b: jax.Array, params: Mapping[str, Any], cfg: MatmulConfig, key: Any = None
) -> jax.Array:
    """`conv_general_dilated` of two JAX arrays under a checked ``cfg`` (`options_config`) and its
    ``key``, with the geometry parameters of a ``conv_general_dilated`` equation (``window_strides``,
    ``padding``, ``lhs_dilation``, ``rhs_dilation``, ``dimension_numbers``, ``feature_group_count``,
    ``batch_group_count``): the same bits."""
    geometry = conv_geometry(
        tuple(a.shape), tuple(b.shape), params["window_strides"], params["padding"], params["lhs_dilation"],
        params["rhs_dilation"], params["dimension_numbers"], params["feature_group_count"],
        params["batch_group_count"],
    )  # fmt: skip
    return compute_dot(a, b, None, None, key, None, cfg=cfg, geometry=geometry)


def tensor_scaled_dot(
    a: jax.Array, b: jax.Array, lhs_scale: jax.Array | None, rhs_scale: jax.Array | None, dimension_numbers: Any,
    *, accumulate: Any = "fp32", accumulate_every: int | None = None, result: Any = None, probe: Any = None,
) -> jax.Array:  # fmt: skip
    """The quantized GEMM's product: ``a`` and ``b`` (quantized operands, their float32 per-tensor
    scales kept apart as `fpemu.scaled.quantize_dequantize_split` gives them) summed as `dot_with_config`
    sums them in ``accumulate`` every ``accumulate_every`` products, then ``fl(y * fl(lhs_scale *
    rhs_scale))`` once (`times_tensor_scales`, as cuBLAS applies scale factors), rounded to ``result``
    (None: float32). Without scales, the dot's own result dtype is ``result``. The checked-once core
    of every quantized GEMM: the training recipes' and `fpemu.scaled.matmul`'s. ``probe``: `compute_dot`'s."""
    return _tensor_scaled(
        lambda cfg: dot_with_config(a, b, dimension_numbers, cfg, probe=probe), a, b, lhs_scale, rhs_scale,
        accumulate, accumulate_every, result,
    )  # fmt: skip


def tensor_scaled_conv(
    a: jax.Array, b: jax.Array, lhs_scale: jax.Array | None, rhs_scale: jax.Array | None,
    params: Mapping[str, Any], *, accumulate: Any = "fp32", accumulate_every: int | None = None, result: Any = None,
) -> jax.Array:  # fmt: skip
    """`tensor_scaled_dot`'s convolution: `conv_with_config` with the equation's geometry ``params``."""
    return _tensor_scaled(
        lambda cfg: conv_with_config(a, b, params, cfg), a, b, lhs_scale, rhs_scale,
        accumulate, accumulate_every, result,
    )  # fmt: skip


def _tensor_scaled(run, a, b, lhs_scale, rhs_scale, accumulate, accumulate_every, result) -> jax.Array:
    scaled = lhs_scale is not None or rhs_scale is not None
    f32 = jnp.float32
    cfg = accumulation_config(a.dtype, b.dtype, accumulate, accumulate_every, f32 if scaled else result)
    y = run(cfg)
    return times_tensor_scales(y, lhs_scale, rhs_scale).astype(f32 if result is None else result) if scaled else y


# -- public API -------------------------------------------------------------------------------------


def dot_general(
    a: ArrayLike,
    b: ArrayLike,
    dimension_numbers: lax.DotDimensionNumbers,
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
) -> jax.Array:
    """`lax.dot_general` with rounded operands, exact products and an emulated accumulator.

    Special values first: NaN and infinity propagate as in IEEE arithmetic (``inf * 0`` is NaN);
    an operand that overflows its format becomes what `fpemu.quantize` gives (infinity, NaN or
    ±max; ``saturate=True`` clamps to ±max in every rounding, the accumulator's included); a zero
    sum is +0.

    The computation, in the working dtype W (float32; float64 if an input is float64 and
    ``jax_enable_x64`` is on), with ``s = lhs_scale * rhs_scale`` (1 if absent):

    1. ``a_q = quantize(a / lhs_scale, lhs)``, ``b_q = quantize(b / rhs_scale, rhs)`` with
       ``rounding`` and ``saturate``; a format of None leaves the operand as it is.
    2. Products ``a_q * b_q``, exact in W for formats of at most 24 significant bits together.
    3. ``accumulate_every=None`` and ``accumulate`` equal to W (the default): one float32 dot, in
       the backend's summation order. Otherwise the contraction (row-major over the contracting
       dimensions, in the order listed) is cut into chunks of ``accumulate_every`` products (1 if
       None), each chunk is summed in W, and the running sum (starting at +0) is rounded to the
       ``accumulate`` format after every chunk, in ``accumulate_rounding`` (None: nearest_even).
       The running-sum addition is exact: there is one rounding per chunk.
    4. ``y = acc * s`` in W, rounded to ``out``, returned as ``preferred_element_type`` (default W;
       a narrower dtype with ``out=None`` rounds to it in ``rounding``).

    The gradient is straight-through: the operand, accumulator and output roundings count as the
    identity, so the backward pass is the plain W dot of the cotangents with the rounded operands.
    Stochastic rounding needs ``key``, split as ``jax.random.split(key, 4)`` into the lhs, rhs,
    accumulator and output streams (a raw key of two uint32 words as a Threefry key, whatever
    ``jax_default_prng_impl`` says: docs/matmul.md), or the random bits themselves, ``random``.

    Args:
      a, b: float16, bfloat16, float32 or float64 arrays.
      dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`` as in
        `jax.lax.dot_general`; the result's dimensions are batch, lhs free, rhs free.
      lhs, rhs: the operands' formats (anything `fpemu.get_format` takes) or None.
      accumulate: the running sum's format, at most W's precision minus 2 bits, or W itself; None
        means W.
      out: the output's format, or None.
      accumulate_every: products per chunk (>= 1), or None.
      rounding: the rounding of operands and output.
      accumulate_rounding: the rounding of the running sum; None means "nearest_even".
      saturate: clamp every rounding's overflow to ±max (True), or one of IEEE P3109's saturation
        modes, as for `fpemu.quantize`; the accumulator's additions included.
      stochastic_variant: how every stochastic rounding of the call compares its random bits with
        the discarded fraction, as for `fpemu.quantize` ("floor", the default, or a P3109 variant).
      exponent_ties: how nearest-even breaks ties in formats without mantissa bits, as for
        `fpemu.quantize`.
      key: a JAX PRNG key, for (and only for) stochastic rounding.
      random: instead of ``key``, the random bits of every stochastic rounding of the call: a dict
        with exactly the keys of those roundings, ``"lhs"`` and ``"rhs"`` (bits broadcastable to
        the operand's shape; operands with a format), ``"out"`` (to the result's shape; an ``out``
        format or a narrower result dtype) and ``"accumulate"`` (``accumulate_rounding=
        "stochastic"``: to ``(number of chunks,) + the result's shape``, chunk ``j`` first), each
        holding uint32 values (32 random bits per element). ``key=key`` equals ``random=`` with
        the bits its streams draw (docs/matmul.md).
      lhs_scale, rhs_scale: per-tensor scales (float scalars): the operand divided by its scale
        is rounded, and the product of the scales multiplies the accumulated sum (an exact zero
        sum stays zero where that product overflows to inf).
      preferred_element_type: the result dtype (float16, bfloat16, float32, float64) or None.
      policy: the dot's numerics as one `fpemu.DotPolicy` (the record `fpemu.emulate` takes as
        ``Policy(dot=...)``), instead of ``lhs``, ``rhs``, ``accumulate``, ``out``,
        ``accumulate_every`` and ``accumulate_rounding``; those keywords left at their defaults give
        way to it, and one set to another value with it is a ValueError.

    Returns:
      An array of shape ``batch + lhs free + rhs free``.

    Raises:
      TypeError: integer/bool/complex operands, a non-key ``key``, a non-bool ``saturate``, a
        non-int ``accumulate_every``, a non-float ``preferred_element_type``, a malformed
        ``dimension_numbers``, a ``policy`` that is not a `fpemu.DotPolicy`.
      ValueError: dimensions that do not match or repeat, unknown formats or modes (the message
        names the argument), formats W cannot hold, ``accumulate_every < 1``, stochastic rounding
        without a key or a key without it, an array of several keys, non-scalar scales; ``random``
        with ``key``, without stochastic rounding, missing a key of the call's stochastic
        roundings or with another (the message lists the valid keys), or bits of a shape that does
        not broadcast (a non-integer array of bits is a TypeError).

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> a = jnp.array([[1.0, 2.0, 3.0]]); b = jnp.array([[0.3], [0.3], [0.3]])
      >>> fpemu.dot_general(a, b, (((1,), (0,)), ((), ())), lhs="e4m3fn", rhs="e4m3fn").tolist()  # 0.3 -> 0.3125
      [[1.875]]
      >>> ones = jnp.ones((1, 4096), jnp.float32)
      >>> fpemu.dot_general(ones, ones.T, (((1,), (0,)), ((), ())), accumulate="bf16").tolist()  # stagnates at 256
      [[256.0]]
      >>> bf16_sum = fpemu.DotPolicy(accumulate="bf16")  # the same numerics as one record
      >>> fpemu.dot_general(ones, ones.T, (((1,), (0,)), ((), ())), policy=bf16_sum).tolist()
      [[256.0]]
    """
    options = MatmulOptions(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate,
        stochastic_variant=stochastic_variant, exponent_ties=exponent_ties, key=key, random=random,
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type, policy=policy,
    )  # fmt: skip
    return _run(a, b, lambda sa, sb: dot_geometry(sa, sb, dimension_numbers), options)


def matmul(
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
) -> jax.Array:
    """`jnp.matmul` with rounded operands, exact products and an emulated accumulator.

    Shapes follow `jnp.matmul` (1-D operands are promoted and the added dimension removed; leading
    batch dimensions broadcast). The operands are rounded in their own shapes, before broadcasting.
    Every option, and the model, are those of `dot_general`; docs/matmul.md is the full contract.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> a = jnp.array([[1.0, 2.0], [3.0, 4.0]]); b = jnp.array([[0.3, 0.0], [0.0, 0.3]])
      >>> fpemu.matmul(a, b, lhs="e4m3fn", rhs="e4m3fn", out="bf16").tolist()
      [[0.3125, 0.625], [0.9375, 1.25]]
      >>> fpemu.matmul(a, b, lhs="e2m1fn", rhs="e2m1fn").tolist()  # 0.3 -> 0.5 in FP4
      [[0.5, 1.0], [1.5, 2.0]]
      >>> ones = jnp.ones((1, 32), jnp.float32)
      >>> fpemu.matmul(ones, ones.T, accumulate="e4m3fn").tolist()  # 16 + 1 is a tie: it rounds back to 16
      [[16.0]]
      >>> fpemu.matmul(ones, ones.T, accumulate="e4m3fn", accumulate_every=8).tolist()  # 8 + 8 + 8 + 8
      [[32.0]]
    """
    options = MatmulOptions(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate,
        stochastic_variant=stochastic_variant, exponent_ties=exponent_ties, key=key, random=random,
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type, policy=policy,
    )  # fmt: skip
    return _run(a, b, matmul_geometry, options)


def conv_general_dilated(
    a: ArrayLike,
    b: ArrayLike,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    /,
    *,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: lax.ConvGeneralDilatedDimensionNumbers | None = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
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
) -> jax.Array:
    """`lax.conv_general_dilated` with rounded operands, exact products and an emulated accumulator.

    ``a`` is the input and ``b`` the kernel (lax's ``lhs`` and ``rhs``: here ``lhs=``/``rhs=`` are
    their formats). The geometry arguments are lax's, with the same defaults and the same errors.
    The operands are rounded first, then the convolution is computed as a matrix product on
    im2col patches: the contraction of each output runs over (input feature, window position in
    row-major order), so ``accumulate_every`` chunks that sequence. Every other option is that of
    `dot_general`. Under stochastic accumulator rounding the key's random bits are indexed by the
    position in the (group, batch, output position, output feature) product, not the result layout;
    explicit bits (``random={"accumulate": bits}``) are given in the result's layout,
    ``(number of chunks,) + the result's shape``, and rearranged to that product (docs/matmul.md).

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> x = jnp.array([[[0.3, 1.0, 2.0, 3.0]]]); w = jnp.array([[[1.0, 0.3]]])   # NCW, OIW
      >>> fpemu.conv_general_dilated(x, w, (1,), "VALID", lhs="e4m3fn", rhs="e4m3fn").tolist()
      [[[0.625, 1.625, 2.9375]]]
    """
    options = MatmulOptions(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate,
        stochastic_variant=stochastic_variant, exponent_ties=exponent_ties, key=key, random=random,
        lhs_scale=lhs_scale, rhs_scale=rhs_scale, preferred_element_type=preferred_element_type, policy=policy,
    )  # fmt: skip

    def geometry(lhs_shape, rhs_shape):
        return conv_geometry(
            lhs_shape, rhs_shape, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, batch_group_count,
        )  # fmt: skip

    return _run(a, b, geometry, options)
