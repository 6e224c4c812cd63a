"""The one place that imports version-specific Pallas names (the Pallas API moves between JAX releases).

Checked against jax 0.10.2: ``jax.experimental.pallas`` provides ``pallas_call``, ``BlockSpec``,
``program_id`` and ``ds`` (a dynamic slice ``ds(start, size)`` for indexing refs, e.g.
``a_ref[:, ds(k * block_k, block_k)]``; an alias of ``pl.dslice``), and
``jax.experimental.pallas.triton`` provides ``CompilerParams`` (here ``TritonCompilerParams``).

On GPUs, jax 0.10.2 lowers a ``pallas_call`` without compiler parameters to Mosaic GPU, not Triton
(``jax_pallas_use_mosaic_gpu`` defaults to True, and ``pallas_call`` for Mosaic GPU is deprecated).
Kernels written for Triton pass ``compiler_params=TritonCompilerParams(...)``, which selects the
Triton backend; interpret mode ignores it. Kernel modules import these names from here, never
from Pallas directly.
"""

from jax.experimental import pallas as _pl
from jax.experimental.pallas import triton as _pl_triton

pallas_call = _pl.pallas_call
BlockSpec = _pl.BlockSpec
program_id = _pl.program_id
ds = _pl.ds
TritonCompilerParams = _pl_triton.CompilerParams

__all__ = ["BlockSpec", "TritonCompilerParams", "ds", "pallas_call", "program_id"]
