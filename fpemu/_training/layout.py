"""Where a GEMM operand's contraction axis is: its contracting dimensions merged into one axis ``K``.

A training recipe quantizes each operand along *that GEMM's* contraction: row-wise scales and 1-D
blocks run along ``K``, 2-D blocks tile the matrix (other dimensions, ``K``). `Contraction` maps an
operand to those views and back, with reshapes and (only where needed) one transpose:

- contracting dimensions that are consecutive and listed in increasing order are merged where they
  are (a reshape: every element keeps its row-major index, so stochastic rounding draws the same
  random bits as it would on the operand itself);
- otherwise they are moved last, in the order listed, and merged there.

Either way ``K`` runs row-major over the contracting dimensions in the order listed, which is how
`fpemu.dot_general` pairs them: element ``k`` of the lhs's ``K`` multiplies element ``k`` of the
rhs's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fpemu._args import int_arg
from fpemu._jax.elementwise import pad_zeros


def contracting_dims_arg(dims: Any, ndim: int, name: str = "contracting_dims") -> tuple[int, ...]:
    """The contracting dimensions of an operand of rank ``ndim``: ints, in range, no repeats; negative
    ones counted from the end. Errors name the argument."""
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        dims = (dims,)
    if not isinstance(dims, Sequence) or isinstance(dims, str):
        raise TypeError(f"{name} must be a sequence of ints, got {type(dims).__name__} {dims!r}")
    out = []
    for d in dims:
        d = int_arg(d, name)
        if not -ndim <= d < ndim:
            raise ValueError(f"{name}={tuple(dims)} is out of range for an operand of rank {ndim}")
        out.append(d % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}={tuple(dims)} repeats a dimension")
    return tuple(out)


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


class Contraction(NamedTuple):
    """An operand's shape and its contracting dimensions (non-negative, in the order listed)."""

    shape: tuple[int, ...]
    dims: tuple[int, ...]

    @property
    def others(self) -> tuple[int, ...]:
        """The other (batch and free) dimensions, in their order."""
        return tuple(d for d in range(len(self.shape)) if d not in self.dims)

    @property
    def k(self) -> int:
        """The length of the merged contraction axis (1 when there is no contracting dimension)."""
        return math.prod(self.shape[d] for d in self.dims)

    @property
    def rows(self) -> int:
        """The product of the other dimensions (the rows of the matrix view)."""
        return math.prod(self.shape[d] for d in self.others)

    @property
    def in_place(self) -> bool:
        """Whether the contracting dimensions are consecutive, increasing: merged without a transpose."""
        d = self.dims
        return bool(d) and d == tuple(range(d[0], d[0] + len(d)))

    def group(self, x: jax.Array) -> tuple[jax.Array, int]:
        """(``x`` with its contracting dimensions merged into one axis, that axis)."""
        if self.in_place:
            first, n = self.dims[0], len(self.dims)
            return x.reshape(self.shape[:first] + (self.k,) + self.shape[first + n :]), first
        moved = jnp.transpose(x, self.others + self.dims) if self.dims else x
        return moved.reshape(tuple(self.shape[d] for d in self.others) + (self.k,)), len(self.others)

    def ungroup(self, y: jax.Array) -> jax.Array:
        """The inverse of `group`."""
        if self.in_place:
            return y.reshape(self.shape)
        moved = y.reshape(tuple(self.shape[d] for d in self.others + self.dims))
        return jnp.transpose(moved, _inverse(self.others + self.dims)) if self.dims else moved

    def matrix(self, x: jax.Array) -> jax.Array:
        """``x`` as a (rows, K) matrix: the other dimensions merged in their order, then ``K``."""
        moved = jnp.transpose(x, self.others + self.dims)
        return moved.reshape(self.rows, self.k)

    def unmatrix(self, m: jax.Array) -> jax.Array:
        """The inverse of `matrix`."""
        moved = m.reshape(tuple(self.shape[d] for d in self.others + self.dims))
        return jnp.transpose(moved, _inverse(self.others + self.dims))


def tiles(m: jax.Array, b: int) -> jax.Array:
    """A (R, K) matrix as (ceil(R/b), ceil(K/b), b*b): each b x b tile's elements, row-major, along the
    last axis (zeros pad the matrix to whole tiles)."""
    r, k = m.shape
    rp, kp = -(-r // b) * b, -(-k // b) * b
    if (rp, kp) != (r, k):
        m = pad_zeros(m, ((0, rp - r), (0, kp - k)))
    return m.reshape(rp // b, b, kp // b, b).transpose(0, 2, 1, 3).reshape(rp // b, kp // b, b * b)


def untiles(t: jax.Array, b: int, shape: tuple[int, int]) -> jax.Array:
    """The inverse of `tiles` for a matrix of ``shape``."""
    rt, kt = t.shape[:2]
    m = t.reshape(rt, kt, b, b).transpose(0, 2, 1, 3).reshape(rt * b, kt * b)
    return m[: shape[0], : shape[1]]
