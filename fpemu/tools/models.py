"""The small training steps that ``fpemu sweep`` (and bench/training_sweep.py) times.

- `mlp_model`: the digits MLP 64-128-128-10 (ReLU), batch 64, softmax cross-entropy and one Adam step
  (`adam_update`: optax's ``adam(1e-3)``, operation for operation, so that no optional dependency is
  needed; tests/tools/test_models.py compares the bits with optax's).
- `TransformerBlock`: a pre-LayerNorm block (4-head attention, GELU MLP of width 4d; batch 8, sequence
  128, d 256 by default), ``jax.value_and_grad`` of a scalar loss and an SGD update.
- `transformer_stack_model`: four such blocks in a row, each with its own parameters: what grows with a
  model's depth (its residual stream and the gradient's chain of sums).
- `transformer_scan_model`: the same four blocks, their parameters stacked along a leading axis and the
  blocks run by ``jax.lax.scan``, as scanned-layer models are written (Flax's ``nn.scan``): the program
  holds one block, whatever the depth.

All take float32 parameters and are plain JAX: ``fpemu.emulate`` runs them under a policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "TransformerBlock",
    "adam_init",
    "adam_update",
    "mlp_model",
    "transformer_model",
    "transformer_scan_model",
    "transformer_stack_model",
]

_MLP_SIZES = (64, 128, 128, 10)
_MLP_BATCH = 64


def adam_init(params: Any) -> dict[str, Any]:
    """Adam's state for ``params``: a zero int32 step count and zero first and second moments."""
    zeros = lambda tree: jax.tree_util.tree_map(jnp.zeros_like, tree)
    return {"count": jnp.zeros([], jnp.int32), "mu": zeros(params), "nu": zeros(params)}


def adam_update(
    grads: Any, state: dict[str, Any], params: Any, *, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """(new params, new state): one step of optax's ``adam(lr, b1, b2, eps)`` followed by
    ``optax.apply_updates``, the same operations in the same order (the same bits, also under
    ``fpemu.emulate``, which rounds each of them)."""
    tree_map = jax.tree_util.tree_map
    mu = tree_map(lambda g, t: (1 - b1) * (g**1) + b1 * t, grads, state["mu"])
    nu = tree_map(lambda g, t: (1 - b2) * (g**2) + b2 * t, grads, state["nu"])
    count = state["count"]
    top = jnp.array(jnp.iinfo(jnp.int32).max, jnp.int32)
    count_inc = jnp.where(count < top, count + jnp.array(1, jnp.int32), top)
    mu_hat = _bias_correction(mu, b1, count_inc)
    nu_hat = _bias_correction(nu, b2, count_inc)
    updates = tree_map(lambda m, v: m / (jnp.sqrt(v + 0.0) + eps), mu_hat, nu_hat)
    updates = tree_map(lambda g: -lr * g, updates)
    new_params = tree_map(lambda p, u: jnp.asarray(p + u).astype(jnp.asarray(p).dtype), params, updates)
    return new_params, {"count": count_inc, "mu": mu, "nu": nu}


def _bias_correction(moment: Any, decay: float, count: jax.Array) -> Any:
    """optax's ``tree_bias_correction`` (an inlined jit there: the same equations here; ``decay`` raised to
    the int32 count by `jax.lax.pow`, as ``decay**count`` does it, which strict promotion would refuse)."""
    correction = 1 - jax.lax.pow(np.float32(decay), count)
    return jax.tree_util.tree_map(lambda t: t / correction.astype(t.dtype), moment)


def mlp_model() -> tuple[Callable[..., Any], tuple]:
    """The digits MLP's Adam step and its arguments (params, Adam state, x, labels): ``step(params, state,
    x, labels)`` returns (loss, new params, new state).

    Example:
      >>> step, (params, state, x, labels) = mlp_model()
      >>> [layer["w"].shape for layer in params], x.shape, labels.shape
      ([(64, 128), (128, 128), (128, 10)], (64, 64), (64,))
      >>> loss, params, state = jax.jit(step)(params, state, x, labels)
      >>> int(state["count"])
      1
    """
    rng = np.random.default_rng(0)
    params = [
        {"w": (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), "b": np.zeros(o, np.float32)}
        for i, o in zip(_MLP_SIZES[:-1], _MLP_SIZES[1:], strict=True)
    ]
    params = jax.tree_util.tree_map(jnp.asarray, params)
    x = jnp.asarray(rng.standard_normal((_MLP_BATCH, _MLP_SIZES[0])).astype(np.float32))
    labels = jnp.asarray(rng.integers(0, _MLP_SIZES[-1], _MLP_BATCH))

    def loss(p, x, labels):
        h = x
        for layer in p[:-1]:
            h = jax.nn.relu(h @ layer["w"] + jnp.expand_dims(layer["b"], 0))
        return _cross_entropy(h @ p[-1]["w"] + jnp.expand_dims(p[-1]["b"], 0), labels).mean()

    def step(p, state, x, labels):
        value, grads = jax.value_and_grad(loss)(p, x, labels)
        p, state = adam_update(grads, state, p)
        return value, p, state

    return step, (params, adam_init(params), x, labels)


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """optax's ``softmax_cross_entropy_with_integer_labels`` of (batch, classes) logits, the same operations."""
    logits = logits.transpose((0, 1)).reshape(logits.shape[:1] + (-1,))
    label_logits = jnp.take_along_axis(logits, jnp.expand_dims(labels, 1), axis=1).take(0, axis=1)
    return jax.nn.logsumexp(logits, axis=1, where=None) - label_logits


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerBlock:
    """A pre-LayerNorm transformer block and its training step, at the given sizes.

    Raises:
      ValueError: naming the field, for a size that is not a positive integer or ``d`` not a multiple of
        ``heads``.

    Example:
      >>> model = TransformerBlock(batch=2, seq=4, d=8, heads=2)
      >>> params, x = model.make_inputs()
      >>> x.shape, params["w_qkv"].shape
      ((2, 4, 8), (8, 24))
      >>> loss, params = jax.jit(model.step)(params, x)
      >>> loss.shape
      ()
    """

    batch: int = 8
    seq: int = 128
    d: int = 256
    heads: int = 4
    lr: float = 0.01

    def __post_init__(self) -> None:
        for name in ("batch", "seq", "d", "heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TransformerBlock {name} must be a positive integer, got {value!r}")
        if self.d % self.heads:
            raise ValueError(f"TransformerBlock d must be a multiple of heads, got d={self.d}, heads={self.heads}")

    def block(self, params: dict[str, Any], x: jax.Array, attention_scope: str | None = None) -> jax.Array:
        """The block; ``attention_scope``: a ``jax.named_scope`` around the attention score and value
        products (``"attention"``: the scope the training recipes keep in high precision)."""
        b, s, d, heads = self.batch, self.seq, self.d, self.heads
        h = _layer_norm(x, params["ln1_g"], params["ln1_b"])
        qkv = jnp.einsum("bsd,de->bse", h, params["w_qkv"])
        q, k, v = jnp.split(qkv.reshape(b, s, 3, heads, d // heads), 3, axis=2)
        q, k, v = (t[:, :, 0].transpose(0, 2, 1, 3) for t in (q, k, v))
        with jax.named_scope(attention_scope) if attention_scope else contextlib.nullcontext():
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(d // heads)).astype(x.dtype)
            o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
        o = o.transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + jnp.einsum("bsd,de->bse", o, params["w_o"])
        h = _layer_norm(x, params["ln2_g"], params["ln2_b"])
        h = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, params["w_1"]))
        return x + jnp.einsum("bsf,fd->bsd", h, params["w_2"])

    def loss(self, params: dict[str, Any], x: jax.Array, attention_scope: str | None = None) -> jax.Array:
        return jnp.mean(jnp.square(self.block(params, x, attention_scope)))

    def step(self, params: dict[str, Any], x: jax.Array, attention_scope: str | None = None) -> tuple[Any, Any]:
        """(loss, params after one SGD step); every dot of the block unscoped unless ``attention_scope``."""
        value, grads = jax.value_and_grad(self.loss)(params, x, attention_scope)
        return value, jax.tree_util.tree_map(lambda p, g: p - self.lr * g, params, grads)

    def make_inputs(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(params, x) as float32 NumPy arrays, drawn from ``numpy.random.default_rng(0)``."""
        rng = np.random.default_rng(0)
        d = self.d
        shapes = {"w_qkv": (d, 3 * d), "w_o": (d, d), "w_1": (d, 4 * d), "w_2": (4 * d, d)}
        params = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for k, s in shapes.items()}
        for name in ("ln1", "ln2"):
            params[f"{name}_g"], params[f"{name}_b"] = np.ones(d, np.float32), np.zeros(d, np.float32)
        return params, rng.standard_normal((self.batch, self.seq, d)).astype(np.float32)


def _layer_norm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    lead = tuple(range(x.ndim - 1))  # g and b broadcast over every axis but the last, explicitly
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * jnp.expand_dims(g, lead) + jnp.expand_dims(b, lead)


def transformer_model() -> tuple[Callable[..., Any], tuple]:
    """`TransformerBlock`'s step at its default sizes, and its arguments (params, x) as JAX arrays."""
    model = TransformerBlock()
    params, x = model.make_inputs()
    return model.step, (jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(x))


def transformer_stack_model(blocks: int = 4) -> tuple[Callable[..., Any], tuple]:
    """``blocks`` `TransformerBlock` blocks in a row at its default sizes, and the stack's arguments (a list
    of each block's params, x) as JAX arrays. Every block starts from `TransformerBlock.make_inputs`'s
    parameters (its own arrays). The step is `TransformerBlock.step`'s over the stack: the mean square of
    the last block's output, ``jax.value_and_grad`` and an SGD update of every block.

    Raises:
      ValueError: for ``blocks`` that is not a positive integer.
    """
    _check_blocks(blocks, "transformer_stack_model")
    model = TransformerBlock()
    params, x = model.make_inputs()

    def loss(stack: list[dict[str, Any]], x: jax.Array) -> jax.Array:
        for block_params in stack:
            x = model.block(block_params, x)
        return jnp.mean(jnp.square(x))

    stack = [{name: jnp.array(value) for name, value in params.items()} for _ in range(blocks)]
    return _sgd_step(loss, model.lr), (stack, jnp.asarray(x))


def transformer_scan_model(blocks: int = 4) -> tuple[Callable[..., Any], tuple]:
    """`transformer_stack_model`'s blocks run by ``jax.lax.scan``, and the stack's arguments (each parameter
    of every block stacked along a new leading axis of length ``blocks``, x) as JAX arrays: the same blocks
    with the same starting parameters, the same loss and SGD update, in a program that holds one block
    (the loop's body) instead of ``blocks`` copies of it.

    Raises:
      ValueError: for ``blocks`` that is not a positive integer.

    Example:
      >>> step, (stacked, x) = transformer_scan_model(2)
      >>> stacked["w_qkv"].shape, x.shape
      ((2, 256, 768), (8, 128, 256))
    """
    _check_blocks(blocks, "transformer_scan_model")
    model = TransformerBlock()
    params, x = model.make_inputs()

    def loss(stacked: dict[str, Any], x: jax.Array) -> jax.Array:
        x, _ = jax.lax.scan(lambda x, block_params: (model.block(block_params, x), None), x, stacked)
        return jnp.mean(jnp.square(x))

    stacked = {name: jnp.asarray(np.stack([value] * blocks)) for name, value in params.items()}
    return _sgd_step(loss, model.lr), (stacked, jnp.asarray(x))


def _sgd_step(loss: Callable[..., jax.Array], lr: float) -> Callable[..., tuple[Any, Any]]:
    """``step(params, x)``: ``(loss, params after one SGD step)``, as `TransformerBlock.step` computes it."""

    def step(params: Any, x: jax.Array) -> tuple[Any, Any]:
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

    return step


def _check_blocks(blocks: Any, what: str) -> None:
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"{what} blocks must be a positive integer, got {blocks!r}")
