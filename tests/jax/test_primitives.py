"""The catalogue of JAX's primitives (fpemu/_jax/primitives.py), held to JAX, to the rules and to the docs.

Every primitive the installed JAX defines, found by importing every module of the ``jax`` package
(in a subprocess: the imports load Pallas, Mosaic and the sparse library, which the test process
should not), must have a row; each transform's registered rules must be the catalogue's kinds; and
docs/emulate.md's rule table must list exactly the catalogue's names under each kind.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from fpemu._emulate.registry import RULES
from fpemu._jax.primitives import CATALOGUE, EMULATE_KINDS, SCALIFY_KINDS, check_kind, names_of
from fpemu.scalify import core as scalify_core
from fpemu.scalify._registry import KINDS as SCALIFY_RULE_KINDS

ROOT = Path(__file__).resolve().parents[2]

WALK = textwrap.dedent(
    """
    import gc, importlib, pkgutil, warnings
    warnings.simplefilter("ignore")
    import jax
    from jax.extend.core import Primitive
    for info in pkgutil.walk_packages(jax.__path__, "jax.", onerror=lambda name: None):
        try:
            importlib.import_module(info.name)
        except Exception:  # optional dependencies (TensorFlow, TensorBoard, Mosaic GPU's CUDA libraries)
            pass
    print("\\n".join(sorted({o.name for o in gc.get_objects() if isinstance(o, Primitive)})))
    """
)


@pytest.fixture(scope="module")
def installed() -> list[str]:
    """The name of every primitive the installed JAX defines."""
    done = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300, check=True)
    names = done.stdout.split()
    assert len(names) > 300 and {"add", "scan", "pallas_call", "bcoo_dot_general"} <= set(names)  # the walk works
    return names


@pytest.mark.long
def test_every_primitive_of_the_installed_jax_is_in_the_catalogue(installed):
    missing = [name for name in installed if name not in CATALOGUE]
    assert not missing, (
        f"jax {jax.__version__} defines primitives the catalogue lacks: {missing}. "
        "Give each a row in fpemu/_jax/primitives.py (its kind under emulate and under scalify), a rule where the "
        "kind needs one, and a place in docs/emulate.md's rule table."
    )


def test_every_rule_of_emulate_has_the_catalogues_kind():
    with_rules = {"rounded", "exact", "dot", "conv", "convert", "inline", "call", "control", "bound"}
    assert {name: entry.kind for name, entry in RULES.items()} == {
        name: t.emulate for name, t in CATALOGUE.items() if t.emulate in with_rules
    }


@pytest.mark.long
def test_every_primitive_with_a_scale_rule_kind_has_its_rule(installed):
    """The kinds that need a registered rule have one for every primitive this JAX defines (``tile`` and
    ``stage`` only exist from jax 0.12); the fallback and plain kinds need none; every registered rule of a
    JAX primitive has the catalogue's kind."""
    needs_rule = set(SCALIFY_KINDS) - {"unscale", "plain", "unsupported", "kernel"}
    missing = [name for name in installed if CATALOGUE[name].scalify in needs_rule and name not in SCALIFY_RULE_KINDS]
    assert not missing
    wrong = {
        name: kind
        for name, kind in SCALIFY_RULE_KINDS.items()
        if kind != "scale primitive" and CATALOGUE[name].scalify != kind
    }
    assert not wrong
    table = scalify_core.rule_table()
    assert table["exp"] == "unscale" and table["add"] == "rule" and "pallas_call" not in table


def test_a_rule_of_another_kind_is_refused():
    with pytest.raises(
        ValueError, match=r"the emulate rule of 'exp' is registered as 'exact', but .* lists it as 'rounded'"
    ):
        check_kind("emulate", "exp", "exact")
    with pytest.raises(ValueError, match=r"'my_op' has no row in the primitive catalogue \(fpemu/_jax/primitives.py\)"):
        check_kind("scalify", "my_op", "rule")


def _doc_table() -> dict[str, set[str]]:
    """docs/emulate.md's rule table: {the row's kind: the primitive names it lists}."""
    text = (ROOT / "docs" / "emulate.md").read_text()
    section = text.split("## What is rounded: the rule table", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("kind", "---"):
            rows[cells[0]] = {name for name in re.findall(r"`([^`]+)`", cells[1]) if re.fullmatch(r"[\w-]+", name)}
    return rows


# docs/emulate.md's rows -> the catalogue's kinds they list (`kernel`: described, not listed)
DOC_ROWS = {
    "rounded": ("rounded",),
    "exact": ("exact",),
    "dot": ("dot",),
    "conv": ("conv",),
    "convert": ("convert",),
    "nested jit": ("call", "inline"),
    "control flow": ("control",),
    "no float result": ("bound",),
    "unsupported": ("unsupported",),
}


def test_the_rule_table_of_the_docs_lists_the_catalogue():
    rows = _doc_table()
    assert set(DOC_ROWS) <= set(rows)
    kernel = set(names_of("emulate", "kernel"))  # the unsupported row names a few as examples
    for row, kinds in DOC_ROWS.items():
        listed, catalogued = rows[row], set(names_of("emulate", *kinds))
        assert catalogued <= listed and listed - catalogued <= (kernel if row == "unsupported" else set()), (
            row,
            sorted(listed - catalogued),
            sorted(catalogued - listed),
        )
    assert set(EMULATE_KINDS) == {kind for kinds in DOC_ROWS.values() for kind in kinds} | {"kernel"}
