"""The QSNR table of docs/scaling.md: ``python bench/qsnr_table.py`` prints it (Markdown).

Every built-in block format (and a few scale-rule and granularity variants) on three inputs of
256 x 4096 float32 values from a fixed seed: Gaussian, Student-t with 3 degrees of freedom (heavy
tails), and log-normal magnitudes with random signs (very wide dynamic range). Blocks and
per-slice scales run along the last axis. QSNR is `fpemu.scaled.qsnr` of the fast path's output.
Only the public API is used (`fpemu`, `fpemu.scaled`, and `fpemu.testing.text_table` for the table).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu import scaled
from fpemu.testing import text_table

SHAPE = (256, 4096)
SEED = 20261121
COLUMNS = ("block format", "scales", "bits/element")  # then one QSNR column per input


def inputs(seed: int = SEED, shape: tuple[int, int] = SHAPE) -> dict[str, np.ndarray]:
    """The three test inputs, float32."""
    rng = np.random.default_rng(seed)
    lognormal = rng.lognormal(0.0, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    return {
        "Gaussian": rng.standard_normal(shape).astype(np.float32),
        "Student-t (df=3)": rng.standard_t(3, shape).astype(np.float32),
        "log-normal (sigma=2)": lognormal.astype(np.float32),
    }


def _db(x: np.ndarray, y: jax.Array) -> str:
    return f"{float(scaled.qsnr(x, y)):.2f}"


def rows() -> list[tuple[str, str, scaled.BlockFormat, dict]]:
    """(label, granularity, block format, keyword arguments) for every row of the table."""
    out: list[tuple[str, str, scaled.BlockFormat, dict]] = []
    for name in scaled.block_formats():
        bf = scaled.get_block_format(name)
        gran = f"blocks of {bf.block_size}" if bf.block_size else "per tensor"
        out.append((f"`{name}`", gran, bf, {}))
        if bf.block_size is None:
            out.append((f"`{name}`", "per row", bf, {"axis": -1}))
    for name, rule in (("mxfp8_e4m3", "ceil"), ("mxfp4", "ceil"), ("mxfp4", "even"), ("mxfp6_e2m3", "ceil")):
        bf = scaled.get_block_format(name)
        label = f'`{name}`, `scale_rule="{rule}"`'
        out.append((label, f"blocks of {bf.block_size}", dataclasses.replace(bf, scale_rule=rule), {}))
    bf = scaled.get_block_format("nvfp4")
    out.append(("`nvfp4`, no tensor scale", "blocks of 16", dataclasses.replace(bf, global_scale=False), {}))
    return out


def table(seed: int = SEED, shape: tuple[int, int] = SHAPE) -> str:
    """The Markdown table: one row per block format variant, one QSNR column (dB) per input."""
    data = inputs(seed, shape)
    body = []
    for label, gran, block_format, kw in rows():
        cells = [_db(x, scaled.quantize_dequantize(jnp.asarray(x), block_format, **kw)) for x in data.values()]
        body.append([label, gran, f"{block_format.bits_per_element:g}", *cells])
    for fmt in ("e4m3fn", "e5m2", "e2m1fn"):  # unscaled baselines
        cells = [_db(x, fpemu.quantize(jnp.asarray(x), fmt, saturate=True)) for x in data.values()]
        body.append([f'`fpemu.quantize(x, "{fmt}", saturate=True)`', "none", fpemu.get_format(fmt).bits, *cells])
    header = [*COLUMNS, *data]
    return text_table(body, header, align="llr" + "r" * len(data), markdown=True)


if __name__ == "__main__":  # pragma: no cover
    print(f"{SHAPE[0]} x {SHAPE[1]} float32 values, seed {SEED}; QSNR in dB (higher is better)\n")
    print(table())
