"""The transformer block the training-step benchmarks time (bench/test_scalify.py, bench/test_training.py,
bench/gpu_training_step.py): `fpemu.tools.models.TransformerBlock` at the sizes below.

A pre-LayerNorm block: 4-head attention, GELU MLP of width 4d; batch 8, sequence 128, d 256. ``step`` is
``jax.value_and_grad`` of a scalar loss followed by an SGD update of every parameter. bench/gpu_training_step.py
sets ``BATCH``, ``SEQ`` and ``D`` before it traces; every function here reads them when it is called.
"""

from __future__ import annotations

from fpemu.tools.models import TransformerBlock

BATCH, SEQ, D, HEADS = 8, 128, 256, 4
LR = 0.01


def _model() -> TransformerBlock:
    return TransformerBlock(batch=BATCH, seq=SEQ, d=D, heads=HEADS, lr=LR)


def block(params, x, attention_scope=None):
    """The block; ``attention_scope``: a ``jax.named_scope`` around the attention score and value
    products (``"attention"``: the scope the training recipes keep in high precision)."""
    return _model().block(params, x, attention_scope)


def loss(params, x, attention_scope=None):
    return _model().loss(params, x, attention_scope)


def step(params, x):
    """Every dot of the block unscoped: a training recipe quantizes the attention products too."""
    return _model().step(params, x)


def step_attention_kept(params, x):
    """`step` with the attention products under ``jax.named_scope("attention")``, as docs/training.md
    and Transformer Engine have them: a training recipe leaves them in high precision."""
    return _model().step(params, x, "attention")


def make_inputs():
    return _model().make_inputs()
