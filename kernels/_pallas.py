"""The one place that imports version-specific Pallas names (the Pallas API moves between JAX releases).

Checked against jax 0.10.2: ``jax.experimental.pallas`` provides ``pallas_call``, ``BlockSpec``,
``program_id`` and ``ds`` (a dynamic slice ``ds(start, size)`` for indexing refs, e.g.
``a_ref[:, ds(k * block_k, block_k)]``; an alias of ``pl.dslice``), and
``jax.experimental.pallas.triton`` provides ``CompilerParams`` (here ``TritonCompilerParams``).

On GPUs, jax 0.10.2 lowers a ``pallas_call`` without compiler parameters to Mosaic GPU, not Triton
(``jax_pallas_use_mosaic_gpu`` defaults to True, and ``pallas_call`` for Mosaic GPU is deprecated).
Kernels written for Triton pass ``compiler_params=TritonCompilerParams(...)``, which selects the
Triton backend; interpret mode ignores it. Kernel modules import these names from here, never
from Pallas directly. Because the kernels are written for Triton, this module also holds the one
rule about where they compile (`interpret_mode`), from the platform that the ops layer's backend
table names for them (`COMPILED_PLATFORM`, re-exported here).
"""

from typing import Any

import numpy as np
from jax.experimental import pallas as _pl
from jax.experimental.pallas import triton as _pl_triton

from fpemu._ops.quantize import COMPILED_PLATFORM

pallas_call = _pl.pallas_call
BlockSpec = _pl.BlockSpec
program_id = _pl.program_id
ds = _pl.ds
TritonCompilerParams = _pl_triton.CompilerParams


def interpret_mode(interpret: Any, platform: str, *, kernel: str, xla_path: str) -> bool:
    """The validated ``interpret=`` of a kernel wrapper: None means interpret mode unless the
    platform compiles Pallas kernels; ``interpret=False`` elsewhere is a ValueError naming the
    kernel and its XLA counterpart."""
    if interpret is None:
        return platform != COMPILED_PLATFORM
    if not isinstance(interpret, (bool, np.bool_)):
        raise TypeError(f"interpret must be a bool or None, got {interpret!r}")
    if not interpret and platform != COMPILED_PLATFORM:
        raise ValueError(
            f"interpret=False: {kernel} compiles for GPUs (Triton) only, and the default backend is {platform!r}; "
            f"pass interpret=True (or None), or use {xla_path}"
        )
    return bool(interpret)


__all__ = [
    "COMPILED_PLATFORM",
    "BlockSpec",
    "TritonCompilerParams",
    "ds",
    "interpret_mode",
    "pallas_call",
    "program_id",
]
