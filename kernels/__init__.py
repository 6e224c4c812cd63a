"""Pallas kernels, installed as ``fpemu.kernels``.

- `quantize`: `fpemu.quantize` as a fused Pallas kernel, bit-identical to the XLA path. Its tile
  sizes are `BlockSizes` (``fpemu.kernels.quantize`` is the function; the module's names are
  re-exported here).
- `quantized_matmul`: `fpemu.matmul` of 2-D operands as a Pallas kernel, with the operand,
  accumulator and output roundings fused in (``fpemu.kernels.matmul``). Its tile sizes are
  `MatmulBlockSizes`, also reachable as ``fpemu.kernels.matmul.BlockSizes``.

Both are tested in interpret mode on CPU; the compiled GPU paths are still to be verified on a
GPU. docs/kernels.md describes them.
"""

from fpemu.kernels.matmul import BlockSizes as MatmulBlockSizes
from fpemu.kernels.matmul import quantized_matmul
from fpemu.kernels.quantize import BlockSizes, quantize

__all__ = ["BlockSizes", "MatmulBlockSizes", "quantize", "quantized_matmul"]
