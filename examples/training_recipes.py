"""Low-precision training in one line: the digits MLP and a small transformer under every training recipe.

Both models are trained from one initialisation each, with Adam on float32 master weights, in:

- ``fp32``: plain float32;
- ``bf16``: ``fpemu.emulate(jax.value_and_grad(loss), "bf16")``: every result of the forward and
  backward pass rounded to bfloat16;
- every named training recipe (`fpemu.TRAINING_RECIPES`: ``fp8_current``, ``fp8_delayed``,
  ``fp8_rowwise``, ``fp8_blockwise``, ``mxfp8``, ``mxfp6``, ``mxfp4``, ``nvfp4``):
  ``fpemu.emulate(jax.value_and_grad(loss), fpemu.Policy(dot=name), key=key)``: every matmul of the
  forward pass and of the backward pass (dgrad and wgrad) quantized as the recipe says, everything
  else in float32, so that the differences between rows are the recipes' own. The attention score
  and value products of the transformer run under ``jax.named_scope("attention")`` and stay in high
  precision, as in Transformer Engine;
- ``scalify_fp16`` (the transformer only): jax-scalify's scale propagation with float16 data
  (``fpemu.scalify``; the MLP's is examples/scalify_mlp.py).

The models are examples/fp8_mlp_digits.py's MLP (64 -> 128 -> 128 -> 10 on scikit-learn's digits)
and examples/char_transformer.py's 2-layer decoder (two-digit addition, character by character).
The table printed at the end is the one in docs/training.md; ``--plot`` draws the loss curves.

Run: python examples/training_recipes.py [--epochs N] [--steps N] [--precisions a,b,...] [--plot PNG] [--json FILE]

docs/training.md's numbers and docs/training_curves.png: ``--epochs 10 --steps 600``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import fpemu

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # the two model examples beside this file
import char_transformer
import fp8_mlp_digits as mlp

SMOOTH = 20  # the transformer's curves: the mean loss of each 20 steps
PRECISIONS = ("fp32", "bf16", *fpemu.TRAINING_RECIPES, "scalify_fp16")  # scalify_fp16: the transformer only


def mlp_grad_fn(precision: str):
    """``(compute, init_state)`` of the digits MLP in ``precision``:
    ``compute(params, x, y, key, state) -> (loss, grads, state)``, ``init_state(params, x, y)``."""
    value_and_grad = jax.value_and_grad(mlp.loss_fn)
    if precision in fpemu.TRAINING_RECIPES:
        return char_transformer.recipe_grad(value_and_grad, precision)
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    fn = value_and_grad if precision == "fp32" else fpemu.emulate(value_and_grad, "bf16")
    return (lambda p, x, y, key, state: (*fn(p, x, y), state)), (lambda *args: {})


def train_mlp(precision: str, data, *, epochs: int, batch: int = 64, lr: float = 1e-3, seed: int = 0) -> dict:
    """The digits MLP: per-epoch mean training loss, final test accuracy (float32 evaluation)."""
    x_train, y_train, x_test, y_test = data
    compute, init_state = mlp_grad_fn(precision)
    init, update = mlp.adam(lr)
    params = mlp.init_params(jax.random.key(seed))
    state = init(params)
    histories = init_state(params, x_train[:batch], y_train[:batch])

    @jax.jit
    def step(params, state, xb, yb, key, histories):
        value, grads, histories = compute(params, xb, yb, key, histories)
        params, state = update(grads, state, params)
        return params, state, value, histories

    rng = np.random.default_rng(seed)
    key = jax.random.key(seed + 1)
    losses, steps = [], 0
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        values = []
        for b in range(len(x_train) // batch):
            idx = order[b * batch : (b + 1) * batch]
            params, state, value, histories = step(
                params, state, x_train[idx], y_train[idx], jax.random.fold_in(key, steps), histories
            )
            values.append(value)
            steps += 1
        losses.append(float(np.mean(jax.device_get(values))))
    predicted = np.asarray(jnp.argmax(mlp.forward(params, jnp.asarray(x_test)), axis=-1))
    return {"losses": losses, "test_accuracy": float(np.mean(predicted == y_test))}


def table(results: dict[str, dict[str, dict]]) -> str:
    """The Markdown table of the final numbers."""
    rows = [
        "| precision | MLP final train loss | MLP test accuracy | transformer final train loss | "
        "transformer test loss | transformer test accuracy |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in dict.fromkeys([*results["mlp"], *results["transformer"]]):
        m, t = results["mlp"].get(name), results["transformer"].get(name)
        cells = ["-"] * 2 if m is None else [f"{m['losses'][-1]:.4f}", f"{m['test_accuracy']:.2%}"]
        cells += (
            ["-"] * 3 if t is None else [f"{t['losses'][-1]:.4f}", f"{t['test_loss']:.4f}", f"{t['test_accuracy']:.2%}"]
        )
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(results: dict[str, dict[str, dict]], path: str) -> bool:
    """One PNG, two panels: the loss curves of every precision (False without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(dict.fromkeys([*results["mlp"], *results["transformer"]]))
    colours = plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2]  # 20 distinct colours
    markers = "os^vD<>pP*hX"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    panels = (("mlp", "epoch", 1), ("transformer", f"step (mean of each {SMOOTH} steps)", SMOOTH))
    for ax, (model, xlabel, window) in zip(axes, panels, strict=True):
        for i, name in enumerate(names):
            result = results[model].get(name)
            if result is None:
                continue
            losses = np.asarray(result["losses"])
            if window > 1:  # the per-step losses of one batch are noisy: mean of consecutive windows
                losses = losses[: len(losses) // window * window].reshape(-1, window).mean(axis=1)
            x = (np.arange(len(losses)) + 1) * window
            ax.plot(
                x, losses, label=name, color=colours[i % len(colours)], marker=markers[i % len(markers)],
                markevery=max(1, len(losses) // 12), markersize=4, linewidth=1.1,
            )  # fmt: skip
        ax.set(xlabel=xlabel, ylabel="training loss", yscale="log")
        ax.set_title("digits MLP" if model == "mlp" else "2-layer transformer, two-digit addition")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="MLP epochs")
    parser.add_argument("--steps", type=int, default=1500, help="transformer steps")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--models", default="mlp,transformer")
    parser.add_argument("--plot", default=None, help="write the loss curves to this PNG")
    parser.add_argument("--json", default=None, help="write every loss curve and final number to this JSON file")
    args = parser.parse_args(argv)
    precisions = args.precisions.split(",")
    for name in precisions:
        if name not in PRECISIONS:
            parser.error(f"argument --precisions: {name!r} is not one of {', '.join(PRECISIONS)}")
    models = args.models.split(",")
    results: dict[str, dict[str, dict]] = {"mlp": {}, "transformer": {}}
    digits = mlp.load_data() if "mlp" in models else None
    sums = char_transformer.make_data() if "transformer" in models else None
    for name in precisions:
        start = time.perf_counter()
        if digits is not None and name != "scalify_fp16":  # the MLP under scalify: examples/scalify_mlp.py
            results["mlp"][name] = train_mlp(name, digits, epochs=args.epochs)
        if sums is not None:
            results["transformer"][name] = char_transformer.train(name, sums, steps=args.steps)
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    print(table(results))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot and plot(results, args.plot):
        print(f"wrote {args.plot}")
    return results


if __name__ == "__main__":
    main()
