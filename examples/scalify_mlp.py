"""Train an MLP on scikit-learn's digits with scale propagation: fp32, fp16 + scalify, FP8 + scalify.

jax-scalify's MNIST example, on the digits dataset (1797 8x8 images, shipped with scikit-learn:
nothing is downloaded). The same MLP (64 -> 512 -> 512 -> 10, ReLU, log-softmax) is trained by
plain SGD from the same initialisation under three recipes:

- ``fp32``: plain float32 arrays.
- ``fp16``: parameters and inputs are `fpemu.scalify.ScaledArray`s with float16 data and float32
  power-of-two scales; ``jax.jit(scalify(update))`` propagates scales through the forward pass, the
  backward pass and the SGD update.
- ``fp8``: ``fp16``, with every matmul operand rounded to e4m3fn on the forward pass and every
  matmul output's gradient to e5m2 on the backward pass (``reduce_precision_on_forward`` /
  ``_on_backward``: OCP formats, subnormals kept), as FP8 training recipes do.

Run: python examples/scalify_mlp.py [--epochs N] [--recipes fp32,fp16,fp8]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import fpemu.scalify as jsa

RECIPES = ("fp32", "fp16", "fp8")
SIZES = (64, 512, 512, 10)


def load_data(seed: int = 0, test_fraction: float = 0.2):
    """Digits as float32 in [0, 1], split with a fixed permutation: (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits  # optional dependency (the examples/test extras)

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


def init_params(seed: int = 0, sizes: tuple[int, ...] = SIZES) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        ((rng.standard_normal((m, n)) * np.sqrt(2.0 / m)).astype(np.float32), np.zeros((1, n), np.float32))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]


def predict(params, x, fp8: bool = False):
    """Log-probabilities. With ``fp8``, matmul operands in e4m3fn, their output gradients in e5m2."""
    for i, (w, b) in enumerate(params):
        if fp8:
            x = jsa.ops.reduce_precision_on_forward(x, "e4m3fn")
            w = jsa.ops.reduce_precision_on_forward(w, "e4m3fn")
        y = x @ w
        if fp8:
            y = jsa.ops.reduce_precision_on_backward(y, "e5m2")
        x = y + b if i == len(params) - 1 else jax.nn.relu(y + b)
    return x - jax.nn.logsumexp(x, axis=1, keepdims=True)


def loss(params, x, targets, fp8: bool = False):
    return -jnp.mean(jnp.sum(predict(params, x, fp8) * targets, axis=1))


def make_update(recipe: str, lr: float):
    fp8 = recipe == "fp8"

    def update(params, x, targets):
        grads = jax.grad(loss)(params, x, targets, fp8)
        return [(w - lr * dw, b - lr * db) for (w, b), (dw, db) in zip(params, grads)]

    return jax.jit(update if recipe == "fp32" else jsa.scalify(update))


def as_recipe(tree, recipe: str):
    """Plain float32 for ``fp32``; else `ScaledArray`s with float16 data and float32 scales."""
    if recipe == "fp32":
        return jax.tree_util.tree_map(jnp.asarray, tree)
    return jsa.tree.astype(jsa.as_scaled_array(tree, scale=np.float32(1)), np.float16)


def accuracy(params, x, y) -> float:
    params = jsa.asarray(params, np.float32)
    return float(np.mean(np.argmax(np.asarray(predict(params, jnp.asarray(x))), axis=1) == y))


def train(
    recipe: str, epochs: int = 20, batch: int = 64, lr: float = 0.1, seed: int = 0, data=None, sizes=SIZES
) -> dict:
    """Train one recipe; returns ``{"recipe", "test_accuracy", "seconds", "finite"}``."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}; got {recipe!r}")
    x_train, y_train, x_test, y_test = load_data(seed) if data is None else data
    targets = np.eye(10, dtype=np.float32)[y_train]
    params = as_recipe(init_params(seed, tuple(sizes)), recipe)
    update = make_update(recipe, lr)
    order_rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in range(epochs):
        order = order_rng.permutation(len(x_train))
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i : i + batch]
            x, t = as_recipe((x_train[idx], targets[idx]), recipe)
            params = update(params, x, t)
    finite = all(
        bool(np.isfinite(np.asarray(leaf, np.float32)).all())
        for leaf in jax.tree_util.tree_leaves(jsa.asarray(params, np.float32))
    )
    return {
        "recipe": recipe,
        "test_accuracy": accuracy(params, x_test, y_test),
        "seconds": time.perf_counter() - start,
        "finite": finite,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    args = parser.parse_args(argv)
    data = load_data()
    for recipe in args.recipes.split(","):
        result = train(recipe, epochs=args.epochs, data=data)
        print(f"{recipe:5s} test accuracy {100 * result['test_accuracy']:.2f}%  ({result['seconds']:.1f} s)")


if __name__ == "__main__":
    main()
