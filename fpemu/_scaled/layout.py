"""The group layout of scaled formats: which elements share a scale, their maxima, their broadcast.

A `Layout` names the axis the groups run along and their size there (``block``); a 2-D layout also
names a second axis (``tile_axis``) along which each group spans ``block`` elements too, so that a
group is a ``block x block`` tile of the matrix those two axes form (NVFP4's 2-D weight blocks).
Everything here works on the array in its own shape: a tile is two 1-D groupings composed, and no
element moves.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from fpemu._jax.elementwise import pad_zeros
from fpemu._jax.reduce import magnitude_max, run_max
from fpemu._ops.fusion import MATERIALIZE_MIN_SIZE, materialize


class Layout(NamedTuple):
    """Which elements share a scale: ``axis`` (non-negative, or None for the whole tensor) and
    ``block`` (elements per scale along the axis, or None for the whole slice); ``tile_axis``
    (non-negative, with a ``block``): groups also span ``block`` elements along it (square tiles)."""

    axis: int | None
    block: int | None
    tile_axis: int | None = None

    def along(self) -> tuple[Layout, ...]:
        """The 1-D layouts whose composition this is: along ``axis``, then along ``tile_axis``."""
        if self.tile_axis is None:
            return (self,)
        return Layout(self.axis, self.block), Layout(self.tile_axis, self.block)


def group_shape(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The shape of the scales: ``shape`` with the axis (and the tile axis) replaced by the number
    of groups along it (all ones for a per-tensor scale)."""
    for one in layout.along():
        shape = _group_shape(shape, one)
    return shape


def _group_shape(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    if layout.axis is None:
        return (1,) * len(shape)
    n = shape[layout.axis]
    groups = 1 if layout.block is None else -(-n // layout.block)
    return shape[: layout.axis] + (groups,) + shape[layout.axis + 1 :]


def group_max(u: jnp.ndarray, layout: Layout) -> jnp.ndarray:
    """Per-group maximum of uint32 magnitudes (0 for empty groups), in `group_shape`: of each block
    along the axis, then (tiles) of each block of those maxima along the tile axis. Written as
    XLA:CPU compiles it best (`fpemu._jax.reduce`): whole rows and whole tensors by `magnitude_max`,
    blocks along the last axis by `run_max`, blocks along another axis by `magnitude_max` over the
    block's axis."""
    for one in layout.along():
        u = _group_max(u, one)
    return u


def _group_max(u: jnp.ndarray, layout: Layout) -> jnp.ndarray:
    if layout.axis is None or layout.block is None:  # the whole tensor, or whole rows along the axis
        return magnitude_max(u, tuple(range(u.ndim)) if layout.axis is None else (layout.axis,))
    axis, block = layout.axis, layout.block
    n = u.shape[axis]
    groups = -(-n // block)
    if groups * block != n:  # a shorter last block: zeros do not change its amax
        pad = [(0, 0)] * u.ndim
        pad[axis] = (0, groups * block - n)
        u = pad_zeros(u, pad)
    if axis == u.ndim - 1:
        return run_max(u, block)
    blocked = u.reshape(u.shape[:axis] + (groups, block) + u.shape[axis + 1 :])
    return magnitude_max(blocked, (axis + 1,), keepdims=False)


def expand(g: jnp.ndarray, layout: Layout, shape: tuple[int, ...]) -> jnp.ndarray:
    """Broadcast per-group values back to the elements (tiles: along the tile axis, then the axis)."""
    if layout.tile_axis is not None:
        first, second = layout.along()
        g = _expand(g, second, group_shape(shape, first))
        return _expand(g, first, shape)
    return _expand(g, layout, shape)


def _expand(g: jnp.ndarray, layout: Layout, shape: tuple[int, ...]) -> jnp.ndarray:
    if layout.axis is None or layout.block is None:
        return jnp.broadcast_to(g, shape)
    axis, block = layout.axis, layout.block
    lead = shape[:axis]
    groups = g.shape[axis]
    # One broadcast: each group's value to its block (the new axis + 1), and per-tensor-like leading or
    # trailing dims of size 1, if any, to the elements' sizes.
    kept = (*range(axis + 1), *range(axis + 2, len(shape) + 1))
    blocked = lax.broadcast_in_dim(g, lead + (groups, block) + shape[axis + 1 :], kept)
    full = blocked.reshape(lead + (groups * block,) + shape[axis + 1 :])  # a broadcast, not a gather
    if groups * block != shape[axis]:
        full = lax.slice_in_dim(full, 0, shape[axis], axis=axis)
    return jnp.broadcast_to(full, shape)


class Work(NamedTuple):
    """The elementwise work runs in ``x``'s own shape; per-group values are broadcast to the elements (a
    broadcast-and-reshape that XLA vectorises; computing in a blocked ``(..., groups, block)`` shape
    instead makes XLA:CPU emit scalar index arithmetic). `per_element` materializes them first, which
    is for long chains only (`fpemu._ops.fusion`: each materialization costs compile time)."""

    shape: tuple[int, ...]
    layout: Layout
    probe: jnp.ndarray | None = None  # `materialize`'s probe: one shared by a GEMM's materializations

    def per_element(self, *groups: jnp.ndarray):
        """Group values (in `group_shape`) broadcast against the elements: one array, or a tuple."""
        return self.broadcast(*self.materialized(*groups))

    def materialized(self, *groups: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
        """``groups`` computed once (`materialize`), where the elements are many enough to be worth it and
        the groups are not the whole tensor (a per-tensor value is one scalar for the elements' loop:
        materialized, it cost compile time and made no step faster, bench/RESULTS_training.md)."""
        if self.layout.axis is not None and math.prod(self.shape) >= MATERIALIZE_MIN_SIZE:
            return materialize(groups, self.probe)  # small arrays: not worth the compile time
        return groups

    def broadcast(self, *groups: jnp.ndarray):
        """`per_element` without materializing: for groups that already are, slices of those, or values a
        few operations away from them, which the elements' loop recomputes more cheaply than a
        materialization compiles."""
        if self.layout.axis is None or self.layout.block is None:
            out = groups  # keepdims: they broadcast as they are
        else:
            out = tuple(expand(g, self.layout, self.shape) for g in groups)
        return out if len(out) > 1 else out[0]
