"""The support window (README, "Requirements") is stated once in pyproject.toml and tested by CI.

pyproject.toml's ``requires-python`` and jax/jaxlib bounds are what pip enforces; the Makefile's
``OLDEST_JAX`` is the release ``make smoke-oldest`` installs, and .ci/run runs the targets the README
names. A bound that moves without the others (a claim that no run checks) fails here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


def _bounds(specifier) -> tuple[Version, Version]:
    """(lowest allowed, first excluded) of a ``>=a,<b`` specifier."""
    ops = {spec.operator: Version(spec.version) for spec in specifier}
    assert set(ops) == {">=", "<"}, f"expected '>=a,<b', got {specifier}"
    return ops[">="], ops["<"]


def test_jax_and_jaxlib_share_one_window_whose_oldest_release_ci_installs():
    deps = _dependencies()
    jax_bounds, jaxlib_bounds = _bounds(deps["jax"].specifier), _bounds(deps["jaxlib"].specifier)
    assert jax_bounds == jaxlib_bounds
    oldest = re.search(r"^OLDEST_JAX := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert oldest and Version(oldest.group(1)) == jax_bounds[0]


def test_python_window_matches_the_pythons_ci_runs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lowest, excluded = _bounds(Requirement(f"python{project['requires-python']}").specifier)
    makefile = (ROOT / "Makefile").read_text()
    found = sorted(re.findall(r"\.ci/find-python (3\.\d+)", makefile), key=Version)
    # every supported minor version has a run (the oldest JAX on the lowest, the newest on the others)
    supported = [f"3.{minor}" for minor in range(lowest.minor, excluded.minor)]
    assert sorted(set(found), key=Version) == supported


def _requirements_section() -> str:
    return (ROOT / "README.md").read_text().split("## Requirements", 1)[1].split("\n## ", 1)[0]


def test_the_readme_states_the_window_of_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    jax_lowest, jax_excluded = _bounds(_dependencies()["jax"].specifier)
    py_lowest, py_excluded = _bounds(Requirement(f"python{project['requires-python']}").specifier)
    stated = f"jax and jaxlib {jax_lowest} up to (not including) {jax_excluded}, on Python {py_lowest} to 3.{py_excluded.minor - 1}"
    assert stated in " ".join(_requirements_section().split()).replace("**", "")


def test_ci_runs_every_target_the_readme_names():
    requirements = _requirements_section()
    named = set(re.findall(r"`make ([\w-]+)`", requirements))
    assert named == {"test", "test-long", "test-newest", "smoke-oldest", "smoke-313"}
    run = (ROOT / ".ci" / "run").read_text()
    assert set(re.search(r"for target in ([\w\s-]+); do", run).group(1).split()) == named
