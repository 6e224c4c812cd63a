"""Emulated `matmul`, `dot_general`, `conv_general_dilated`: rounded operands, exact products, emulated accumulator.

The model, in five steps (docs/matmul.md is the contract; `dot_general_reference` is its slow,
sequential oracle):

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
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._engine import convert as _convert
from fpemu._core.format import Format
from fpemu._core.modes import ROUNDING_MODES, Rounding
from fpemu._args import float_array, input_format, is_host_float64
from fpemu._ops.quantize import quantize
from fpemu._core.registry import get_format

__all__ = ["conv_general_dilated", "dot_general", "dot_general_reference", "matmul"]

_FLOAT_RESULTS = ("float16", "bfloat16", "float32", "float64")
_HIGHEST = lax.Precision.HIGHEST
# Keys: the one `key` argument is split into four independent streams, in this order.
_KEY_LHS, _KEY_RHS, _KEY_ACC, _KEY_OUT = range(4)


# -- options ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Config:
    """Validated, static options of one emulated dot (hashable: a jit static argument)."""

    lhs: Format | None  # operand formats (None: the operand is used as it is, in W)
    rhs: Format | None
    accumulate: Format  # the running sum's format
    accumulate_every: int | None  # products per chunk; None: one dot, no intermediate rounding
    out: Format | None  # the output's format (None: no rounding beyond W and the result dtype)
    rounding: str  # operands and output
    accumulate_rounding: str  # the running sum
    saturate: bool
    work: str  # W: "float32" or "float64"
    result: str  # the result dtype
    bf16_operands: bool  # both operands hold bfloat16 values: the dots take bfloat16 operands
    direct: bool  # the accumulator is W itself: its additions are W additions (round to nearest even)

    @property
    def operands_stochastic(self) -> bool:
        return self.rounding == "stochastic"

    @property
    def accumulate_stochastic(self) -> bool:
        return self.accumulate_every is not None and self.accumulate_rounding == "stochastic"


def _format_arg(value: Any, name: str) -> Format | None:
    """A format argument (or None); errors name the argument."""
    if value is None:
        return None
    if isinstance(value, (jax.Array, np.ndarray)) and value.ndim > 0:
        raise TypeError(
            f"{name} is a format (a name such as 'e4m3fn', a fpemu.Format or a dtype), got an array of shape "
            f"{value.shape}; pass the operands positionally"
        )
    try:
        return get_format(value)
    except ValueError as e:  # UnknownFormatError included
        raise type(e)(f"{name}: {e}") from None
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None


def _check_fits(fmt: Format | None, work: Format, name: str) -> None:
    if fmt is not None and not _convert.fits(fmt, work):
        hint = (
            " (float64 inputs, with jax.config.update('jax_enable_x64', True), compute in float64)"
            if work.name == "fp32"
            else ""
        )
        raise ValueError(
            f"{name}={fmt.name!r} has values that the working dtype {work.name} cannot hold exactly{hint}"
        )


def _rounding_arg(value: Any, name: str) -> str:
    if value not in ROUNDING_MODES:
        raise ValueError(f"{name} must be one of {', '.join(ROUNDING_MODES)}; got {value!r}")
    return value


def _is_key(key: Any) -> bool:
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key.shape == ()
    return isinstance(key, (jax.Array, np.ndarray)) and key.dtype == np.uint32 and key.ndim == 1


def _scale_arg(scale: Any, name: str, work: np.dtype) -> jax.Array | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.ndarray, np.generic, jax.Array)):
        raise TypeError(f"{name} must be a float scalar (a per-tensor scale), got {type(scale).__name__}")
    if not isinstance(scale, (int, float)):
        if np.ndim(scale) != 0:
            raise ValueError(f"{name} must be a scalar (one per-tensor scale), got shape {np.shape(scale)}")
        if not jnp.issubdtype(scale.dtype, jnp.floating):
            raise TypeError(f"{name} must be a float scalar, got dtype {scale.dtype}")
    return jnp.asarray(scale).astype(work) if isinstance(scale, jax.Array) else jnp.asarray(np.asarray(scale, work))


def _operand(x: Any, name: str) -> tuple[Any, Format]:
    """(the operand, its input format); host float64 arrays stay NumPy (quantize rounds them from float64)."""
    if isinstance(x, (bool, int, complex, np.bool_)) and not isinstance(x, float):
        raise TypeError(f"{name} must be a floating-point array, got {type(x).__name__} {x!r}")
    if is_host_float64(x):
        return np.asarray(x, np.float64), get_format("fp64")
    x = float_array(x, name)
    return x, input_format(x.dtype, name=name)


def _config(
    a_fmt: Format,
    b_fmt: Format,
    *,
    lhs,
    rhs,
    accumulate,
    out,
    accumulate_every,
    rounding,
    accumulate_rounding,
    saturate,
    key,
    lhs_scale,
    rhs_scale,
    preferred_element_type,
) -> _Config:
    wide = jax.config.jax_enable_x64 and "fp64" in (a_fmt.name, b_fmt.name)
    work = get_format("fp64" if wide else "fp32")
    lhs, rhs, out = _format_arg(lhs, "lhs"), _format_arg(rhs, "rhs"), _format_arg(out, "out")
    acc = _format_arg(accumulate, "accumulate") or work
    for fmt, name in ((lhs, "lhs"), (rhs, "rhs"), (acc, "accumulate"), (out, "out")):
        _check_fits(fmt, work, name)
    rounding = _rounding_arg(rounding, "rounding")
    acc_rounding = _rounding_arg(
        "nearest_even" if accumulate_rounding is None else accumulate_rounding, "accumulate_rounding"
    )
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate must be a bool, got {saturate!r}")
    if accumulate_every is not None:
        if not isinstance(accumulate_every, (int, np.integer)) or isinstance(accumulate_every, bool):
            raise TypeError(f"accumulate_every must be None or an int, got {accumulate_every!r}")
        if accumulate_every < 1:
            raise ValueError(f"accumulate_every must be >= 1 (products per chunk), got {accumulate_every}")
        accumulate_every = int(accumulate_every)

    direct = acc.encoding == work.encoding
    if not direct and acc.mantissa_bits > work.mantissa_bits - 2:
        raise ValueError(
            f"accumulate={acc.name!r} has {acc.mantissa_bits} mantissa bits; the running sum is rounded exactly "
            f"only for formats of at most {work.mantissa_bits - 2} ({work.name} minus 2), or {work.name} itself"
        )
    if direct and acc_rounding != "nearest_even":
        raise ValueError(
            f"accumulate_rounding={acc_rounding!r} with accumulate={acc.name!r}: a {work.name} running sum is a "
            f"{work.name} addition, which rounds to nearest even; directed and stochastic accumulation need an "
            f"accumulate format of at most {work.mantissa_bits - 2} mantissa bits (e.g. 'bf16', 'fp16')"
        )
    if accumulate_every is None and not direct:
        accumulate_every = 1  # a narrow accumulator: the sequential model, rounded after every product

    if preferred_element_type is None:
        result = np.dtype(work.dtype)
    else:
        try:
            result = np.dtype(preferred_element_type)
        except TypeError:
            raise TypeError(
                f"preferred_element_type must be a float dtype or None, got {preferred_element_type!r}"
            ) from None
        if result.name not in _FLOAT_RESULTS:
            raise TypeError(
                f"preferred_element_type must be one of {', '.join(_FLOAT_RESULTS)} or None, got {result.name}"
            )
        if result.name == "float64" and not jax.config.jax_enable_x64:
            raise ValueError("preferred_element_type=float64 needs jax.config.update('jax_enable_x64', True)")
    result_fmt = get_format(result)
    if out is None and not _convert.fits(work, result_fmt):
        out = result_fmt  # a narrower result dtype: its rounding is the output rounding, in `rounding`
    if out is not None and not _convert.fits(out, result_fmt):
        raise ValueError(f"out={out.name!r} has values that preferred_element_type={result.name} cannot hold exactly")

    stochastic = rounding == "stochastic" or acc_rounding == "stochastic"
    if stochastic and key is None:
        raise ValueError(
            "stochastic rounding (rounding= or accumulate_rounding='stochastic') needs key=jax.random.key(...)"
        )
    if not stochastic and key is not None:
        raise ValueError(
            f"key is only used with stochastic rounding, not rounding={rounding!r}, "
            f"accumulate_rounding={acc_rounding!r}"
        )
    if key is not None and not _is_key(key):
        raise TypeError(
            f"key must be a single JAX PRNG key (jax.random.key(...) or jax.random.PRNGKey(...)), got "
            f"{type(key).__name__}"
            + (f" of shape {key.shape}" if hasattr(key, "shape") else "")
        )
    bf16 = get_format("bf16")
    lhs_values = lhs or (a_fmt if lhs_scale is None and a_fmt.name != "fp64" else work)
    rhs_values = rhs or (b_fmt if rhs_scale is None and b_fmt.name != "fp64" else work)
    bf16_operands = work.name == "fp32" and _convert.fits(lhs_values, bf16) and _convert.fits(rhs_values, bf16)
    return _Config(
        lhs=lhs,
        rhs=rhs,
        accumulate=acc,
        accumulate_every=accumulate_every,
        out=out,
        rounding=rounding,
        accumulate_rounding=acc_rounding,
        saturate=bool(saturate),
        work=np.dtype(work.dtype).name,
        result=result.name,
        bf16_operands=bf16_operands,
        direct=direct,
    )


# -- geometry: every op as a batch of (M, K) @ (K, N) products --------------------------------------
#
# Reshapes merge or split one group of dimensions at a time: with Explicit mesh axes (JAX's sharding
# in types) a reshape that moves a sharded dimension and changes others at once is refused.


def _merge(x: jax.Array, counts: Sequence[int]) -> jax.Array:
    """Merge consecutive groups of ``counts`` dimensions into one each (a new size-1 dimension for 0)."""
    dim = 0
    for count in counts:
        if count == 0:
            x = jnp.expand_dims(x, dim)
        elif count > 1:
            x = x.reshape(x.shape[:dim] + (math.prod(x.shape[dim : dim + count]),) + x.shape[dim + count :])
        dim += 1
    return x


def _split(y: jax.Array, shapes: Sequence[tuple[int, ...]]) -> jax.Array:
    """The inverse of `_merge`: dimension ``i`` of ``y`` becomes ``shapes[i]`` (removed for ``()``)."""
    dim = 0
    for shape in shapes:
        if len(shape) == 0:
            y = lax.squeeze(y, (dim,))
            continue
        if len(shape) > 1:
            y = y.reshape(y.shape[:dim] + tuple(shape) + y.shape[dim + 1 :])
        dim += len(shape)
    return y


@dataclasses.dataclass(frozen=True)
class _DotGeometry:
    """`lax.dot_general` dimension numbers, validated: operands to (B, M, K) / (B, K, N) and back."""

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]

    @property
    def lhs_free(self) -> tuple[int, ...]:
        used = set(self.lhs_contract) | set(self.lhs_batch)
        return tuple(d for d in range(len(self.lhs_shape)) if d not in used)

    @property
    def rhs_free(self) -> tuple[int, ...]:
        used = set(self.rhs_contract) | set(self.rhs_batch)
        return tuple(d for d in range(len(self.rhs_shape)) if d not in used)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (
            tuple(self.lhs_shape[d] for d in self.lhs_batch)
            + tuple(self.lhs_shape[d] for d in self.lhs_free)
            + tuple(self.rhs_shape[d] for d in self.rhs_free)
        )

    @property
    def contraction_size(self) -> int:
        return math.prod(self.lhs_shape[d] for d in self.lhs_contract)

    def to3d(self, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        a3 = _merge(
            jnp.transpose(a, self.lhs_batch + self.lhs_free + self.lhs_contract),
            (len(self.lhs_batch), len(self.lhs_free), len(self.lhs_contract)),
        )
        b3 = _merge(
            jnp.transpose(b, self.rhs_batch + self.rhs_contract + self.rhs_free),
            (len(self.rhs_batch), len(self.rhs_contract), len(self.rhs_free)),
        )
        return a3, b3

    def from3d(self, y3: jax.Array) -> jax.Array:
        shapes = (
            tuple(self.lhs_shape[d] for d in self.lhs_batch),
            tuple(self.lhs_shape[d] for d in self.lhs_free),
            tuple(self.rhs_shape[d] for d in self.rhs_free),
        )
        return _split(y3, shapes)

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The operands' dimensions that one device must hold whole (the contraction)."""
        return self.lhs_contract, self.rhs_contract


def _dot_geometry(lhs_shape, rhs_shape, dimension_numbers) -> _DotGeometry:
    try:
        (lc, rc), (lb, rb) = dimension_numbers
        lc, rc, lb, rb = (tuple(int(d) for d in dims) for dims in (lc, rc, lb, rb))
    except (TypeError, ValueError):
        raise TypeError(
            "dimension_numbers must be ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), sequences "
            f"of ints, got {dimension_numbers!r}"
        ) from None
    for dims, shape, what in ((lc, lhs_shape, "lhs contracting"), (lb, lhs_shape, "lhs batch"),
                              (rc, rhs_shape, "rhs contracting"), (rb, rhs_shape, "rhs batch")):  # fmt: skip
        bad = [d for d in dims if not 0 <= d < len(shape)]
        if bad:
            raise ValueError(f"dimension_numbers: {what} dimensions {bad} out of range for an operand of shape {shape}")
    for dims, shape, side in ((lc + lb, lhs_shape, "lhs"), (rc + rb, rhs_shape, "rhs")):
        if len(set(dims)) != len(dims):
            raise ValueError(f"dimension_numbers: {side} contracting and batch dimensions {dims} repeat a dimension")
    if len(lc) != len(rc):
        raise ValueError(f"dimension_numbers: {len(lc)} lhs but {len(rc)} rhs contracting dimensions")
    if len(lb) != len(rb):
        raise ValueError(f"dimension_numbers: {len(lb)} lhs but {len(rb)} rhs batch dimensions")
    for l_dims, r_dims, what in ((lc, rc, "contracting"), (lb, rb, "batch")):
        for ld, rd in zip(l_dims, r_dims):
            if lhs_shape[ld] != rhs_shape[rd]:
                raise ValueError(
                    f"{what} dimensions do not match: lhs dimension {ld} has size {lhs_shape[ld]}, rhs dimension "
                    f"{rd} has size {rhs_shape[rd]} (shapes {lhs_shape} and {rhs_shape})"
                )
    return _DotGeometry(tuple(lhs_shape), tuple(rhs_shape), lc, rc, lb, rb)


@dataclasses.dataclass(frozen=True)
class _MatmulGeometry:
    """`jnp.matmul` shapes: 1-D operands promoted and squeezed, leading batch dimensions broadcast."""

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    batch: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def contraction_size(self) -> int:
        return self.lhs_shape[-1]

    def to3d(self, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        a2 = jnp.expand_dims(a, 0) if a.ndim == 1 else a
        b2 = jnp.expand_dims(b, 1) if b.ndim == 1 else b
        if a2.shape[:-2] != self.batch:
            a2 = jnp.broadcast_to(a2, self.batch + a2.shape[-2:])
        if b2.shape[:-2] != self.batch:
            b2 = jnp.broadcast_to(b2, self.batch + b2.shape[-2:])
        return _merge(a2, (len(self.batch), 1, 1)), _merge(b2, (len(self.batch), 1, 1))

    def from3d(self, y3: jax.Array) -> jax.Array:
        m = self.lhs_shape[-2:-1]
        n = self.rhs_shape[-1:] if len(self.rhs_shape) >= 2 else ()
        return _split(y3, (self.batch, m, n))

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (len(self.lhs_shape) - 1,), (max(len(self.rhs_shape) - 2, 0),)


def _matmul_geometry(lhs_shape, rhs_shape) -> _MatmulGeometry:
    if len(lhs_shape) == 0 or len(rhs_shape) == 0:
        raise ValueError(f"matmul needs operands of at least 1 dimension, got shapes {lhs_shape} and {rhs_shape}")
    k_lhs, k_rhs = lhs_shape[-1], rhs_shape[-2 if len(rhs_shape) >= 2 else -1]
    if k_lhs != k_rhs:
        raise ValueError(
            f"matmul: the last dimension of a ({k_lhs}) must equal the "
            f"{'second-to-last' if len(rhs_shape) >= 2 else 'only'} dimension of b ({k_rhs}); "
            f"shapes {lhs_shape} and {rhs_shape}"
        )
    try:
        batch = np.broadcast_shapes(lhs_shape[:-2], rhs_shape[:-2])
    except ValueError:
        raise ValueError(
            f"matmul: batch dimensions {lhs_shape[:-2]} and {rhs_shape[:-2]} do not broadcast "
            f"(shapes {lhs_shape} and {rhs_shape})"
        ) from None
    m = lhs_shape[-2:-1]  # () for a 1-D a
    n = rhs_shape[-1:] if len(rhs_shape) >= 2 else ()
    out = tuple(batch) + m + n
    return _MatmulGeometry(tuple(lhs_shape), tuple(rhs_shape), tuple(batch), out)


@dataclasses.dataclass(frozen=True)
class _ConvGeometry:
    """A convolution as im2col: (groups, batch * out spatial, features * window) @ (groups, that, out features).

    The contraction index runs over (input feature, window position in row-major order).
    """

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]
    feature_groups: int
    batch_groups: int
    out_spatial: tuple[int, ...]

    @property
    def window(self) -> tuple[int, ...]:
        return tuple(self.rhs_shape[d] for d in self.rhs_spec[2:])

    @property
    def contraction_size(self) -> int:
        return self.rhs_shape[self.rhs_spec[1]] * math.prod(self.window)

    def to3d(self, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = jnp.transpose(a, self.lhs_spec)  # (N, C, *spatial)
        w = jnp.transpose(b, self.rhs_spec)  # (O, I, *window)
        n, c = x.shape[:2]
        o, i = w.shape[:2]
        zero = jnp.zeros((), x.dtype)
        config = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(self.pads, self.lhs_dilation)]
        x = lax.pad(x, zero, config)
        window = math.prod(self.window)
        spatial = math.prod(self.out_spatial)
        slices = []
        for offset in itertools.product(*(range(size) for size in self.window)):  # row-major window positions
            if spatial == 0:
                break
            start = [0, 0] + [p * d for p, d in zip(offset, self.rhs_dilation)]
            limit = [n, c] + [s + (size - 1) * st + 1 for s, size, st in zip(start[2:], self.out_spatial, self.strides)]
            slices.append(lax.slice(x, start, limit, [1, 1] + list(self.strides)))
        if slices:
            patches = _merge(jnp.stack(slices, axis=2), (1, 1, 1, len(self.out_spatial)))  # (N, C, window, S)
        else:  # no output positions (or an empty window)
            patches = jnp.zeros((n, c, window, spatial), x.dtype)
        w = _merge(w, (1, 1, len(self.window)))  # (O, I, window)
        if self.feature_groups == 1 and self.batch_groups == 1:
            patches = _merge(patches, (1, 2, 1)).transpose(0, 2, 1)  # (N, S, C * window)
            a3 = _merge(patches, (0, 2))  # (1, N * S, K)
            b3 = _merge(w, (0, 1, 2)).transpose(0, 2, 1)  # (1, K, O)
            return a3, b3
        g = self.feature_groups * self.batch_groups  # one of the two is 1; every dimension is whole here
        if self.feature_groups > 1:  # input features are group-major
            patches = patches.reshape(n, g, c // g, window, spatial)
            a3 = _merge(patches.transpose(1, 0, 4, 2, 3), (1, 2, 2))  # (G, N * S, C/G * window)
        else:  # batch groups: the batch is group-major, as in lax
            patches = patches.reshape(g, n // g, c, window, spatial)
            a3 = _merge(patches.transpose(0, 1, 4, 2, 3), (1, 2, 2))  # (G, N/G * S, C * window)
        b3 = _merge(w.reshape(g, o // g, i, window), (1, 1, 2)).transpose(0, 2, 1)  # (G, K, O/G)
        return a3, b3

    def from3d(self, y3: jax.Array) -> jax.Array:
        g, _, og = y3.shape
        n = self.lhs_shape[self.lhs_spec[0]] // self.batch_groups
        spatial = math.prod(self.out_spatial)
        if g == 1:
            y = _split(y3, ((), (n, spatial), (og,))).transpose(0, 2, 1)  # (N, O, S)
        else:
            y = _merge(_split(y3, ((g,), (n, spatial), (og,))).transpose(1, 0, 3, 2), (1, 2, 1))  # (N, O, S)
        y = _split(y, ((n,), (g * og,), self.out_spatial))
        return jnp.transpose(y, tuple(int(d) for d in np.argsort(self.out_spec)))

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Everything but the input's batch and the kernel's output features (windows cross shards);
        everything, with groups."""
        grouped = self.feature_groups > 1 or self.batch_groups > 1
        lhs = tuple(d for d in range(len(self.lhs_shape)) if d != self.lhs_spec[0] or grouped)
        return lhs, tuple(d for d in range(len(self.rhs_shape)) if d != self.rhs_spec[0] or grouped)


def _conv_geometry(
    lhs_shape, rhs_shape, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
    feature_group_count, batch_group_count,
) -> _ConvGeometry:  # fmt: skip
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    spatial = len(lhs_shape) - 2
    try:  # lax's own shape rules validate everything; the messages are lax's
        expected = jax.eval_shape(
            lambda x, w: lax.conv_general_dilated(
                x, w, window_strides, padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
                dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
                batch_group_count=batch_group_count,
            ),
            jax.ShapeDtypeStruct(lhs_shape, jnp.float32),
            jax.ShapeDtypeStruct(rhs_shape, jnp.float32),
        ).shape  # fmt: skip
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"conv_general_dilated: {e}") from None
    dn = lax.conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    lhs_dilation = tuple(lhs_dilation or (1,) * spatial)
    rhs_dilation = tuple(rhs_dilation or (1,) * spatial)
    strides = tuple(window_strides)
    in_spatial = [lhs_shape[d] for d in dn.lhs_spec[2:]]
    window = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    if isinstance(padding, str):
        dilated_in = [(s - 1) * d + 1 if s else 0 for s, d in zip(in_spatial, lhs_dilation)]
        dilated_window = [(s - 1) * d + 1 for s, d in zip(window, rhs_dilation)]
        pairs = lax.padtype_to_pads(dilated_in, dilated_window, strides, padding)
        pads = tuple((int(lo), int(hi)) for lo, hi in pairs)
    else:
        pads = tuple((int(lo), int(hi)) for lo, hi in padding)
    out_spatial = []
    for s, ld, (lo, hi), k, rd, st in zip(in_spatial, lhs_dilation, pads, window, rhs_dilation, strides):
        extent = ((s - 1) * ld + 1 if s else 0) + lo + hi - ((k - 1) * rd + 1)
        out_spatial.append(max(0, extent // st + 1) if extent >= 0 else 0)
    geometry = _ConvGeometry(
        lhs_shape, rhs_shape, strides, pads, lhs_dilation, rhs_dilation, tuple(dn.lhs_spec), tuple(dn.rhs_spec),
        tuple(dn.out_spec), int(feature_group_count), int(batch_group_count), tuple(out_spatial),
    )  # fmt: skip
    logical = (lhs_shape[dn.lhs_spec[0]] // batch_group_count, rhs_shape[dn.rhs_spec[0]]) + tuple(out_spatial)
    ours = tuple(logical[i] for i in np.argsort(dn.out_spec))
    assert ours == tuple(expected), (ours, expected)
    return geometry


# -- the computation --------------------------------------------------------------------------------


def _dot3(a: jax.Array, b: jax.Array, cfg: _Config) -> jax.Array:
    """Batched (B, M, k) @ (B, k, N) with W accumulation; bfloat16 operands when they hold bf16 values."""
    if a.shape[2] == 1:  # one product per output: a product, not a sum
        return a * b
    if cfg.bf16_operands:
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)  # exact: the values are bfloat16 values
        # XLA:CPU's dot runtime rejects BF16 x BF16 = F32 when the conversions are fused into the dot
        # ("Unsupported element type for DotThunk::Execute"); the barrier keeps them as plain operands.
        a, b = lax.optimization_barrier((a, b))
    return lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))), precision=_HIGHEST, preferred_element_type=cfg.work)


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
    bits = jnp.where(inexact_even, jnp.where(outward, bits + one, bits - one), bits)
    return lax.bitcast_convert_type(bits, t.dtype)


def _positive_zero(x: jax.Array) -> jax.Array:
    """An exactly zero sum is +0 (XLA folds ``+0 + x`` into ``x``, which keeps a -0 ``x``)."""
    return jnp.where(x == 0, jnp.zeros_like(x), x)


def _round_accumulator(acc: jax.Array, s: jax.Array, key_words: jax.Array, cfg: _Config) -> jax.Array:
    if cfg.direct:
        total = _positive_zero(acc + s)  # a W addition: round to nearest even
        return quantize(total, cfg.accumulate, saturate=True) if cfg.saturate else total
    key = key_words if cfg.accumulate_rounding == "stochastic" else None
    total = _positive_zero(_add_to_odd(acc, s))
    return quantize(total, cfg.accumulate, rounding=cfg.accumulate_rounding, saturate=cfg.saturate, key=key)


def _accumulate_impl(a3: jax.Array, b3: jax.Array, key_words: jax.Array, cfg: _Config) -> jax.Array:
    if cfg.accumulate_every is None:
        return _positive_zero(_dot3(a3, b3, cfg))
    batch, m, k_total = a3.shape
    n = b3.shape[2]
    k = cfg.accumulate_every
    chunks = -(-k_total // k)
    pad = chunks * k - k_total  # zero products: +0 changes no sum
    a3 = jnp.pad(a3, ((0, 0), (0, 0), (0, pad)))
    b3 = jnp.pad(b3, ((0, 0), (0, pad), (0, 0)))
    a4 = a3.reshape(batch, m, chunks, k).transpose(2, 0, 1, 3)  # (chunk, B, M, k)
    b4 = b3.reshape(batch, chunks, k, n).transpose(1, 0, 2, 3)  # (chunk, B, k, N)

    def step(acc, xs):
        a_chunk, b_chunk, words = xs
        return _round_accumulator(acc, _dot3(a_chunk, b_chunk, cfg), words, cfg), None

    acc0 = jnp.zeros((batch, m, n), cfg.work)
    acc, _ = lax.scan(step, acc0, (a4, b4, key_words))
    return acc


_accumulate = jax.custom_jvp(_accumulate_impl, nondiff_argnums=(3,))


@_accumulate.defjvp
def _accumulate_jvp(cfg, primals, tangents):
    """The tangent of the exact product: a plain W dot of the tangents (no rounding, no chunks)."""
    a3, b3, key_words = primals
    da, db, _ = tangents
    dims = (((2,), (1,)), ((0,), (0,)))
    dot = lambda x, y: lax.dot_general(x, y, dims, precision=_HIGHEST, preferred_element_type=cfg.work)  # noqa: E731
    return _accumulate(a3, b3, key_words, cfg), dot(da, b3) + dot(a3, db)


def _key_words(key, count: int) -> jax.Array:
    """``count`` raw uint32 key words, one row per chunk of the accumulation."""
    keys = jax.random.split(key, count)
    if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
        keys = jax.random.key_data(keys)
    return keys.reshape(count, -1).astype(jnp.uint32)


def _round_operand(x, fmt, scale, cfg: _Config, key) -> jax.Array:
    x = x.astype(cfg.work)
    if scale is not None:
        x = x / scale
    if fmt is None:
        return x
    return quantize(x, fmt, rounding=cfg.rounding, saturate=cfg.saturate, key=key if cfg.operands_stochastic else None)


def _gather(x: jax.Array, dims: tuple[int, ...]) -> jax.Array:
    """Reshard explicitly sharded ``dims`` (JAX's sharding in types) to whole: one device sums each output.

    With ``AxisType.Explicit`` mesh axes, a sharded contraction is ambiguous for `lax.dot_general`
    and for the chunked scan. Auto (GSPMD) shardings carry no spec here and are left to XLA.
    """
    typeof = getattr(jax, "typeof", None)  # JAX versions without it have no Explicit axes either
    sharding = getattr(typeof(x), "sharding", None) if typeof is not None else None
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return x
    spec = tuple(spec) + (None,) * (x.ndim - len(spec))
    if all(spec[d] is None for d in dims):
        return x
    whole = jax.sharding.PartitionSpec(*(None if d in dims else s for d, s in enumerate(spec)))
    return jax.sharding.reshard(x, jax.sharding.NamedSharding(sharding.mesh, whole))


def _emulated(a, b, lhs_scale, rhs_scale, key, cfg: _Config, geometry):
    keys = jax.random.split(key, 4) if key is not None else (None,) * 4
    a = _round_operand(a, cfg.lhs, lhs_scale, cfg, keys[_KEY_LHS])
    b = _round_operand(b, cfg.rhs, rhs_scale, cfg, keys[_KEY_RHS])
    lhs_dims, rhs_dims = geometry.gathered
    a3, b3 = geometry.to3d(_gather(a, lhs_dims), _gather(b, rhs_dims))
    chunks = 1 if cfg.accumulate_every is None else -(-a3.shape[2] // cfg.accumulate_every)
    if cfg.accumulate_stochastic:
        words = _key_words(keys[_KEY_ACC], chunks)
    else:
        words = jnp.zeros((chunks, 0), jnp.uint32)
    y = geometry.from3d(_accumulate(a3, b3, words, cfg))
    if lhs_scale is not None or rhs_scale is not None:
        scale = lhs_scale if rhs_scale is None else (rhs_scale if lhs_scale is None else lhs_scale * rhs_scale)
        y = y * scale
    if cfg.out is not None:
        out_key = keys[_KEY_OUT] if cfg.operands_stochastic else None
        y = quantize(y, cfg.out, rounding=cfg.rounding, saturate=cfg.saturate, key=out_key)
    return y.astype(cfg.result)


_emulated_jit = jax.jit(_emulated, static_argnames=("cfg", "geometry"))


def device_operands(a, b, lhs_scale, rhs_scale, key, cfg: _Config) -> list:
    """``a`` and ``b`` as W arrays. A host float64 operand (x64 disabled) with a format and no scale
    is rounded here, once from its float64 value, as `quantize` does (the later rounding of the
    float32 result is then the identity)."""
    work = np.dtype(cfg.work)
    keys = jax.random.split(key, 4) if key is not None and cfg.operands_stochastic else (None,) * 4
    operands = []
    for x, fmt, scale, k in ((a, cfg.lhs, lhs_scale, keys[_KEY_LHS]), (b, cfg.rhs, rhs_scale, keys[_KEY_RHS])):
        if isinstance(x, np.ndarray):  # host float64 with x64 disabled
            if fmt is not None and scale is None:
                x = quantize(x, fmt, rounding=cfg.rounding, saturate=cfg.saturate, key=k)
            x = jnp.asarray(x, work)
        operands.append(x)
    return operands


def _run(a, b, geometry_fn, options: dict) -> jax.Array:
    a, a_fmt = _operand(a, "a")
    b, b_fmt = _operand(b, "b")
    geometry = geometry_fn(tuple(np.shape(a)), tuple(np.shape(b)))
    cfg = _config(a_fmt, b_fmt, **options)
    key = options["key"]
    work = np.dtype(cfg.work)
    lhs_scale = _scale_arg(options["lhs_scale"], "lhs_scale", work)
    rhs_scale = _scale_arg(options["rhs_scale"], "rhs_scale", work)
    operands = device_operands(a, b, lhs_scale, rhs_scale, key, cfg)
    return _emulated_jit(*operands, lhs_scale, rhs_scale, key, cfg=cfg, geometry=geometry)


# -- public API -------------------------------------------------------------------------------------


def dot_general(
    a: Any,
    b: Any,
    dimension_numbers: Any,
    *,
    lhs: Any = None,
    rhs: Any = None,
    accumulate: Any = "fp32",
    out: Any = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: bool = False,
    key: jax.Array | None = None,
    lhs_scale: Any = None,
    rhs_scale: Any = None,
    preferred_element_type: Any = None,
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
    accumulator and output streams (docs/matmul.md).

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
      saturate: clamp every rounding's overflow to ±max.
      key: a JAX PRNG key, for (and only for) stochastic rounding.
      lhs_scale, rhs_scale: per-tensor scales (float scalars): the operand divided by its scale
        is rounded, and the product of the scales multiplies the accumulated sum.
      preferred_element_type: the result dtype (float16, bfloat16, float32, float64) or None.

    Returns:
      An array of shape ``batch + lhs free + rhs free``.

    Raises:
      TypeError: integer/bool/complex operands, a non-key ``key``, a non-bool ``saturate``, a
        non-int ``accumulate_every``, a non-float ``preferred_element_type``, a malformed
        ``dimension_numbers``.
      ValueError: dimensions that do not match or repeat, unknown formats or modes (the message
        names the argument), formats W cannot hold, ``accumulate_every < 1``, stochastic rounding
        without a key or a key without it, non-scalar scales.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> a = jnp.array([[1.0, 2.0, 3.0]]); b = jnp.array([[0.3], [0.3], [0.3]])
      >>> fpemu.dot_general(a, b, (((1,), (0,)), ((), ())), lhs="e4m3fn", rhs="e4m3fn").tolist()  # 0.3 -> 0.3125
      [[1.875]]
      >>> ones = jnp.ones((1, 4096), jnp.float32)
      >>> fpemu.dot_general(ones, ones.T, (((1,), (0,)), ((), ())), accumulate="bf16").tolist()  # stagnates at 256
      [[256.0]]
    """
    options = dict(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate, key=key, lhs_scale=lhs_scale,
        rhs_scale=rhs_scale, preferred_element_type=preferred_element_type,
    )  # fmt: skip
    return _run(a, b, lambda sa, sb: _dot_geometry(sa, sb, dimension_numbers), options)


def matmul(
    a: Any,
    b: Any,
    *,
    lhs: Any = None,
    rhs: Any = None,
    accumulate: Any = "fp32",
    out: Any = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: bool = False,
    key: jax.Array | None = None,
    lhs_scale: Any = None,
    rhs_scale: Any = None,
    preferred_element_type: Any = None,
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
    options = dict(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate, key=key, lhs_scale=lhs_scale,
        rhs_scale=rhs_scale, preferred_element_type=preferred_element_type,
    )  # fmt: skip
    return _run(a, b, _matmul_geometry, options)


def conv_general_dilated(
    a: Any,
    b: Any,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    /,
    *,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    lhs: Any = None,
    rhs: Any = None,
    accumulate: Any = "fp32",
    out: Any = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: bool = False,
    key: jax.Array | None = None,
    lhs_scale: Any = None,
    rhs_scale: Any = None,
    preferred_element_type: Any = None,
) -> jax.Array:
    """`lax.conv_general_dilated` with rounded operands, exact products and an emulated accumulator.

    ``a`` is the input and ``b`` the kernel (lax's ``lhs`` and ``rhs``: here ``lhs=``/``rhs=`` are
    their formats). The geometry arguments are lax's, with the same defaults and the same errors.
    The operands are rounded first, then the convolution is computed as a matrix product on
    im2col patches: the contraction of each output runs over (input feature, window position in
    row-major order), so ``accumulate_every`` chunks that sequence. Every other option is that of
    `dot_general`. Under stochastic accumulator rounding the random bits are indexed by the
    position in the (group, batch, output position, output feature) product, not the result layout.

    Example:
      >>> import jax.numpy as jnp, fpemu
      >>> x = jnp.array([[[0.3, 1.0, 2.0, 3.0]]]); w = jnp.array([[[1.0, 0.3]]])   # NCW, OIW
      >>> fpemu.conv_general_dilated(x, w, (1,), "VALID", lhs="e4m3fn", rhs="e4m3fn").tolist()
      [[[0.625, 1.625, 2.9375]]]
    """
    options = dict(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate, key=key, lhs_scale=lhs_scale,
        rhs_scale=rhs_scale, preferred_element_type=preferred_element_type,
    )  # fmt: skip

    def geometry(lhs_shape, rhs_shape):
        return _conv_geometry(
            lhs_shape, rhs_shape, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, batch_group_count,
        )  # fmt: skip

    return _run(a, b, geometry, options)


# -- the reference ----------------------------------------------------------------------------------


def dot_general_reference(
    a: Any,
    b: Any,
    dimension_numbers: Any,
    *,
    lhs: Any = None,
    rhs: Any = None,
    accumulate: Any = "fp32",
    out: Any = None,
    accumulate_every: int | None = None,
    rounding: Rounding = "nearest_even",
    accumulate_rounding: Rounding | None = None,
    saturate: bool = False,
    key: jax.Array | None = None,
    lhs_scale: Any = None,
    rhs_scale: Any = None,
    preferred_element_type: Any = None,
) -> np.ndarray:
    """The slow, sequential, exact oracle for `dot_general`: every output element, step by step.

    It follows docs/matmul.md literally, one output element at a time, with exact rational
    arithmetic (`fractions.Fraction`) for products and sums and `fpemu.testing.reference.round_scalar`
    for every rounding. It shares no arithmetic with `dot_general`; only the random bits (the same
    counter-based generator and key split) and the argument validation are common. Where the model
    leaves freedom to the backend (the float32 summation order inside a chunk), it takes the chunk's
    exact sum rounded once to W, so it equals `dot_general` bit for bit whenever the chunk sums are
    exact in W, and bounds it otherwise. Arithmetic in W (``a / lhs_scale``, ``acc * scale``) uses
    NumPy, which keeps subnormals where XLA:CPU flushes them.

    Takes the arguments of `dot_general` and returns a NumPy array of the same shape and dtype.
    About 20 µs per product: for small shapes only.

    Example:
      >>> import numpy as np
      >>> ones = np.ones((1, 32), np.float32)
      >>> dot_general_reference(ones, ones.T, (((1,), (0,)), ((), ())), accumulate="e4m3fn").tolist()
      [[16.0]]
    """
    from fpemu._engine import rng as _random
    from fpemu.testing import reference

    options = dict(
        lhs=lhs, rhs=rhs, accumulate=accumulate, out=out, accumulate_every=accumulate_every, rounding=rounding,
        accumulate_rounding=accumulate_rounding, saturate=saturate, key=key, lhs_scale=lhs_scale,
        rhs_scale=rhs_scale, preferred_element_type=preferred_element_type,
    )  # fmt: skip
    a_in, a_fmt = _operand(a, "a")  # validation only: the arithmetic below is independent
    b_in, b_fmt = _operand(b, "b")
    geometry = _dot_geometry(np.shape(a_in), np.shape(b_in), dimension_numbers)
    work_dtype = np.dtype(_config(a_fmt, b_fmt, **options).work)
    _scale_arg(lhs_scale, "lhs_scale", work_dtype)
    _scale_arg(rhs_scale, "rhs_scale", work_dtype)

    a_np, b_np = np.asarray(a_in), np.asarray(b_in)
    wide = jax.config.jax_enable_x64 and np.float64 in (a_np.dtype, b_np.dtype)
    work = np.dtype(np.float64 if wide else np.float32)
    work_fmt = get_format(work)
    acc_fmt = work_fmt if accumulate is None else get_format(accumulate)
    direct = acc_fmt.encoding == work_fmt.encoding
    every = accumulate_every if accumulate_every is not None else (None if direct else 1)
    acc_rounding = accumulate_rounding or "nearest_even"
    result = np.dtype(preferred_element_type) if preferred_element_type is not None else work
    out_fmt = get_format(out) if out is not None else (get_format(result) if result.itemsize < work.itemsize else None)

    keys = jax.random.split(key, 4) if key is not None else (None,) * 4

    def bits(k, shape) -> np.ndarray:
        return np.asarray(_random.random_uint32(_random.seeds_from_key(k), shape))

    def rounded_operand(x: np.ndarray, fmt_arg, scale, k) -> np.ndarray:
        with np.errstate(all="ignore"):
            if scale is not None:
                values = x.astype(work) / np.asarray(scale).astype(work)
            elif fmt_arg is None:
                values = x.astype(work)
            else:
                values = x  # rounded once, from its own value
        if fmt_arg is None:
            return values.astype(np.float64)
        random = bits(k, x.shape) if rounding == "stochastic" else None
        q = np.empty(x.shape, np.float64)
        for index in np.ndindex(x.shape):
            r = int(random[index]) if random is not None else None
            q[index] = reference.round_scalar(values[index], fmt_arg, rounding, saturate, random=r)
        return q

    qa = rounded_operand(a_np, lhs, lhs_scale, keys[_KEY_LHS])
    qb = rounded_operand(b_np, rhs, rhs_scale, keys[_KEY_RHS])

    g = geometry
    out_shape = g.out_shape
    contract_shape = tuple(a_np.shape[d] for d in g.lhs_contract)
    size = math.prod(contract_shape)
    chunk = every if every is not None else max(size, 1)
    chunks = -(-size // chunk)
    acc_bits = None
    if every is not None and acc_rounding == "stochastic":
        step_keys = jax.random.split(keys[_KEY_ACC], chunks)
        if jax.dtypes.issubdtype(step_keys.dtype, jax.dtypes.prng_key):
            step_keys = jax.random.key_data(step_keys)
        acc_bits = [bits(jnp.asarray(step_keys[j]).reshape(-1), out_shape) for j in range(chunks)]
    out_bits = bits(keys[_KEY_OUT], out_shape) if out_fmt is not None and rounding == "stochastic" else None
    scale = None
    with np.errstate(all="ignore"):
        if lhs_scale is not None and rhs_scale is not None:
            scale = np.asarray(lhs_scale).astype(work) * np.asarray(rhs_scale).astype(work)
        elif lhs_scale is not None or rhs_scale is not None:
            scale = np.asarray(lhs_scale if lhs_scale is not None else rhs_scale).astype(work)

    def exact_sum(terms: list[tuple[float, float]]) -> Fraction | float:
        if all(math.isfinite(x) and math.isfinite(y) for x, y in terms):
            return sum((Fraction(x) * Fraction(y) for x, y in terms), Fraction(0))
        total = 0.0
        for x, y in terms:
            total += x * y  # Python floats: inf * 0 is nan, without warnings
        return total

    def add(x: float, y: float) -> Fraction | float:
        if math.isfinite(x) and math.isfinite(y):
            return Fraction(x) + Fraction(y)
        return x + y

    result_values = np.empty(out_shape, np.float64)
    nb, nl = len(g.lhs_batch), len(g.lhs_free)
    for out_index in np.ndindex(out_shape):
        batch, l_free, r_free = out_index[:nb], out_index[nb : nb + nl], out_index[nb + nl :]
        terms = []
        for c_index in np.ndindex(contract_shape):  # row-major over the contracting dimensions, in order
            li, ri = [0] * a_np.ndim, [0] * b_np.ndim
            placement = (
                (g.lhs_batch, batch, li), (g.lhs_free, l_free, li), (g.lhs_contract, c_index, li),
                (g.rhs_batch, batch, ri), (g.rhs_free, r_free, ri), (g.rhs_contract, c_index, ri),
            )  # fmt: skip
            for dims, values, target in placement:
                for d, v in zip(dims, values):
                    target[d] = v
            terms.append((float(qa[tuple(li)]), float(qb[tuple(ri)])))
        acc = 0.0
        for j in range(chunks):
            chunk_sum = reference.round_scalar(exact_sum(terms[j * chunk : (j + 1) * chunk]), work_fmt)
            if every is None:
                acc = chunk_sum
            elif acc_rounding == "stochastic":
                odd = reference.round_scalar(add(acc, chunk_sum), work_fmt, "to_odd")
                r = int(acc_bits[j][out_index])
                acc = reference.round_scalar(odd, acc_fmt, "stochastic", saturate, random=r)
            else:
                acc = reference.round_scalar(add(acc, chunk_sum), acc_fmt, acc_rounding, saturate)
        if every is None and chunks == 0:
            acc = 0.0
        with np.errstate(all="ignore"):
            y = float(work.type(acc) * scale) if scale is not None else acc
        if out_fmt is not None:
            r = int(out_bits[out_index]) if out_bits is not None else None
            y = reference.round_scalar(y, out_fmt, rounding, saturate, random=r)
        result_values[out_index] = y
    return result_values.astype(result)
