"""Pallas kernels, installed as ``fpemu.kernels``.

- `quantize_kernel`: `fpemu.quantize` as a fused Pallas kernel, bit-identical to the XLA path
  (module ``fpemu.kernels.quantize``). Its tile sizes are `QuantizeBlockSizes`, also reachable as
  ``fpemu.kernels.quantize.BlockSizes``.
- `matmul_kernel`: `fpemu.matmul` of 2-D operands as a Pallas kernel, for a running sum in a narrow
  format: the sum and its roundings fused in one pass (module ``fpemu.kernels.matmul``). Its tile sizes are
  `MatmulBlockSizes`, also reachable as ``fpemu.kernels.matmul.BlockSizes``.

Each module also has a plain-JAX reference with its kernel's semantics (``quantize_reference``,
``matmul_kernel_reference``). Both kernels are tested in interpret mode on CPU and have run compiled
on an H200 (bench/RESULTS_gpu.md). docs/kernels.md describes them.
"""

from fpemu.kernels.matmul import BlockSizes as MatmulBlockSizes
from fpemu.kernels.matmul import matmul_kernel
from fpemu.kernels.quantize import BlockSizes as QuantizeBlockSizes
from fpemu.kernels.quantize import quantize_kernel

__all__ = ["MatmulBlockSizes", "QuantizeBlockSizes", "matmul_kernel", "quantize_kernel"]
