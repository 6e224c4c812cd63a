"""A small decoder-only transformer that learns two-digit addition, character by character.

The data is generated here (nothing is downloaded): lines such as ``"37+48=85;"`` over the vocabulary
``0123456789+=;`` plus a padding token, every line padded to one length. The model is a 2-layer
pre-LayerNorm decoder (d_model 64, 4 heads, MLP 256, learned positions, causal attention under
``jax.named_scope("attention")``), trained with Adam on float32 master weights, from one
initialisation, in several precisions:

- ``fp32``: plain float32.
- ``bf16``: the whole step under ``fpemu.emulate(jax.value_and_grad(loss), "bf16")``.
- a training recipe name (``fp8_current``, ``mxfp8``, ``nvfp4``, ... `fpemu.TRAINING_RECIPES`): the
  step under ``fpemu.emulate(jax.value_and_grad(loss), fpemu.Policy(dot=name), key=key)``: every
  matmul of the forward and backward pass quantized as the recipe says, the rest in float32.
- ``scalify_fp16``: parameters and activations as `fpemu.scalify.ScaledArray`s with float16 data
  and power-of-two float32 scales (``jax.jit(scalify(value_and_grad(loss)))``); the gradients are
  unscaled into the float32 Adam update.

The loss reported is the mean cross-entropy of the answer characters (after ``=``), and the
accuracy is the fraction of test lines whose whole answer is predicted right (greedy, teacher-forced).

Run: python examples/char_transformer.py [--steps N] [--precisions fp32,bf16,mxfp8,...] [--plot FILE]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import fpemu
import fpemu.scalify as jsa

VOCAB = "0123456789+=;_"  # "_" pads
PAD = VOCAB.index("_")
EQUALS = VOCAB.index("=")
LENGTH = 10  # "99+99=198;" is the longest line
D_MODEL, HEADS, D_MLP, LAYERS = 64, 4, 256, 2


# -- data ---------------------------------------------------------------------------------------------


def make_data(seed: int = 0, n_test: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Every ``a+b=c;`` with a, b in [0, 100), shuffled with ``seed``: (train, test) int32 token arrays."""
    lines = [f"{a}+{b}={a + b};" for a in range(100) for b in range(100)]
    tokens = np.full((len(lines), LENGTH), PAD, np.int32)
    for i, line in enumerate(lines):
        tokens[i, : len(line)] = [VOCAB.index(c) for c in line]
    order = np.random.default_rng(seed).permutation(len(lines))
    return tokens[order[n_test:]], tokens[order[:n_test]]


def answer_mask(tokens: jax.Array) -> jax.Array:
    """1.0 where the *next* token is part of the answer (after "=", up to and including ";")."""
    after_equals = jnp.cumsum(tokens == EQUALS, axis=1) > 0
    targets_valid = tokens[:, 1:] != PAD
    return (after_equals[:, :-1] & targets_valid).astype(jnp.float32)


# -- model --------------------------------------------------------------------------------------------


def init_params(seed: int = 0) -> dict:
    """Float32 parameters: embeddings, per-layer attention and MLP weights, LayerNorm gains."""
    rng = np.random.default_rng(seed)

    def dense(m: int, n: int) -> np.ndarray:
        return (rng.standard_normal((m, n)) / math.sqrt(m)).astype(np.float32)

    params: dict = {
        "embed": (rng.standard_normal((len(VOCAB), D_MODEL)) * 0.5).astype(np.float32),
        "position": (rng.standard_normal((LENGTH, D_MODEL)) * 0.1).astype(np.float32),
        "out_norm": np.ones((D_MODEL,), np.float32),
        "unembed": dense(D_MODEL, len(VOCAB)),
    }
    for i in range(LAYERS):
        params[f"layer{i}"] = {
            "norm1": np.ones((D_MODEL,), np.float32), "norm2": np.ones((D_MODEL,), np.float32),
            "qkv": dense(D_MODEL, 3 * D_MODEL), "proj": dense(D_MODEL, D_MODEL),
            "up": dense(D_MODEL, D_MLP), "down": dense(D_MLP, D_MODEL),
        }  # fmt: skip
    return jax.tree.map(jnp.asarray, params)


def _norm(x: jax.Array, gain: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gain


def _attention(x: jax.Array, layer: dict) -> jax.Array:
    batch, length, _ = x.shape
    qkv = (x @ layer["qkv"]).reshape(batch, length, 3, HEADS, D_MODEL // HEADS)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    with jax.named_scope("attention"):  # the score and value products: high precision in the recipes
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D_MODEL // HEADS)
        # A causal softmax without a huge negative constant (which float16 and scale propagation cannot
        # hold): masked scores replaced by the row's minimum, shifted by the largest *visible* score (so
        # that every denominator is at least 1), exponentiated, multiplied by the mask, normalised.
        causal = jnp.tril(jnp.ones((length, length), scores.dtype))
        visible = jnp.where(causal > 0, scores, jnp.min(scores, axis=-1, keepdims=True))
        e = jnp.exp(visible - jax.lax.stop_gradient(jnp.max(visible, axis=-1, keepdims=True))) * causal
        weights = e / jnp.sum(e, axis=-1, keepdims=True)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, length, D_MODEL)
    return mixed @ layer["proj"]


def logits(params: dict, tokens: jax.Array) -> jax.Array:
    """(batch, LENGTH - 1, vocabulary) next-token logits for every position but the last."""
    x = params["embed"][tokens[:, :-1]] + params["position"][: LENGTH - 1]
    for i in range(LAYERS):
        layer = params[f"layer{i}"]
        x = x + _attention(_norm(x, layer["norm1"]), layer)
        x = x + jax.nn.gelu(_norm(x, layer["norm2"]) @ layer["up"]) @ layer["down"]
    return _norm(x, params["out_norm"]) @ params["unembed"]


def loss(params: dict, tokens: jax.Array) -> jax.Array:
    """Mean cross-entropy of the answer characters."""
    logp = jax.nn.log_softmax(logits(params, tokens), axis=-1)
    picked = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    mask = answer_mask(tokens)
    return -jnp.sum(picked * mask) / jnp.sum(mask)


def accuracy(params: dict, tokens: np.ndarray) -> float:
    """The fraction of lines whose every answer character is the most likely one (float32 evaluation)."""
    tokens = jnp.asarray(tokens)
    right = (jnp.argmax(logits(params, tokens), axis=-1) == tokens[:, 1:]) | (answer_mask(tokens) == 0)
    return float(jnp.mean(jnp.all(right, axis=1)))


# -- precisions ---------------------------------------------------------------------------------------

GradFn = Callable[..., tuple[jax.Array, dict, dict]]  # (params, tokens, key, state) -> (loss, grads, state)


def recipe_grad(value_and_grad: Callable, precision: str) -> tuple[GradFn, Callable[..., dict]]:
    """A training recipe's ``(compute, init_state)`` for a ``value_and_grad`` function of ``args``:
    ``compute(*args, key, state) -> (value, grads, state)`` runs it under
    ``fpemu.emulate(value_and_grad, fpemu.Policy(dot=precision))``, with the key only where the recipe
    rounds stochastically (nvfp4) and the amax histories threaded through where it scales with
    them (fp8_delayed: ``emulate(..., state=True)``); ``init_state(*args)`` is the first state."""
    policy = fpemu.Policy(dot=precision)

    def compute(*args: Any) -> tuple[jax.Array, dict, dict]:
        *args, key, state = args
        emulated = fpemu.emulate(value_and_grad, policy, key=key if policy.stochastic else None, state=policy.stateful)
        if policy.stateful:
            (value, grads), state = emulated(state, *args)
        else:
            value, grads = emulated(*args)
        return value, grads, state

    def init_state(*args: Any) -> dict:
        return fpemu.init_training_state(value_and_grad, policy, *args) if policy.stateful else {}

    return compute, init_state


def _unit_scaled_fp16(p: jax.Array) -> jsa.ScaledArray:
    """A float32 parameter as float16 data near 1 under a float32 scale: its RMS, rounded down to a
    power of two (docs/scalify.md, "Training a transformer")."""
    return jsa.ops.dynamic_rescale_l2(jsa.as_scaled_array(p, scale=np.float32(1))).astype(jnp.float16)


def _scalify_fp16(params: dict, tokens: jax.Array) -> tuple[jax.Array, dict]:
    """(loss, float32 gradients) with parameters and activations as float16 ScaledArrays."""
    scaled = jax.tree.map(_unit_scaled_fp16, params)
    value, grads = jsa.scalify(jax.value_and_grad(loss))(scaled, tokens)
    unscaled = jax.tree.map(lambda g: jsa.asarray(g, jnp.float32), grads, is_leaf=jsa.core.is_scaled_leaf)
    return jsa.asarray(value, jnp.float32), unscaled


def grad_fn(precision: str) -> tuple[GradFn, Callable[..., dict]]:
    """``(compute, init_state)`` of a precision name (see the module docstring):
    ``compute(params, tokens, key, state) -> (loss, grads, state)``, ``init_state(params, tokens)``."""
    value_and_grad = jax.value_and_grad(loss)

    def stateless(fn: Callable) -> tuple[GradFn, Callable[..., dict]]:
        return (lambda params, tokens, key, state: (*fn(params, tokens), state)), (lambda *args: {})

    if precision == "fp32":
        return stateless(value_and_grad)
    if precision == "bf16":
        return stateless(fpemu.emulate(value_and_grad, "bf16"))
    if precision == "scalify_fp16":
        return stateless(_scalify_fp16)
    if precision in fpemu.TRAINING_RECIPES:
        return recipe_grad(value_and_grad, precision)
    choices = ("fp32", "bf16", "scalify_fp16", *fpemu.TRAINING_RECIPES)
    raise ValueError(f"precision must be one of {', '.join(choices)}; got {precision!r}")


PRECISIONS = ("fp32", "bf16", "scalify_fp16")  # the training recipes are added from fpemu.TRAINING_RECIPES


def adam(lr: float, b1: float = 0.9, b2: float = 0.98, eps: float = 1e-8):
    """A plain Adam on float32 master weights: (init, update)."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return (zeros, zeros, jnp.zeros((), jnp.int32))

    def update(params, grads, state):
        m, v, t = state
        t = t + 1
        m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        correction = jnp.sqrt(1 - b2**t) / (1 - b1**t)
        params = jax.tree.map(lambda p, m_, v_: p - lr * correction * m_ / (jnp.sqrt(v_) + eps), params, m, v)
        return params, (m, v, t)

    return init, update


def train(precision: str, data, *, steps: int, batch: int = 128, lr: float = 3e-3, seed: int = 0) -> dict:
    """Train from ``init_params(seed)``; returns the loss curve, the final test loss and accuracy."""
    train_tokens, test_tokens = data
    params = init_params(seed)
    init, update = adam(lr)
    opt = init(params)
    compute, init_state = grad_fn(precision)

    @jax.jit
    def step(params, opt, tokens, key, state):
        value, grads, state = compute(params, tokens, key, state)
        params, opt = update(params, grads, opt)
        return params, opt, value, state

    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    state = init_state(params, jnp.asarray(train_tokens[:batch]))
    losses = []
    for i in range(steps):
        tokens = jnp.asarray(train_tokens[rng.integers(0, len(train_tokens), batch)])
        params, opt, value, state = step(params, opt, tokens, jax.random.fold_in(key, i), state)
        losses.append(float(value))
    return {
        "losses": losses,
        "test_loss": float(loss(params, jnp.asarray(test_tokens))),
        "test_accuracy": accuracy(params, test_tokens),
    }


def plot(results: dict, path: str) -> bool:
    """The loss curves of every precision in one PNG (False without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        ax.plot(result["losses"], label=f"{name} (test acc {result['test_accuracy']:.1%})", linewidth=1.2)
    ax.set(xlabel="step", ylabel="answer cross-entropy", yscale="log", title="2-layer transformer, 2-digit addition")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--precisions", default=",".join((*PRECISIONS, *fpemu.TRAINING_RECIPES)))
    parser.add_argument("--plot", default=None, help="write the loss curves to this PNG")
    args = parser.parse_args(argv)
    data = make_data()
    results = {}
    for name in args.precisions.split(","):
        start = time.perf_counter()
        results[name] = train(name, data, steps=args.steps)
        r = results[name]
        print(
            f"{name:14s} final train loss {r['losses'][-1]:.4f}  test loss {r['test_loss']:.4f}  "
            f"test accuracy {r['test_accuracy']:.1%}  ({time.perf_counter() - start:.0f} s)"
        )
    if args.plot and plot(results, args.plot):
        print(f"wrote {args.plot}")
    return results


if __name__ == "__main__":
    main()
