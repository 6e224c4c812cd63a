"""Dot products that reveal how a GPU's FP8 GEMM accumulates, shared by the probe and the tests.

The probe (bench/hopper_fp8_probe.py) runs these on a GPU through ``jnp.dot`` of float8 operands
with a float32 result; the tests run `fpemu`'s model of that accumulator on the same inputs and
compare bits with the recorded results (tests/data/hopper_fp8.npz). Every input is generated
here from fixed integers (NumPy's PCG64 streams are stable across releases), so the recorded
file holds only results, and the generator is the single description of what was run.

Each designed set is a pair of arrays ``(a, b)`` of shape (R, K), float32 values that are exact
e4m3fn values: row r is one dot product ``sum_k a[r, k] * b[r, k]``. Designed products are
``c * 2**e`` with ``c`` an e4m3fn significand, split as ``a = c * 2**ceil(e/2)``, ``b = 2**floor(e/2)``.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
BIG = 16  # the large product 2**16 = 256 * 256


def _split(c: float, e: int) -> tuple[float, float]:
    """Factors of ``c * 2**e`` that are both e4m3fn values (|e| <= 16, c an e4m3fn significand <= 1.75)."""
    hi = min(max(-(-e // 2), -9 if c == 1 else -6), 8)  # a significand other than 1 on a normal factor
    a, b = c * 2.0**hi, 2.0 ** (e - hi)
    assert float(np.float32(a).astype(E4M3)) == a and float(np.float32(b).astype(E4M3)) == b, (c, e)
    return a, b


class _Builder:
    """Rows of designed products: ``add({position: (c, e), ...})``; other positions are zero."""

    def __init__(self, k: int):
        self.k = k
        self.a: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        self.labels: list[tuple] = []

    def add(self, label: tuple, products: dict[int, tuple[float, int]]) -> None:
        a = np.zeros(self.k, np.float32)
        b = np.zeros(self.k, np.float32)
        for pos, (c, e) in products.items():
            x, y = _split(abs(c), e)
            a[pos], b[pos] = np.copysign(x, c), y
        self.a.append(a)
        self.b.append(b)
        self.labels.append(label)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.stack(self.a), np.stack(self.b)


SIGNIFICANDS = (1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75)


def align_cases(k: int = 64) -> _Builder:
    """A large product and one smaller one: how many bits below the largest term are kept, and how
    the rest is rounded (toward zero, nearest, floor), for both signs and several positions."""
    rows = _Builder(k)
    for big_at, small_at in ((0, 1), (1, 0), (0, 17), (5, 31), (0, k - 1)):
        for d in range(1, 31):
            for c in SIGNIFICANDS:
                for sign in (1.0, -1.0):
                    rows.add(
                        ("align", big_at, small_at, d, c, sign), {big_at: (1.0, BIG), small_at: (sign * c, BIG - d)}
                    )
    # two small products below the large one: does their sum keep bits that each would lose?
    for d in range(8, 30):
        for sign in (1.0, -1.0):
            rows.add(("align2", d, sign), {0: (1.0, BIG), 1: (sign * 1.0, BIG - d), 2: (sign * 1.0, BIG - d)})
    # the largest term's exponent: products 1.875**2 = 3.52 (significand carry) and 1.75**2
    for c in (1.75, 1.5, 1.25):
        for d in range(8, 27):
            x = c * 2.0**4
            a = np.zeros(k, np.float32)
            b = np.zeros(k, np.float32)
            a[0], b[0] = x, x  # c**2 * 2**8
            xs, ys = _split(1.0, 8 - d)
            a[1], b[1] = xs, ys
            rows.a.append(a)
            rows.b.append(b)
            rows.labels.append(("square", c, d))
    return rows


def group_cases(k: int = 128, d: int = 26) -> _Builder:
    """+2**16 at i, -2**16 at i+1 (they cancel exactly) and 2**(16-d) at l: the small product
    survives only where it is summed apart from the pair, which maps the groups of the sum."""
    rows = _Builder(k)
    for i in range(k):
        j = i + 1 if i + 1 < k else i - 1
        for pos in range(k):
            if pos in (i, j):
                continue
            rows.add(("group", i, j, pos), {i: (1.0, BIG), j: (-1.0, BIG), pos: (1.0, BIG - d)})
    return rows


def swamp_cases(k: int = 512) -> _Builder:
    """2**16 at i and 2**(16-d) at l, no cancellation: where is the running sum aligned with the
    products, and where is it promoted to float32."""
    rows = _Builder(k)
    bigs = sorted({0, 1, 15, 16, 31, 32, 63, 64, 100, 127, 128, 200, 255, 256, k - 1} & set(range(k)))
    for i in bigs:
        for pos in range(k):
            if pos == i:
                continue
            for d in (12, 16, 20, 23, 26):
                rows.add(("swamp", i, pos, d), {i: (1.0, BIG), pos: (1.0, BIG - d)})
    return rows


def carry_cases(k: int = 64) -> _Builder:
    """Many equal large products (carries above the largest exponent) plus one small one."""
    rows = _Builder(k)
    for n in (2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64):
        if n > k:
            continue
        for d in range(8, 28):
            for c in (1.0, 1.75):
                products = {p: (c, BIG - 2) for p in range(n)}
                if n < k:
                    products[n] = (1.0, BIG - 2 - d)
                rows.add(("carry", n, d, c), products)
    return rows


def operand_cases(k: int = 64) -> _Builder:
    """Undecided by the first run: does a zero operand take part in the alignment (as its exponent
    field's emin would), and does a subnormal operand count as its format's emin or as its value's
    exponent? Each row: one product that sets (or not) a large ``emax``, and a small product
    15 * 2**(e - 4) whose low bits survive only under one of the answers."""
    rows = _Builder(k)
    for big in (448.0, 256.0, 64.0, 16.0):  # zero times big: counted, emax = -6 + e(big)
        for e in range(-12, -2):
            a = np.zeros(k, np.float32)
            b = np.zeros(k, np.float32)
            b[0] = big  # a[0] = 0
            a[1], b[1] = 1.875 * 2.0 ** max(e, -6), 2.0 ** (e - max(e, -6))
            rows.a.append(a)
            rows.b.append(b)
            rows.labels.append(("zero", big, e))
    for sub in (2.0**-9, 2.0**-8, 3 * 2.0**-9, 2.0**-7):  # e4m3fn subnormals times 256
        for e in range(-15, -6):
            a = np.zeros(k, np.float32)
            b = np.zeros(k, np.float32)
            a[0], b[0] = sub, 256.0
            a[1], b[1] = 1.875 * 2.0 ** max(e, -6), 2.0 ** (e - max(e, -6))
            rows.a.append(a)
            rows.b.append(b)
            rows.labels.append(("subnormal", sub, e))
    return rows


DESIGNED = {
    "align": align_cases,
    "group": group_cases,
    "swamp": swamp_cases,
    "carry": carry_cases,
    "operand": operand_cases,
}


def random_operands(kind: str, m: int, n: int, k: int, seed: int, fmt=E4M3) -> tuple[np.ndarray, np.ndarray]:
    """(m, k) and (k, n) float32 arrays of ``fmt`` values: ``codes`` (every finite code equally likely,
    zeros and subnormals included: the widest spread of exponents), ``normal`` (standard normal
    values scaled to the format's top binades, then rounded: a trained layer's spread) or ``positive``
    (``normal`` in absolute value: no cancellation)."""
    rng = np.random.default_rng([seed, k, m, n, ["codes", "normal", "positive"].index(kind)])

    def draw(shape):
        if kind == "codes":
            codes = rng.integers(0, 256, shape, dtype=np.uint8)
            x = codes.view(fmt).astype(np.float32)
            return np.where(np.isfinite(x), x, np.float32(0))
        x = rng.standard_normal(shape).astype(np.float32) * np.float32(float(ml_dtypes.finfo(fmt).max) / 8)
        x = x.astype(fmt).astype(np.float32)
        return np.abs(x) if kind == "positive" else x

    return draw((m, k)), draw((k, n))


RANDOM_KINDS = ("codes", "normal", "positive")
RANDOM_KS = (32, 64, 96, 128, 256, 512, 1024, 4096)


def all_designed() -> dict[str, tuple[np.ndarray, np.ndarray, list[tuple]]]:
    out = {}
    for name, make in DESIGNED.items():
        rows = make()
        a, b = rows.arrays()
        out[name] = (a, b, rows.labels)
    return out


def _check() -> None:  # pragma: no cover - a quick self-check of the generator
    for name, (a, b, labels) in all_designed().items():
        assert a.shape == b.shape and len(labels) == a.shape[0], name
        assert np.array_equal(a.astype(E4M3).astype(np.float32), a) and np.array_equal(
            b.astype(E4M3).astype(np.float32), b
        )
        print(name, a.shape)
    for kind, k in itertools.product(RANDOM_KINDS, (32,)):
        x, y = random_operands(kind, 4, 4, k, 0)
        print(kind, x[0, :4], y[:4, 0])


if __name__ == "__main__":  # pragma: no cover
    _check()
