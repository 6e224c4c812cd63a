"""Pallas kernels, installed as ``fpemu.kernels``.

- `quantize`: `fpemu.quantize` as a fused Pallas kernel, bit-identical to the XLA path (tested in
  interpret mode on CPU; the compiled GPU path is still to be verified on a GPU).

The quantized-matmul kernel is still to come (see the kernels issue).
"""

from fpemu.kernels.quantize import BlockSizes, quantize

__all__ = ["BlockSizes", "quantize"]
