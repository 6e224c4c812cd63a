"""The QSNR table of docs/scaling.md: ``python -m fpemu.scaled._qsnr_table`` prints it (Markdown).

Every built-in recipe (and a few scale-rule and granularity variants) on three inputs of
256 x 4096 float32 values from a fixed seed: Gaussian, Student-t with 3 degrees of freedom (heavy
tails), and log-normal magnitudes with random signs (very wide dynamic range). Blocks and
per-slice scales run along the last axis. QSNR is computed in float64 from the fast path's output.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

import fpemu
from fpemu.scaled._quantize import quantize_dequantize
from fpemu.scaled._recipes import get_recipe, recipes

SHAPE = (256, 4096)
SEED = 20261121


def inputs(seed: int = SEED, shape: tuple[int, int] = SHAPE) -> dict[str, np.ndarray]:
    """The three test inputs, float32."""
    rng = np.random.default_rng(seed)
    lognormal = rng.lognormal(0.0, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    return {
        "Gaussian": rng.standard_normal(shape).astype(np.float32),
        "Student-t (df=3)": rng.standard_t(3, shape).astype(np.float32),
        "log-normal (sigma=2)": lognormal.astype(np.float32),
    }


def _qsnr64(x: np.ndarray, y: np.ndarray) -> float:
    x64, y64 = x.astype(np.float64), np.asarray(y).astype(np.float64)
    return float(10 * np.log10(np.sum(x64 * x64) / np.sum((x64 - y64) ** 2)))


def rows() -> list[tuple[str, str, object, dict]]:
    """(label, granularity, recipe, keyword arguments) for every row of the table."""
    out: list[tuple[str, str, object, dict]] = []
    for name in recipes():
        r = get_recipe(name)
        gran = f"blocks of {r.block_size}" if r.block_size else "per tensor"
        out.append((f"`{name}`", gran, r, {}))
        if r.block_size is None:
            out.append((f"`{name}`", "per row", r, {"axis": -1}))
    for name, rule in (("mxfp8_e4m3", "ceil"), ("mxfp4", "ceil"), ("mxfp4", "even"), ("mxfp6_e2m3", "ceil")):
        r = get_recipe(name)
        label = f"`{name}`, `scale_rule=\"{rule}\"`"
        out.append((label, f"blocks of {r.block_size}", dataclasses.replace(r, scale_rule=rule), {}))
    r = get_recipe("nvfp4")
    out.append(("`nvfp4`, no tensor scale", "blocks of 16", dataclasses.replace(r, global_scale=False), {}))
    return out


def table(seed: int = SEED, shape: tuple[int, int] = SHAPE) -> str:
    """The Markdown table: one row per recipe variant, one QSNR column (dB) per input."""
    data = inputs(seed, shape)
    head = "| recipe | scales | bits/element | " + " | ".join(data) + " |"
    lines = [head, "|---|---|---:|" + "---:|" * len(data)]
    for label, gran, recipe, kw in rows():
        cells = [f"{_qsnr64(x, quantize_dequantize(jnp.asarray(x), recipe, **kw)):.2f}" for x in data.values()]
        bits = recipe.bits_per_element
        lines.append(f"| {label} | {gran} | {bits:g} | " + " | ".join(cells) + " |")
    for fmt in ("e4m3fn", "e5m2", "e2m1fn"):  # unscaled baselines
        cells = [f"{_qsnr64(x, fpemu.quantize(jnp.asarray(x), fmt, saturate=True)):.2f}" for x in data.values()]
        bits = fpemu.get_format(fmt).bits
        lines.append(f"| `fpemu.quantize(x, \"{fmt}\", saturate=True)` | none | {bits} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(f"{SHAPE[0]} x {SHAPE[1]} float32 values, seed {SEED}; QSNR in dB (higher is better)\n")
    print(table())
