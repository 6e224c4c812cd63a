"""The matmul kernel's random inputs: the running sum's seeds per chunk, or its explicit random bits.

Only the running sum is rounded inside the kernel (the operands and the output are rounded by
`fpemu.quantize` around it, with the XLA path's random bits). With a key, a flat uint32 table holds
one seed pair per chunk (the XLA path's split of the running sum's stream), and each tile hashes
its elements' global indices. With explicit bits (``random=``), the running sum's bits are an input
array tiled like the output.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from fpemu._engine import rng
from fpemu._jax.pallas import BlockSpec
from fpemu._ops.matmul_config import KEY_ACC, MatmulConfig, chunk_key_words, key_streams


def pow2_at_least(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()


def seed_table(key: jax.Array | None, cfg: MatmulConfig, chunks: int) -> jax.Array:
    """The running sum's seeds, a pair per chunk, flattened and padded to a power of two (at least
    2): the XLA path's split of the running sum's stream; zeros when nothing draws from a key."""
    rows = jnp.zeros((0, 2), jnp.uint32)
    if key is not None and cfg.accumulate_stochastic and chunks:
        rows = jax.vmap(rng.seeds_from_key)(chunk_key_words(key_streams(key)[KEY_ACC], chunks))
    table = rows.reshape(-1)
    return jnp.pad(table, (0, pow2_at_least(max(table.shape[0], 2)) - table.shape[0]))


def accumulate_bits(
    bits: jax.Array, m: int, n: int, chunks: int, pads: tuple[int, int], blocks: tuple[int, int]
) -> tuple[jax.Array, Any]:
    """The running sum's explicit bits, ``(chunks, M, N)``, as a kernel input with its block spec: laid
    out as (M, N-blocks x chunks x block_n), so that each output tile's row holds its chunks side
    by side and chunk ``j`` is the column slice ``[j * block_n, (j + 1) * block_n)`` of its block (a
    2-D slice, as Triton wants)."""
    m_pad, n_pad = pads
    bm, bn = blocks
    rows = max(chunks, 1)  # no chunks (K = 0): one row of zeros that nothing reads
    acc = jnp.broadcast_to(bits, (chunks, m, n))
    acc = jnp.pad(acc, ((0, rows - chunks), (0, m_pad - m), (0, n_pad - n)))
    acc = acc.reshape(rows, m_pad, n_pad // bn, bn).transpose(1, 2, 0, 3).reshape(m_pad, -1)
    return acc, BlockSpec((bm, rows * bn), lambda i, j: (i, j))
