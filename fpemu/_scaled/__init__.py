"""The engine of the scaled formats: what `fpemu.scaled`'s public functions and the training layer's
operand quantizers both run, on arguments checked once.

- `block_format`: `BlockFormat` (block formats as data), the built-in table, `block_format_arg`;
- `bits`, `rne`, `scale`, `table`: exact float32 arithmetic on bit patterns, the scale rules, the
  float32 nearest-even rounding onto a block's grid, NVFP4's rounding by thresholds;
- `layout`: which elements share a scale (blocks and tiles in place), their maxima;
- `core`: encode, quantize-dequantize and its split form on a `Layout`;
- `cores`: the jitted, checked-once computations (`Config`, `quantize_ste`, `qdq_jit`, `split_core`,
  `scale_of_amax`) that `fpemu.scaled` calls after checking its arguments, and that
  `fpemu._training` calls with a `Config` made from a `Quantizer`.

`fpemu.scaled` is the public face: argument checks, `BlockArray`, delayed scaling, `matmul`,
metrics. docs/architecture.md has the layer map.
"""
