"""What would this model do in FP8? Train a small MLP on scikit-learn's digits in float32, bf16 and emulated FP8.

The digits dataset (1797 8x8 images, 10 classes) ships inside scikit-learn: nothing is downloaded.
The same MLP (64 -> 128 -> 128 -> 10, GELU) is trained three times from the same initialisation,
with Adam on float32 master weights, under three numeric recipes:

- ``fp32``: plain float32.
- ``bf16``: ``fpemu.emulate(jax.value_and_grad(loss), "bf16")``: every floating-point result of the
  forward *and* backward pass rounded to bfloat16 (the weight update stays in float32).
- ``fp8``: the bf16 recipe, with every matmul in FP8 as FP8 training recipes do it (Micikevicius et
  al. 2022): forward operands in e4m3fn, the gradient operands of the two backward matmuls in e5m2,
  each tensor scaled per tensor by the power of two that brings its amax to the format's max
  ("current" scaling), float32 accumulation (`fpemu.dot_general` with ``lhs_scale``/``rhs_scale``).
- ``fp8-unscaled``: the same FP8 matmuls without the scales.

Afterwards the FP8 forward pass is run once *without* scaling under
``fpemu.emulate(..., with_stats=True)`` to show what the scaling buys: the share of matmul operands
that underflow e4m3fn or land in its subnormal range, layer by layer.

Run: python examples/fp8_mlp_digits.py [--epochs N] [--plot curves.png]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import fpemu

RECIPES = ("fp32", "bf16", "fp8", "fp8-unscaled")
HIDDEN = (128, 128)
DOT = (((1,), (0,)), ((), ()))  # (batch, k) @ (k, n)
FORWARD_FMT, GRAD_FMT = fpemu.get_format("e4m3fn"), fpemu.get_format("e5m2")


# -- data and model ---------------------------------------------------------------------------------------


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


def init_params(key: jax.Array, sizes=(64, *HIDDEN, 10)) -> list[dict[str, jax.Array]]:
    params = []
    for n_in, n_out, k in zip(sizes[:-1], sizes[1:], jax.random.split(key, len(sizes) - 1)):
        w = jax.random.normal(k, (n_in, n_out), jnp.float32) * jnp.float32(np.sqrt(2.0 / n_in))
        params.append({"w": w, "b": jnp.zeros((1, n_out), jnp.float32)})
    return params


def _pow2_scale(x: jax.Array, fmt) -> jax.Array:
    """Per-tensor current scaling: the power of two s with amax(x) / s <= fmt.max (1 for an all-zero x)."""
    amax = jnp.max(jnp.abs(x))
    scale = jnp.exp2(jnp.ceil(jnp.log2(amax / jnp.float32(fmt.max))))
    return jnp.where(amax > 0, scale, jnp.float32(1.0))


def make_fp8_matmul(scaled: bool = True):
    """``x @ w`` with e4m3fn operands and float32 accumulation; the backward matmuls take the incoming
    gradient in e5m2. ``scaled``: every operand is divided by its per-tensor power-of-two scale
    first (and the product multiplied back), else used as it is."""

    def scale(x, fmt):
        return _pow2_scale(x, fmt) if scaled else None

    @jax.custom_vjp
    def fp8_matmul(x, w):
        with jax.named_scope("fp8_matmul"):
            return fpemu.dot_general(
                x, w, DOT, lhs=FORWARD_FMT, rhs=FORWARD_FMT, lhs_scale=scale(x, FORWARD_FMT),
                rhs_scale=scale(w, FORWARD_FMT),
            )  # fmt: skip

    def fwd(x, w):
        return fp8_matmul(x, w), (x, w)

    def bwd(residuals, g):
        """dx = g @ w.T and dw = x.T @ g with g in e5m2, x and w in e4m3fn."""
        x, w = residuals
        with jax.named_scope("fp8_matmul"):
            sg, sx, sw = scale(g, GRAD_FMT), scale(x, FORWARD_FMT), scale(w, FORWARD_FMT)
            dx = fpemu.dot_general(g, w.T, DOT, lhs=GRAD_FMT, rhs=FORWARD_FMT, lhs_scale=sg, rhs_scale=sw)
            dw = fpemu.dot_general(x.T, g, DOT, lhs=FORWARD_FMT, rhs=GRAD_FMT, lhs_scale=sx, rhs_scale=sg)
        return dx, dw

    fp8_matmul.defvjp(fwd, bwd)
    return fp8_matmul


def forward(params, x, matmul=jnp.matmul):
    """Logits of the MLP; ``matmul`` computes every ``x @ w``. Layer ``i`` runs in scope ``layer{i}``."""
    for i, layer in enumerate(params):
        with jax.named_scope(f"layer{i}"):
            x = matmul(x, layer["w"]) + layer["b"]
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
    return x


def loss_fn(params, x, y, matmul=jnp.matmul):
    logits = forward(params, x, matmul)
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


def recipe_functions(recipe: str):
    """(value_and_grad of the loss, logits) under a recipe."""
    if recipe == "fp32":
        return jax.value_and_grad(loss_fn), forward
    # The FP8 matmul computes its scales and products in float32 by design: leave its scope alone.
    policy = fpemu.Policy(default="bf16", exclude=("fp8_matmul",))
    matmul = make_fp8_matmul(scaled=recipe == "fp8") if recipe.startswith("fp8") else jnp.matmul
    grad = fpemu.emulate(jax.value_and_grad(lambda p, x, y: loss_fn(p, x, y, matmul)), policy)
    logits = fpemu.emulate(lambda p, x: forward(p, x, matmul), policy)
    return grad, logits


# -- training -------------------------------------------------------------------------------------------------


def adam(lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"m": zeros, "v": zeros, "t": jnp.zeros((), jnp.int32)}

    def update(grads, state, params):
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        tf = t.astype(jnp.float32)
        c1, c2 = 1 - jnp.float32(b1) ** tf, 1 - jnp.float32(b2) ** tf
        new = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
        return new, {"m": m, "v": v, "t": t}

    return init, update


def train(recipe: str, data, *, epochs: int, batch: int, lr: float, seed: int) -> dict:
    x_train, y_train, x_test, y_test = data
    grad_fn, logits_fn = recipe_functions(recipe)
    init, update = adam(lr)
    params = init_params(jax.random.key(seed))
    state = init(params)

    @jax.jit
    def step(params, state, xb, yb):
        loss, grads = grad_fn(params, xb, yb)
        params, state = update(grads, state, params)
        return params, state, loss

    evaluate = jax.jit(lambda p, x: jnp.argmax(logits_fn(p, x), axis=-1))
    rng = np.random.default_rng(seed)
    n_batches = len(x_train) // batch
    history = {"loss": [], "accuracy": []}
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for b in range(n_batches):
            idx = order[b * batch : (b + 1) * batch]
            params, state, loss = step(params, state, x_train[idx], y_train[idx])
            losses.append(loss)
        history["loss"].append(float(np.mean(jax.device_get(losses))))
        history["accuracy"].append(float(np.mean(np.asarray(evaluate(params, x_test)) == y_test)))
    return {"params": params, **history, "final_loss": history["loss"][-1], "final_accuracy": history["accuracy"][-1]}


def unscaled_fp8_stats(params, x) -> dict[str, dict[str, float]]:
    """Fractions of matmul operands that underflow / are subnormal in e4m3fn when nothing is scaled."""
    policy = fpemu.Policy(default="bf16", dot=fpemu.DotPolicy(lhs="e4m3fn", rhs="e4m3fn"))
    _, stats = jax.jit(fpemu.emulate(forward, policy, with_stats=True))(params, x)
    rows = {}
    for site, counts in stats.items():
        if ".lhs" in site or ".rhs" in site:
            n = float(counts["elements"])
            rows[site] = {f: float(counts[f]) / n for f in ("underflow", "subnormal", "overflow", "nan")}
    return rows


def plot(results: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}")
        return False
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for recipe, r in results.items():
        epochs = np.arange(1, len(r["loss"]) + 1)
        ax_loss.plot(epochs, r["loss"], label=recipe)
        ax_acc.plot(epochs, r["accuracy"], label=recipe)
    ax_loss.set(xlabel="epoch", ylabel="training loss", yscale="log")
    ax_acc.set(xlabel="epoch", ylabel="test accuracy")
    ax_loss.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")
    return True


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated subset of {RECIPES}")
    parser.add_argument("--plot", default=None, help="write loss/accuracy curves to this PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        parser.error(f"unknown recipes {unknown}; choose from {', '.join(RECIPES)}")

    data = load_data(args.seed)
    print(f"digits: {len(data[0])} training / {len(data[2])} test images, MLP 64-{'-'.join(map(str, HIDDEN))}-10, "
          f"{args.epochs} epochs of batch {args.batch}, Adam lr {args.lr}")  # fmt: skip
    results = {}
    for recipe in recipes:
        start = time.perf_counter()
        results[recipe] = train(recipe, data, epochs=args.epochs, batch=args.batch, lr=args.lr, seed=args.seed)
        results[recipe]["seconds"] = time.perf_counter() - start

    print("\n| recipe | final training loss | test accuracy | seconds |\n|---|---:|---:|---:|")
    for recipe, r in results.items():
        print(f"| {recipe} | {r['final_loss']:.4f} | {r['final_accuracy']:.2%} | {r['seconds']:.1f} |")

    reference = results.get("fp8", results.get("fp32", next(iter(results.values()))))
    stats = unscaled_fp8_stats(reference["params"], data[2])
    print("\nWithout scaling, e4m3fn matmul operands (forward pass on the test set, fractions of elements):")
    print("| operand | underflow to 0 | subnormal | overflow | NaN |\n|---|---:|---:|---:|---:|")
    for site, row in stats.items():
        cells = " | ".join(f"{row[field]:.2%}" for field in ("underflow", "subnormal", "overflow", "nan"))
        print(f"| {site} | {cells} |")
    if args.plot:
        plot(results, args.plot)
    metrics = {recipe: {k: v for k, v in r.items() if k != "params"} for recipe, r in results.items()}
    metrics["unscaled_fp8_operands"] = stats
    return metrics


if __name__ == "__main__":
    main()
