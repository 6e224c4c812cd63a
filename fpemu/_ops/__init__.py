"""Layer 4, the operations: `quantize`, the bit codecs, and the emulated matmul/dot_general/conv."""
