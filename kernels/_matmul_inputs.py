"""The matmul kernel's random inputs: the seed table of the keyed streams and the explicit random bits.

The kernel (`fpemu.kernels.matmul`) reads its random bits from one of two places. With a key, a
flat uint32 table holds a seed pair per stream (lhs, rhs, output, then one per accumulator chunk:
the XLA path's key split), and each tile hashes its elements' global indices. With explicit bits
(``random=``), each stream's bits are an input array tiled like what it rounds.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from fpemu._engine import rng
from fpemu._ops.matmul_config import KEY_ACC, KEY_LHS, KEY_OUT, KEY_RHS, MatmulConfig, chunk_key_words, key_streams
from fpemu.kernels._pallas import BlockSpec

# Rows of the seed table: the operand and output streams, then one row per accumulator chunk.
SEED_LHS, SEED_RHS, SEED_OUT, SEED_ACC0 = range(4)


def pow2_at_least(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()


def seed_table(key: jax.Array | None, cfg: MatmulConfig, chunks: int) -> jax.Array:
    """The seeds of every stream, flattened (padded to a power of two): the XLA path's key split."""
    zero = jnp.zeros((2,), jnp.uint32)
    streams = [zero, zero, zero]
    acc_rows = jnp.zeros((0, 2), jnp.uint32)
    if key is not None:
        keys = key_streams(key)
        if cfg.operands_stochastic:
            streams = [rng.seeds_from_key(keys[i]) for i in (KEY_LHS, KEY_RHS, KEY_OUT)]
        if cfg.accumulate_stochastic and chunks:
            acc_rows = jax.vmap(rng.seeds_from_key)(chunk_key_words(keys[KEY_ACC], chunks))
    table = jnp.concatenate([jnp.stack(streams), acc_rows]).reshape(-1)
    return jnp.pad(table, (0, pow2_at_least(table.shape[0]) - table.shape[0]))


def explicit_bits(
    random: dict[str, jax.Array],
    m: int,
    n: int,
    k: int,
    chunks: int,
    pads: tuple[int, int, int],
    blocks: tuple[int, int],
) -> tuple[list[jax.Array], list[Any]]:
    """The explicit random bits as kernel inputs, padded like the operands, with their block specs:
    ``"lhs"`` (M, K) and ``"rhs"`` (K, N) tiled as ``a`` and ``b``, ``"out"`` (M, N) as the output,
    and ``"accumulate"`` (chunks, M, N) as (M, N-blocks x chunks x block_n): each output tile's row
    holds its chunks side by side, so chunk ``j`` is the column slice ``[j * block_n, (j + 1) *
    block_n)`` of its block (a 2-D slice, as Triton wants)."""
    m_pad, n_pad, k_pad = pads
    bm, bn = blocks
    arrays, specs = [], []
    for name, bits in random.items():
        if name == "lhs":
            arrays.append(jnp.pad(jnp.broadcast_to(bits, (m, k)), ((0, m_pad - m), (0, k_pad - k))))
            specs.append(BlockSpec((bm, k_pad), lambda i, j: (i, 0)))
        elif name == "rhs":
            arrays.append(jnp.pad(jnp.broadcast_to(bits, (k, n)), ((0, k_pad - k), (0, n_pad - n))))
            specs.append(BlockSpec((k_pad, bn), lambda i, j: (0, j)))
        elif name == "out":
            arrays.append(jnp.pad(jnp.broadcast_to(bits, (m, n)), ((0, m_pad - m), (0, n_pad - n))))
            specs.append(BlockSpec((bm, bn), lambda i, j: (i, j)))
        else:
            rows = max(chunks, 1)  # no chunks (K = 0): one row of zeros that nothing reads
            acc = jnp.broadcast_to(bits, (chunks, m, n))
            acc = jnp.pad(acc, ((0, rows - chunks), (0, m_pad - m), (0, n_pad - n)))
            acc = acc.reshape(rows, m_pad, n_pad // bn, bn).transpose(1, 2, 0, 3).reshape(m_pad, -1)
            arrays.append(acc)
            specs.append(BlockSpec((bm, rows * bn), lambda i, j: (i, j)))
    return arrays, specs
