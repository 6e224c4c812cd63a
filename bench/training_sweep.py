"""Every training recipe's step on a small model: compile time by phase and step time, beside fp32 and emulated bf16.

Usage::

    PYTHONPATH=. python3 bench/training_sweep.py [--model MODEL] [--recipes fp8_current,mxfp8,...]
                                                 [--rounds 15] [--forms dot,bf16+dot] [--compiles N] [--json FILE]

The same as ``fpemu sweep`` (`fpemu.tools.sweep`, which docs/benchmarks.md describes), kept under this name
for the commands recorded in bench/RESULTS_training.md and bench/training_ab.sh. The models are
`fpemu.tools.models`' (``--model``: ``mlp``, ``transformer``, ``transformer4``, ``transformer4-scan``): the
digits MLP (64-128-128-10, batch 64, an Adam step with the operations of optax's ``adam(1e-3)``, the same
bits), the transformer block of bench/transformer_block.py, four such blocks in a row, and the same four run
by ``jax.lax.scan``.
"""

from __future__ import annotations

import sys

from fpemu.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
