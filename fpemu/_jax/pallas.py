"""The one place that imports version-specific Pallas names (the Pallas API moves between JAX releases).

Checked against jax 0.10.0, 0.10.1, 0.10.2, 0.11.0, 0.11.1, 0.11.2 and 0.12.0.1:
``jax.experimental.pallas`` provides ``pallas_call``, ``BlockSpec``, ``program_id`` and ``ds`` (a
dynamic slice ``ds(start, size)`` for indexing refs, e.g. ``a_ref[:, ds(k * block_k, block_k)]``; an
alias of ``pl.dslice``), and ``jax.experimental.pallas.triton`` provides ``CompilerParams`` (here
``TritonCompilerParams``) and ``elementwise_inline_asm`` (a PTX snippet run on each element;
compiled kernels only).

On GPUs, these releases lower a ``pallas_call`` without compiler parameters to Mosaic GPU, not
Triton (``jax_pallas_use_mosaic_gpu`` defaults to True). Kernels written for Triton pass
``compiler_params=TritonCompilerParams(...)``, which selects the Triton backend; interpret mode
ignores it. fpemu's kernels (`fpemu._ops.quantize_pallas`, `fpemu.kernels`) import these names from
here, never from Pallas directly; importing this module loads Pallas, so `fpemu.quantize` imports
it only for ``backend="pallas"``.

Two facts of newer releases (docs/kernels.md, "Triton on new JAX"):

- From jax 0.11, lowering a Triton kernel emits ``DeprecationWarning: The Pallas Triton backend is
  deprecated`` (pyproject.toml's pytest filters ignore exactly that message, and say when it must go).
  The backend still works in jax 0.12; the kernels move when JAX announces its removal.
- From jax 0.11, lowering for ``"cuda"`` reads the GPU's kind (for its compute capability): on a
  machine without a GPU it comes from an abstract device (`lowering_for_gpu`).
"""

import contextlib
from collections.abc import Iterator

import jax
from jax.experimental import pallas as _pl
from jax.experimental.pallas import triton as _pl_triton

pallas_call = _pl.pallas_call
BlockSpec = _pl.BlockSpec
program_id = _pl.program_id
ds = _pl.ds
TritonCompilerParams = _pl_triton.CompilerParams
elementwise_inline_asm = _pl_triton.elementwise_inline_asm

_JAX_RELEASE = tuple(int(part) for part in jax.__version__.split(".")[:2])


@contextlib.contextmanager
def lowering_for_gpu(device_kind: str = "NVIDIA H100") -> Iterator[None]:
    """A context in which ``fn.trace(...).lower(lowering_platforms=("cuda",))`` lowers Pallas kernels for a
    GPU of ``device_kind`` on any machine: from jax 0.11 Triton's lowering reads the GPU's kind, from an
    abstract device where there is no GPU (an abstract mesh of one device, its axis Explicit, as
    ``jax.sharding.use_abstract_mesh`` requires); jax 0.10 reads nothing (a no-op). Arguments lowered
    in it should be ``jax.ShapeDtypeStruct``s: they belong to no concrete device."""
    sharding = jax.sharding
    if _JAX_RELEASE < (0, 11):  # an abstract mesh makes jax 0.10.1's lowering see two platforms, and fail
        yield
        return
    device = sharding.AbstractDevice(device_kind=device_kind, num_cores=None, platform="cuda")
    mesh = sharding.AbstractMesh((1,), ("gpu",), (sharding.AxisType.Explicit,), abstract_device=device)
    with sharding.use_abstract_mesh(mesh):
        yield


__all__ = [
    "BlockSpec",
    "TritonCompilerParams",
    "ds",
    "elementwise_inline_asm",
    "lowering_for_gpu",
    "pallas_call",
    "program_id",
]
