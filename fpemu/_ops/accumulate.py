"""The computation of an emulated dot: rounded operands, exact products, the emulated accumulator, the output.

`compute_dot` is the whole computation, jitted, for any geometry (`fpemu._ops.geometry`) and
any checked configuration (`fpemu._ops.matmul_config`); docs/matmul.md is its contract:

1. the operands, divided by their scales, are rounded in W (`fpemu.quantize`); a bfloat16 operand
   with neither, when the dot takes bfloat16 operands (step 3), stays as it is;
2. the geometry maps them to (B, M, K) @ (B, K, N);
3. the contraction is summed in chunks of ``accumulate_every`` products, each chunk by one W dot
   (bfloat16 operands with W accumulation when both hold bfloat16 values: exact), and the running
   sum is rounded once per chunk (`round_accumulator`: an exact addition, then one rounding);
4. the sum times the scales is rounded to the output format and cast to the result dtype.

The Pallas kernel (`fpemu.kernels.matmul`) runs the same accumulator step, `round_accumulator`,
with its own rounding of tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._core.format import Format
from fpemu._core.modes import Rounding, Saturation
from fpemu._jax.elementwise import pad_zeros, select
from fpemu._ops.fusion import computed_once
from fpemu._ops.geometry import Geometry
from fpemu._ops.matmul_config import (
    KEY_ACC,
    KEY_LHS,
    KEY_OUT,
    KEY_RHS,
    MatmulCall,
    MatmulConfig,
    chunk_key_words,
    key_streams,
)
from fpemu._ops.quantize import quantize, round_checked
from fpemu._ops.rounding_spec import rounding_spec_once
from fpemu._ops.tensor_core import tensor_core_sum

__all__ = [
    "compute_dot",
    "device_operands",
    "finished_output",
    "positive_zero",
    "round_accumulator",
    "rounded_operands",
    "scale_product",
    "times_scale",
    "times_tensor_scales",
]

_HIGHEST = lax.Precision.HIGHEST
#: A chunked sum's loop over its later chunks is unrolled up to this many steps (FP8 blockwise's
#: 128-product chunks of a contraction of up to 1152): XLA:CPU runs a rolled loop's slices, dots and
#: roundings one step at a time through its loop machinery, which made the bench transformer
#: block's fp8_blockwise step slower (bench/RESULTS_training.md). Longer loops (an fpemu.matmul
#: running sum every 32 products over thousands) stay rolled: unrolled, they would be long to compile.
_UNROLLED_MAX_STEPS = 8
_BATCHED = (((2,), (1,)), ((0,), (0,)))  # (B, M, k) @ (B, k, N)


# -- the accumulator step ---------------------------------------------------------------------------


def _add_to_odd(acc: jax.Array, s: jax.Array) -> jax.Array:
    """``acc + s`` exactly rounded to W with round-to-odd: TwoSum, then an odd last bit if inexact.

    Round-to-odd to p bits followed by any rounding to at most p - 2 bits equals that rounding of the
    exact sum, so the running sum is rounded once.
    """
    t = acc + s
    virtual = t - acc
    err = (acc - (t - virtual)) + (s - virtual)  # exact: acc + s == t + err (no overflow)
    uint = jnp.uint32 if t.dtype == jnp.float32 else jnp.uint64
    bits = lax.bitcast_convert_type(t, uint)
    one = jnp.ones((), uint)
    inexact_even = (err != 0) & ((bits & one) == 0) & jnp.isfinite(t)
    outward = (err > 0) == (t > 0)  # err moves |acc + s| above |t|
    bits = select(inexact_even, select(outward, bits + one, bits - one), bits)
    return lax.bitcast_convert_type(bits, t.dtype)


def positive_zero(x: jax.Array) -> jax.Array:
    """An exactly zero sum is +0 (XLA folds ``+0 + x`` into ``x``, which keeps a -0 ``x``)."""
    return select(lax.eq(x, x.dtype.type(0)), jnp.zeros_like(x), x)


def round_accumulator(
    acc: jax.Array, s: jax.Array, cfg: MatmulConfig, round_to: Callable[[jax.Array, Rounding, Saturation], jax.Array]
) -> jax.Array:
    """The running sum after a chunk whose W sum is ``s``: ``round(acc + s)`` to ``cfg.accumulate``.

    ``round_to(total, rounding, saturate)`` rounds W values to ``cfg.accumulate`` (`fpemu.quantize`
    here, the kernel's own rounding of a tile there). A W accumulator adds in W (round to nearest
    even), clamped to ±max with ``saturate``; a narrower one adds exactly (`_add_to_odd`) and
    rounds once, in ``cfg.accumulate_rounding``.
    """
    if cfg.direct:
        total = positive_zero(lax.add(acc, s))  # a W addition: round to nearest even
        return total if cfg.saturate is False else round_to(total, "nearest_even", cfg.saturate)
    return round_to(positive_zero(_add_to_odd(acc, s)), cfg.accumulate_rounding, cfg.saturate)


# -- the contraction --------------------------------------------------------------------------------


def _dot3(a: jax.Array, b: jax.Array, cfg: MatmulConfig, plain: tuple[bool, bool] = (False, False)) -> jax.Array:
    """Batched (B, M, k) @ (B, k, N) with W accumulation; bfloat16 operands when they hold bf16 values;
    with an accumulator model (``accumulate="hopper_fp8"``), that hardware's sum (`tensor_core_sum`).

    ``plain``: whether each operand is a reshape of an array as it is stored (`Geometry.plain`)."""
    if cfg.tensor_core is not None:
        return tensor_core_sum(a, b, cfg.tensor_core)
    if a.shape[2] == 1:  # one product per output: a product, not a sum
        return a.astype(cfg.work) * b.astype(cfg.work)
    if cfg.bf16_operands:
        # Exact: the values are bfloat16 values. XLA:CPU's dot runtime rejects BF16 x BF16 = F32 when a
        # conversion or a transposition is fused into the dot ("Unsupported element type for
        # DotThunk::Execute"): the barrier keeps such an operand a plain array. A plain bfloat16 one needs
        # none, and a barrier on it would cost a copy of the whole operand.
        a, b = (
            x if x.dtype == jnp.bfloat16 and view else lax.optimization_barrier(x.astype(jnp.bfloat16))
            for x, view in zip((a, b), plain, strict=True)
        )
    return lax.dot_general(a, b, _BATCHED, precision=_HIGHEST, preferred_element_type=cfg.work)


def _accumulate_impl(
    a: jax.Array, b: jax.Array, key_words: jax.Array, probe: Any, cfg: MatmulConfig, geometry: Geometry
) -> jax.Array:
    """The running sum, (B, M, N), of the gathered W operands ``a`` and ``b`` (as the op has them;
    ``geometry`` maps them to (B, M, K) and (B, K, N)). ``key_words``: one row per chunk, the chunk's
    key words, or with explicit random bits (``cfg.explicit_random``) the chunk's bits in the (B, M,
    N) layout.

    With chunks, the first chunk's sum starts the running sum and a loop adds the others, unrolled
    where it has at most `_UNROLLED_MAX_STEPS` steps, each chunk's operands sliced where the loop
    reads them: along the operands' contracting dimension as
    they are stored where the contraction is one run of dimensions (`Geometry.chunked`), so that
    only a chunk is transposed at a time. These choices keep XLA:CPU's buffer of intermediate values
    small (bench/RESULTS_training.md, "chunked accumulation"), with the same bits: no stack of
    transposed chunk copies before the loop; no zero running sum, which XLA would materialize at the
    program's start and keep to the loop; bfloat16 operands moved as uint16, which XLA:CPU would
    move as float32 copies of twice the size; a running sum without the batch dimension when there
    is one batch, as XLA's dot result is after its simplification (3.8 MiB less on the transformer
    block); the sum materialized (`computed_once`), so that its consumers do not add two chunks'
    products again in their own loops, keeping both until then (its predicate reads ``probe``'s first
    element where given: `compute_dot`).
    """
    if cfg.accumulate_every is None:
        a3, b3 = geometry.to3d(a, b)
        return positive_zero(_dot3(a3, b3, cfg, geometry.plain))
    k = cfg.accumulate_every
    chunks = -(-geometry.contraction // k)
    batch, m, n = _result3d_shape(geometry)
    if chunks == 0:  # an empty contraction: the sum of no products
        return jnp.zeros((batch, m, n), cfg.work)
    if chunks == 1:  # one chunk: the whole contraction, not padded to the chunk's length with zero products
        k = geometry.contraction
    dtypes = a.dtype, b.dtype
    chunked = geometry.chunked
    if chunked is None:  # slices of the (B, M, K) and (B, K, N) forms
        a, b = geometry.to3d(a, b)
        axes = (2, 1)
        to3d = lambda x, y: (x, y)
    else:
        view, lhs_axis, rhs_axis = chunked
        axes = (lhs_axis, rhs_axis)
        a, b = a.reshape(view.lhs_shape), b.reshape(view.rhs_shape)
        to3d = view.to3d
    pad = chunks * k - geometry.contraction  # zero products: +0 changes no sum
    if pad:
        a, b = (_pad_axis(x, axis, pad) for x, axis in zip((a, b), axes, strict=True))
    a, b = _as_bits(a), _as_bits(b)
    acc_shape = (m, n) if batch == 1 else (batch, m, n)

    def chunk_sum(acc: jax.Array, index: Any, words: jax.Array) -> jax.Array:
        # a chunk starts at index * k >= 0: no normalization of negative starts (three scalar equations)
        a_chunk, b_chunk = (
            _from_bits(lax.dynamic_slice_in_dim(x, _times(index, k), k, axis=axis, allow_negative_indices=False), dtype)
            for x, axis, dtype in zip((a, b), axes, dtypes, strict=True)
        )
        if cfg.explicit_random:
            words = words.reshape(acc_shape)

        def round_to(total, rounding, saturate):
            stream = {"random" if cfg.explicit_random else "key": words} if rounding == "stochastic" else {}
            return round_in(total, cfg.accumulate, cfg, stream, rounding, saturate)

        return round_accumulator(acc, _dot3(*to3d(a_chunk, b_chunk), cfg).reshape(acc_shape), cfg, round_to)

    first = chunk_sum(jnp.zeros(acc_shape, cfg.work), 0, key_words[0])
    if chunks == 1:
        return first.reshape(batch, m, n)
    rest = (jnp.arange(1, chunks, dtype=jnp.int32), key_words[1:])
    unroll = chunks - 1 <= _UNROLLED_MAX_STEPS  # a short loop as straight-line code, in the same order
    acc, _ = lax.scan(lambda acc, xs: (chunk_sum(acc, *xs), None), first, rest, unroll=unroll)
    return computed_once(acc, probe=probe).reshape(batch, m, n)


def _times(index: Any, k: int) -> Any:
    """``index * k`` for a Python int or a traced int32 scalar (bound as one equation)."""
    return index * k if isinstance(index, int) else lax.mul(index, np.int32(k))


def _result3d_shape(geometry: Geometry) -> tuple[int, ...]:
    """(B, M, N) of the op's result."""
    return jax.eval_shape(geometry.result_to3d, jax.ShapeDtypeStruct(geometry.out_shape, jnp.bool_)).shape


def _pad_axis(x: jax.Array, axis: int, pad: int) -> jax.Array:
    """``x`` with ``pad`` zeros after its elements along ``axis``."""
    return pad_zeros(x, [(0, pad if d == axis else 0) for d in range(x.ndim)])


def _as_bits(x: jax.Array) -> jax.Array:
    """A bfloat16 array as its uint16 bit patterns (moved, not computed on); others as they are."""
    return lax.bitcast_convert_type(x, jnp.uint16) if x.dtype == jnp.bfloat16 else x


def _from_bits(x: jax.Array, dtype: Any) -> jax.Array:
    """`_as_bits` undone."""
    return x if x.dtype == dtype else lax.bitcast_convert_type(x, dtype)


_accumulate = jax.custom_jvp(_accumulate_impl, nondiff_argnums=(4, 5))


@_accumulate.defjvp
def _accumulate_jvp(cfg, geometry, primals, tangents):
    """The tangent of the exact product: a plain W dot of the tangents (no rounding, no chunks)."""
    a, b, key_words, probe = primals
    da, db, _, _ = tangents

    def dot(x: jax.Array, y: jax.Array) -> jax.Array:
        x3, y3 = geometry.to3d(x.astype(cfg.work), y.astype(cfg.work))
        return lax.dot_general(x3, y3, _BATCHED, precision=_HIGHEST, preferred_element_type=cfg.work)

    return _accumulate(a, b, key_words, probe, cfg, geometry), dot(da, b) + dot(a, db)


# -- the whole computation --------------------------------------------------------------------------


def round_in(
    x: jax.Array, fmt: Format, cfg: MatmulConfig, stream: dict[str, Any], rounding: Any = None, saturate: Any = None
) -> jax.Array:
    """``fpemu.quantize(x, fmt, **stream, **cfg.rounding_options(rounding))`` (``saturate``, if given,
    in place of the config's) for W values ``x``: the same bits, its options checked once per
    combination (`rounding_spec_once`) rather than on every call; ``stream`` is `_stream`'s."""
    options = cfg.rounding_options(rounding)
    key, random = stream.get("key"), stream.get("random")
    # `matmul_config` and `matmul_call` make sure every stochastic rounding has its key or its bits
    assert options["rounding"] != "stochastic" or key is not None or random is not None, options
    spec = rounding_spec_once(
        fmt, options["rounding"], options["saturate"] if saturate is None else saturate, True, None,
        options["stochastic_variant"], options["exponent_ties"], random is not None,
    )  # fmt: skip
    return round_checked(x, spec, key, random)


def _stream(cfg: MatmulConfig, key, random: dict[str, jax.Array] | None, name: str) -> dict[str, Any]:
    """The random bits of one stochastic rounding as `quantize`'s keyword: ``key=`` the stream's key,
    ``random=`` the explicit bits of the stream ``name``; nothing for a deterministic rounding."""
    if cfg.explicit_random:
        return {"random": random[name]} if random is not None and name in random else {}
    return {} if key is None else {"key": key}


def _round_operand(x, fmt, scale, cfg: MatmulConfig, stream: dict[str, Any]) -> jax.Array:
    """The operand divided by its scale and rounded, in W; a bfloat16 operand the dot takes as it is
    (no scale, no format, bfloat16 operands: `_dot3`) stays bfloat16."""
    if fmt is None and scale is None and cfg.bf16_operands and x.dtype == jnp.bfloat16:
        return x
    x = x.astype(cfg.work)
    if scale is not None:
        x = x / scale
    if fmt is None:
        return x
    return round_in(x, fmt, cfg, stream if cfg.operands_stochastic else {})


def _gather(x: jax.Array, dims: tuple[int, ...]) -> jax.Array:
    """Reshard explicitly sharded ``dims`` (JAX's sharding in types) to whole: one device sums each output.

    With ``AxisType.Explicit`` mesh axes, a sharded contraction is ambiguous for `lax.dot_general`
    and for the chunked scan. Auto (GSPMD) shardings carry no spec here and are left to XLA.
    """
    typeof = getattr(jax, "typeof", None)  # JAX versions without it have no Explicit axes either
    sharding = getattr(typeof(x), "sharding", None) if typeof is not None else None
    spec = getattr(sharding, "spec", None)
    if sharding is None or spec is None:
        return x
    spec = tuple(spec) + (None,) * (x.ndim - len(spec))
    if all(spec[d] is None for d in dims):
        return x
    whole = jax.sharding.PartitionSpec(*(None if d in dims else s for d, s in enumerate(spec)))
    return jax.sharding.reshard(x, jax.sharding.NamedSharding(sharding.mesh, whole))


def scale_product(lhs_scale: jax.Array | None, rhs_scale: jax.Array | None) -> jax.Array | None:
    """``lhs_scale * rhs_scale`` in W, the one of them given, or None."""
    if lhs_scale is None or rhs_scale is None:
        return rhs_scale if lhs_scale is None else lhs_scale
    return lax.mul(lhs_scale, rhs_scale)


def times_scale(y: jax.Array, scale: jax.Array) -> jax.Array:
    """``fl(y * scale)`` for a product ``scale`` of per-tensor scales: where that product overflowed to
    inf, an exact zero ``y`` stays zero (its true product is finite) instead of 0 * inf = NaN."""
    return select(
        lax.bitwise_and(lax.eq(y, y.dtype.type(0)), lax.eq(lax.abs(scale), scale.dtype.type(np.inf))),
        y,
        lax.mul(y, scale),
    )


def times_tensor_scales(y: jax.Array, lhs_scale: jax.Array | None, rhs_scale: jax.Array | None) -> jax.Array:
    """``fl(y * fl(lhs_scale * rhs_scale))`` (or the one scale given; `times_scale`): per-tensor scales
    applied to a float32 product once, as cuBLAS's scale factors and ``alpha`` are."""
    alpha = scale_product(lhs_scale, rhs_scale)
    return y if alpha is None else times_scale(y, alpha)


def rounded_operands(a, b, lhs_scale, rhs_scale, key, random, cfg: MatmulConfig) -> tuple[jax.Array, jax.Array]:
    """Step 1 of the model: the W operands ``a`` and ``b`` (`device_operands`) divided by their scales
    and rounded to ``cfg.lhs`` / ``cfg.rhs`` (random bits from ``key``'s streams or ``random``); a
    bfloat16 operand that the dot takes as it is stays bfloat16. The XLA path and the kernel both
    start here."""
    keys = key_streams(key)
    a = _round_operand(a, cfg.lhs, lhs_scale, cfg, _stream(cfg, keys[KEY_LHS], random, "lhs"))
    b = _round_operand(b, cfg.rhs, rhs_scale, cfg, _stream(cfg, keys[KEY_RHS], random, "rhs"))
    return a, b


def finished_output(y: jax.Array, lhs_scale, rhs_scale, key, random, cfg: MatmulConfig) -> jax.Array:
    """Step 4 of the model: the W sum ``y`` times the scales, rounded to ``cfg.out``, in the result dtype."""
    y = times_tensor_scales(y, lhs_scale, rhs_scale)
    if cfg.out is not None:
        stream = _stream(cfg, key_streams(key)[KEY_OUT], random, "out") if cfg.operands_stochastic else {}
        y = round_in(y, cfg.out, cfg, stream)
    return y.astype(cfg.result)


def _compute_dot(
    a, b, lhs_scale, rhs_scale, key, random, probe=None, *, cfg: MatmulConfig, geometry: Geometry
) -> jax.Array:  # fmt: skip
    """The emulated dot of the W operands ``a`` and ``b`` (`device_operands`); jitted as `compute_dot`,
    with ``cfg`` and ``geometry`` static. The gradient is straight-through. Random bits come from
    ``key`` or, with ``cfg.explicit_random``, from ``random`` (`MatmulCall.random`). ``probe``: the
    array whose first element the chunked sum's materialization reads for its predicate (a training
    GEMM's lhs as it came, shared with its other materializations; None: the sum's own)."""
    a, b = rounded_operands(a, b, lhs_scale, rhs_scale, key, random, cfg)
    # a rounded operand that the dot transposes (or gathers into windows) is computed once, in its own
    # order: fused into the transposition, its rounding loop would run in the transposed order,
    # unvectorised (a (1024, 1024) operand contracted along its first axis: 3.3 -> 1.2 ms)
    lhs_plain, rhs_plain = geometry.plain
    a = a if cfg.lhs is None or lhs_plain else computed_once(a, reordered=True)
    b = b if cfg.rhs is None or rhs_plain else computed_once(b, reordered=True)
    lhs_dims, rhs_dims = geometry.gathered
    a, b = _gather(a, lhs_dims), _gather(b, rhs_dims)
    chunks = 1 if cfg.accumulate_every is None else -(-geometry.contraction // cfg.accumulate_every)
    if cfg.accumulate_stochastic and cfg.explicit_random:  # (chunks,) + result -> (chunks, B, M, N)
        assert random is not None
        bits = jnp.broadcast_to(random["accumulate"], (chunks, *geometry.out_shape))
        words = jax.vmap(geometry.result_to3d)(bits) if chunks else bits.reshape((0, *_result3d_shape(geometry)))
    elif cfg.accumulate_stochastic:
        words = chunk_key_words(key_streams(key)[KEY_ACC], chunks)
    else:
        words = jnp.zeros((chunks, 0), jnp.uint32)
    y = geometry.from3d(_accumulate(a, b, words, probe, cfg, geometry))
    return finished_output(y, lhs_scale, rhs_scale, key, random, cfg)


compute_dot = jax.jit(_compute_dot, static_argnames=("cfg", "geometry"))


def device_operands(call: MatmulCall) -> tuple[jax.Array, jax.Array]:
    """The call's operands as device arrays. A host float64 operand (x64 disabled) with a format and
    no scale is rounded here, once from its float64 value, as `quantize` does (the later rounding of
    the float32 result is then the identity)."""
    cfg = call.cfg
    work = np.dtype(cfg.work)
    keys = key_streams(call.key if cfg.operands_stochastic else None)
    operands = []
    sides = (
        (call.a, cfg.lhs, call.lhs_scale, _stream(cfg, keys[KEY_LHS], call.random, "lhs")),
        (call.b, cfg.rhs, call.rhs_scale, _stream(cfg, keys[KEY_RHS], call.random, "rhs")),
    )
    for x, fmt, scale, stream in sides:
        if isinstance(x, np.ndarray):  # host float64 with x64 disabled
            if fmt is not None and scale is None:
                x = quantize(x, fmt, **(stream if cfg.operands_stochastic else {}), **cfg.rounding_options())
            x = jnp.asarray(x, work)
        operands.append(x)
    return operands[0], operands[1]
