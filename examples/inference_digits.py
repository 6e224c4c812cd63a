"""Post-training quantization of a float32 model: a Flax linen MLP on scikit-learn's digits, every inference recipe.

The MLP (64 -> 128 -> 128 -> 10, ReLU) is trained once in float32 with Adam, then evaluated on the
held-out digits two ways for each of `fpemu.INFERENCE_RECIPES`:

- stored weights: ``fpemu.quantize_params(params, recipe)`` quantizes every kernel along its
  contraction (axis 0 of Flax's ``(in, out)`` kernels), keeps the biases, and the model runs in
  float32 on the dequantized weights. The report gives the kernels' QSNR and their packed bytes.
- emulated: ``fpemu.emulate(apply, fpemu.Policy(dot=recipe))``: each forward dot quantizes its
  weight (the dot's rhs) and, for the ``*_w8a8``/``*_w4a4`` recipes, its activation (the lhs, per
  token for ``fp8_w8a8``, in blocks along the features for MX and NVFP4) as the recipe says.

The digits dataset ships inside scikit-learn: nothing is downloaded. docs/inference.md shows the
table this prints (``--markdown``).

Run: python examples/inference_digits.py [--epochs N] [--markdown]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import fpemu

HIDDEN = (128, 128)


class MLP(nn.Module):
    """Dense layers with ReLU between them; Flax's kernels are ``(in, out)``: ``y = x @ kernel + bias``."""

    hidden: tuple[int, ...] = HIDDEN

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(10)(x)


def load_data(seed: int = 0, test_fraction: float = 0.2):
    """Digits as float32 in [0, 1], split with a fixed permutation: (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def train(x, y, *, hidden=HIDDEN, epochs: int = 30, batch: int = 64, lr: float = 3e-3, seed: int = 0):
    """(model, float32 variables) after ``epochs`` of Adam on minibatches (a fixed shuffle per epoch)."""
    model = MLP(hidden=tuple(hidden))
    variables = model.init(jax.random.key(seed), jnp.zeros((1, x.shape[1]), jnp.float32))
    opt = optax.adam(lr)
    state = opt.init(variables)

    @jax.jit
    def step(variables, state, xb, yb):
        def loss(v):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(v, xb), yb).mean()

        grads = jax.grad(loss)(variables)
        updates, state = opt.update(grads, state, variables)
        return optax.apply_updates(variables, updates), state

    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x) - batch + 1, batch):
            idx = order[i : i + batch]
            variables, state = step(variables, state, x[idx], y[idx])
    return model, variables


def accuracy(logits, y) -> float:
    return float(np.mean(np.argmax(np.asarray(logits), axis=-1) == y))


def evaluate(model, variables, x, y, recipes=fpemu.INFERENCE_RECIPES) -> list[dict]:
    """One row per recipe (fp32 first): accuracy with stored weights and under emulate, the kernels'
    QSNR, the logits' QSNR under emulate, and the parameters' bytes before and after packing."""
    logits32 = model.apply(variables, x)
    nbytes = sum(leaf.nbytes for leaf in jax.tree.leaves(variables))
    rows = [
        {
            "recipe": "fp32",
            "stored": accuracy(logits32, y),
            "emulated": accuracy(logits32, y),
            "weight_qsnr": float("inf"),
            "logit_qsnr": float("inf"),
            "bytes": nbytes,
        }
    ]
    for name in recipes:
        stored, report = fpemu.quantize_params(variables, name)
        emulated = fpemu.emulate(model.apply, fpemu.Policy(dot=name))(variables, x)
        rows.append(
            {
                "recipe": name,
                "stored": accuracy(model.apply(stored, x), y),
                "emulated": accuracy(emulated, y),
                "weight_qsnr": report.qsnr_db,
                "logit_qsnr": float(fpemu.scaled.qsnr(logits32, emulated)),
                "bytes": report.bytes_after,
            }
        )
    return rows


def table(rows: list[dict], *, markdown: bool = False) -> str:
    def db(v: float) -> str:
        return "-" if v == float("inf") else f"{v:.1f}"

    header = ["recipe", "accuracy, stored weights", "accuracy, emulate", "weight QSNR dB", "logit QSNR dB", "bytes"]
    body = [
        [r["recipe"], f"{100 * r['stored']:.1f}%", f"{100 * r['emulated']:.1f}%", db(r["weight_qsnr"]),
         db(r["logit_qsnr"]), r["bytes"]]
        for r in rows
    ]  # fmt: skip
    return fpemu.testing.text_table(body, header, align="lrrrrr", markdown=markdown)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    x_train, y_train, x_test, y_test = load_data()
    model, variables = train(x_train, y_train, epochs=args.epochs)
    rows = evaluate(model, variables, x_test, y_test)
    print(
        f"{datetime.date.today()}, {platform.machine()} {os.cpu_count()} CPUs, jax {jax.__version__} "
        f"({jax.default_backend()}), {args.epochs} epochs, {len(y_test)} test digits"
    )
    print(table(rows, markdown=args.markdown))
    return rows


if __name__ == "__main__":
    main()
