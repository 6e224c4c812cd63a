"""The geometry of an emulated dot: `dot_general`, `matmul` and a convolution as batches of (M, K) @ (K, N).

Each op's shapes are checked once, into a frozen (hashable: a jit static argument) geometry that
maps the operands to ``(B, M, K)`` and ``(B, K, N)`` arrays (`to3d`), the ``(B, M, N)`` result
back to the op's result (`from3d`), and names the operand dimensions one device must hold whole
(`gathered`: the contraction). The contraction index of a convolution runs over (input feature,
window position in row-major order): the order in which ``accumulate_every`` chunks it.

Reshapes merge or split one group of dimensions at a time: with Explicit mesh axes (JAX's sharding
in types) a reshape that moves a sharded dimension and changes others at once is refused.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fpemu._args import int_arg

__all__ = [
    "ConvGeometry",
    "DotGeometry",
    "Geometry",
    "MatmulGeometry",
    "conv_geometry",
    "dot_geometry",
    "matmul_geometry",
]


class Geometry(Protocol):
    """What the computation needs of an op's shapes (`DotGeometry`, `MatmulGeometry`, `ConvGeometry`)."""

    @property
    def lhs_shape(self) -> tuple[int, ...]:
        """The lhs operand's shape."""
        ...

    @property
    def rhs_shape(self) -> tuple[int, ...]:
        """The rhs operand's shape."""
        ...

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The operands' dimensions that one device must hold whole (the contraction)."""
        ...

    def to3d(self, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The operands as (B, M, K) and (B, K, N) arrays, K in the contraction's order."""
        ...

    def from3d(self, y3: jax.Array) -> jax.Array:
        """The (B, M, N) product as the op's result."""
        ...

    def result_to3d(self, y: jax.Array) -> jax.Array:
        """The inverse of `from3d`: an array of the result's shape as (B, M, N)."""
        ...

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The result's shape."""
        ...

    @property
    def contraction(self) -> int:
        """K: the number of products summed into each output."""
        ...

    @property
    def plain(self) -> tuple[bool, bool]:
        """Whether `to3d` gives each operand as a reshape of itself (its elements in stored order: no
        transposition, broadcast or gathering of windows)."""
        ...

    @property
    def chunked(self) -> tuple[Geometry, int, int] | None:
        """The op on its operands reshaped to ``lhs_shape`` and ``rhs_shape`` of the geometry given (no
        element moved), whose contraction is one dimension of each, and those two dimensions: `to3d`
        of slices along them is the slice of `to3d` along K. None where the contraction is not one run
        of dimensions of both operands, in the same order."""
        ...


def _is_run(dims: tuple[int, ...]) -> bool:
    """Whether ``dims`` are consecutive dimensions, in increasing order."""
    return dims == tuple(range(dims[0], dims[0] + len(dims)))


def _merge_run(
    shape: tuple[int, ...], run: tuple[int, ...], batch: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``shape`` with the dimensions of ``run`` merged into one (a reshape), and ``batch`` renumbered."""
    start, count = run[0], len(run)
    merged = shape[:start] + (math.prod(shape[start : start + count]),) + shape[start + count :]
    return merged, tuple(d if d < start else d - count + 1 for d in batch)


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
class DotGeometry:
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

    def result_to3d(self, y: jax.Array) -> jax.Array:
        return _merge(y, (len(self.lhs_batch), len(self.lhs_free), len(self.rhs_free)))

    @property
    def contraction(self) -> int:
        return math.prod(self.lhs_shape[d] for d in self.lhs_contract)

    @property
    def chunked(self) -> tuple[DotGeometry, int, int] | None:
        lc, rc = self.lhs_contract, self.rhs_contract
        if not lc or not (_is_run(lc) and _is_run(rc)):
            return None
        lhs_shape, lhs_batch = _merge_run(self.lhs_shape, lc, self.lhs_batch)
        rhs_shape, rhs_batch = _merge_run(self.rhs_shape, rc, self.rhs_batch)
        return DotGeometry(lhs_shape, rhs_shape, lc[:1], rc[:1], lhs_batch, rhs_batch), lc[0], rc[0]

    @property
    def plain(self) -> tuple[bool, bool]:
        in_order = lambda dims: dims == tuple(range(len(dims)))
        return (
            in_order(self.lhs_batch + self.lhs_free + self.lhs_contract),
            in_order(self.rhs_batch + self.rhs_contract + self.rhs_free),
        )

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The operands' dimensions that one device must hold whole (the contraction)."""
        return self.lhs_contract, self.rhs_contract


def dot_geometry(lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers: Any) -> DotGeometry:
    """The geometry of `lax.dot_general` with these dimension numbers; errors say which dimensions are wrong."""
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
    for dims, side in ((lc + lb, "lhs"), (rc + rb, "rhs")):
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
    return DotGeometry(tuple(lhs_shape), tuple(rhs_shape), lc, rc, lb, rb)


@dataclasses.dataclass(frozen=True)
class MatmulGeometry:
    """`jnp.matmul` shapes: 1-D operands promoted and squeezed, leading batch dimensions broadcast."""

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    batch: tuple[int, ...]
    out_shape: tuple[int, ...]

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

    def result_to3d(self, y: jax.Array) -> jax.Array:
        m = len(self.lhs_shape[-2:-1])
        n = 1 if len(self.rhs_shape) >= 2 else 0
        return _merge(y, (len(self.batch), m, n))

    @property
    def contraction(self) -> int:
        return self.lhs_shape[-1]

    @property
    def chunked(self) -> tuple[MatmulGeometry, int, int] | None:
        return self, len(self.lhs_shape) - 1, max(len(self.rhs_shape) - 2, 0)

    @property
    def plain(self) -> tuple[bool, bool]:
        """Operands whose batch dimensions are the result's (a 1-D operand has none: plain without batch)."""
        return tuple(shape[:-2] == self.batch for shape in (self.lhs_shape, self.rhs_shape))  # type: ignore[return-value]  # two shapes

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The contraction: a's last dimension, b's second-to-last (its only one, 1-D)."""
        return (len(self.lhs_shape) - 1,), (max(len(self.rhs_shape) - 2, 0),)


def matmul_geometry(lhs_shape: Sequence[int], rhs_shape: Sequence[int]) -> MatmulGeometry:
    """The geometry of `jnp.matmul` of these shapes; errors name the dimensions that do not match."""
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
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
    return MatmulGeometry(lhs_shape, rhs_shape, tuple(batch), out)


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
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

    def result_to3d(self, y: jax.Array) -> jax.Array:
        g = self.feature_groups * self.batch_groups
        y = _merge(jnp.transpose(y, self.out_spec), (1, 1, len(self.out_spatial)))  # (N, O, S)
        n, o, spatial = y.shape
        if g == 1:
            return _merge(y.transpose(0, 2, 1), (0, 2, 1))  # (1, N * S, O)
        y = y.reshape(n, g, o // g, spatial).transpose(1, 0, 3, 2)  # (G, N, S, O/G)
        return _merge(y, (1, 2, 1))  # (G, N * S, O/G)

    @property
    def out_shape(self) -> tuple[int, ...]:
        logical = (
            self.lhs_shape[self.lhs_spec[0]] // self.batch_groups,
            self.rhs_shape[self.rhs_spec[0]],
            *self.out_spatial,
        )
        return tuple(logical[i] for i in np.argsort(self.out_spec))

    @property
    def contraction(self) -> int:
        features = self.lhs_shape[self.lhs_spec[1]] // self.feature_groups
        return features * math.prod(self.window)

    @property
    def chunked(self) -> tuple[ConvGeometry, int, int] | None:
        return None  # K runs over input features and the window

    @property
    def plain(self) -> tuple[bool, bool]:
        return False, False  # im2col gathers the windows; the kernel is transposed

    @property
    def gathered(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Everything but the input's batch and the kernel's output features (windows cross shards);
        everything, with groups."""
        grouped = self.feature_groups > 1 or self.batch_groups > 1
        lhs = tuple(d for d in range(len(self.lhs_shape)) if d != self.lhs_spec[0] or grouped)
        return lhs, tuple(d for d in range(len(self.rhs_shape)) if d != self.rhs_spec[0] or grouped)


def conv_geometry(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    dimension_numbers: Any,
    feature_group_count: int,
    batch_group_count: int,
) -> ConvGeometry:
    """The geometry of `lax.conv_general_dilated` with these arguments; lax's own shape rules check them."""
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    spatial = len(lhs_shape) - 2
    for name, values in (
        ("window_strides", window_strides), ("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)
    ):  # fmt: skip
        if values is not None and not isinstance(values, str):
            for value in values:  # lax does not check these: a 0 would divide by zero below
                int_arg(value, name, minimum=1)
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
    geometry = ConvGeometry(
        lhs_shape, rhs_shape, strides, pads, lhs_dilation, rhs_dilation, tuple(dn.lhs_spec), tuple(dn.rhs_spec),
        tuple(dn.out_spec), int(feature_group_count), int(batch_group_count), tuple(out_spatial),
    )  # fmt: skip
    assert geometry.out_shape == tuple(expected), (geometry.out_shape, expected)
    return geometry
