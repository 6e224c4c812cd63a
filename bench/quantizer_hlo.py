"""The block quantizers the training recipes run, one at a time: optimized HLO size, compile time, run time.

Usage::

    PYTHONPATH=. python3 bench/quantizer_hlo.py [--rows "mxfp8 e4m3,nvfp4 1x16 split,..."] [--runs 5] [--small]

Each row is one call of `fpemu.scaled.quantize_dequantize` or `fpemu.scaled.quantize_dequantize_split`
(``split``) with the block format and options a training recipe's operand quantizer passes
(`fpemu._training.quantize_operand`), on a float32 array of shape (8, 128, 1024) (the 2-D tiles on the
(1024, 1024) matrix; ``--small``: (64, 128) and (128, 128), the digits MLP's sizes, below
`fpemu._ops.fusion.MATERIALIZE_MIN_SIZE`, where per-group values are not materialized), beside ``x.astype(bf16).astype(f32)``. Columns: the optimized HLO text's lines
and instructions (``jax.jit(f).lower(x).compile().as_text()``), the lower + compile time of a fresh
function with every JAX cache cleared, and the median run time over ``--runs`` calls. Compile and
run times are as noisy as the machine: compare rows of one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fpemu import scaled
from fpemu._training.quantizer import Quantizer
from fpemu.tools.bench import machine_line

SHAPE = (8, 128, 1024)
MATRIX = (1024, 1024)
KEY = jax.random.key(0)


def _quantizer_call(q: Quantizer, *, split: bool, tiles: bool = False) -> tuple[Callable[[Any], Any], tuple[int, ...]]:
    """The scaled call a training operand quantizer makes (its block format and options), and its input shape.
    ``tiles``: a ``"block"`` quantizer's block format on 2-D tiles of side ``block_size`` (as a ``"block_2d"``
    quantizer of a matrix quantizes)."""
    fmt = q.block_format
    kw: dict[str, Any] = {"rounding": q.rounding, "pad": True}
    if q.rounding == "stochastic":
        kw.update(key=KEY, random_bits=q.random_bits)
    if q.scaling in ("tensor", "delayed"):
        kw["axis"] = None
    if q.scaling == "delayed":
        kw["scale"] = np.float32(2.0**-3)
    if tiles:
        kw["tile_axis"] = 0
    fn = scaled.quantize_dequantize_split if split else scaled.quantize_dequantize
    return (lambda x: fn(x, fmt, **kw)), (MATRIX if tiles else SHAPE)


def rows() -> dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]]:
    """Every row by name: (the function of x, x's shape)."""
    e4m3, e5m2, e8m0 = "e4m3fn", "e5m2", "e8m0fnu"
    mx = {"block_size": 32, "scale_format": e8m0, "scale_rule": "ocp", "scaling": "block"}
    nv = Quantizer(format="e2m1fn", scaling="block", block_size=16, scale_format=e4m3, tensor_scale=True)
    block = Quantizer(format=e4m3, scaling="block", block_size=128, scale_rule="ceil")
    table: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
        "bf16 round trip": (lambda x: x.astype(jnp.bfloat16).astype(jnp.float32), SHAPE),
        "fp8_current e4m3 split": _quantizer_call(Quantizer(format=e4m3, scaling="tensor"), split=True),
        "fp8_current e5m2 split": _quantizer_call(Quantizer(format=e5m2, scaling="tensor"), split=True),
        "fp8_current e4m3": _quantizer_call(Quantizer(format=e4m3, scaling="tensor"), split=False),
        "fp8_delayed e4m3 split": _quantizer_call(Quantizer(format=e4m3, scaling="delayed"), split=True),
        "fp8_rowwise e4m3": _quantizer_call(Quantizer(format=e4m3, scaling="row", scale_rule="ceil"), split=False),
        "fp8_blockwise 1x128": _quantizer_call(block, split=False),
        "fp8_blockwise 128x128": _quantizer_call(block, split=False, tiles=True),
        "mxfp8 e4m3": _quantizer_call(Quantizer(format=e4m3, **mx), split=False),
        "mxfp8 e5m2": _quantizer_call(Quantizer(format=e5m2, **mx), split=False),
        "mxfp6 e2m3": _quantizer_call(Quantizer(format="e2m3fn", **mx), split=False),
        "mxfp6 e3m2": _quantizer_call(Quantizer(format="e3m2fn", **mx), split=False),
        "mxfp4": _quantizer_call(Quantizer(format="e2m1fn", **mx), split=False),
        "nvfp4 1x16": _quantizer_call(nv, split=False),
        "nvfp4 1x16 split": _quantizer_call(nv, split=True),
        "nvfp4 16x16 split": _quantizer_call(nv, split=True, tiles=True),
        "nvfp4 stochastic split": _quantizer_call(dataclasses.replace(nv, rounding="stochastic"), split=True),
    }
    return table


def hlo_size(text: str) -> tuple[int, int]:
    """(lines, instructions) of an HLO module's text: instructions are the lines that assign a value."""
    lines = text.splitlines()
    return len(lines), sum(" = " in line for line in lines)


def measure(fn: Callable[[Any], Any], shape: tuple[int, ...], runs: int) -> dict[str, float]:
    """HLO size, lower + compile seconds (fresh function, caches cleared) and median run seconds."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    jax.clear_caches()
    t0 = time.perf_counter()
    compiled = jax.jit(lambda v: fn(v)).lower(x).compile()
    compile_s = time.perf_counter() - t0
    lines, instructions = hlo_size(compiled.as_text())
    jax.block_until_ready(compiled(x))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(x))
        times.append(time.perf_counter() - t0)
    return {"lines": lines, "instructions": instructions, "compile": compile_s, "run": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="(64, 128) and (128, 128) inputs")
    args = parser.parse_args()
    if args.small:
        global SHAPE, MATRIX
        SHAPE, MATRIX = (64, 128), (128, 128)
    table = rows()
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()] or list(table)
    print(machine_line())
    print("\n| row | HLO lines | HLO instructions | lower+compile s | run ms |")
    print("|---|---:|---:|---:|---:|")
    for name in wanted:
        fn, shape = table[name]
        m = measure(fn, shape, args.runs)
        print(
            f"| {name} | {m['lines']} | {m['instructions']} | {m['compile']:.2f} | {m['run'] * 1e3:.2f} |", flush=True
        )


if __name__ == "__main__":
    main()
