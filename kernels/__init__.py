"""Pallas kernels, installed as ``fpemu.kernels``.

The fused quantize and quantized-matmul kernels are tracked in their own issue; this namespace exists
so that the package layout (``kernels/`` in the source tree, ``fpemu.kernels`` once installed) is in
place. It exports nothing yet.
"""

__all__: list[str] = []
