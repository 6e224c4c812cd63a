"""The package's shape, checked: layers, no import cycles, no private names across packages, small modules.

docs/architecture.md is the map these tests hold the code to. Every ``import`` statement of every
module of ``fpemu`` (the ``kernels/`` folder read as ``fpemu.kernels``) is read with `ast`, inside
functions too. An edge goes to the module an import names (``from a.b import c`` names ``a.b.c``
when that is a module, else ``a.b``); the implicit import of parent packages is not an edge
(every submodule would otherwise depend on ``fpemu/__init__``, the public facade on top).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"fpemu": ROOT / "fpemu", "fpemu.kernels": ROOT / "kernels"}

# The layers, lowest first (docs/architecture.md). A module may import its own layer or lower ones.
LAYERS: tuple[tuple[str, int], ...] = (
    ("fpemu._checkout", 0),
    ("fpemu._text", 0),
    ("fpemu.deprecation", 0),  # names of an earlier release: the one warning every renamed name gives
    ("fpemu._jax", 0),  # what fpemu knows of JAX: the primitive catalogue, the version shim
    ("fpemu._core", 1),
    ("fpemu._args", 2),
    ("fpemu._engine", 3),
    ("fpemu._ops", 4),
    ("fpemu._scaled", 5),  # the scaled formats' engine: checked-once cores for scaled and training
    ("fpemu.scaled", 5),  # the public face of the scaled formats: argument checks, BlockArray, matmul
    ("fpemu._training", 6),  # training recipes: operand quantizers built on scaled, used by emulate
    ("fpemu._emulate", 7),
    ("fpemu.kernels", 9),
    ("fpemu.testing", 9),
    ("fpemu.scalify", 9),
    ("fpemu.tools", 10),
    ("fpemu.__main__", 10),
    ("fpemu", 8),  # the public facade, fpemu/__init__.py: the layers below, curated (the rest load lazily)
)

# A package is the unit of privacy: a module may use another package's non-underscore names only.
PACKAGES = ("fpemu.scaled", "fpemu.kernels", "fpemu.testing", "fpemu.scalify", "fpemu.tools")
# The tools use nothing but the public API.
PUBLIC_ONLY = ("fpemu.tools", "fpemu.__main__")

# Imports inside functions: optional dependencies, and these (importer, imported) pairs, each with its
# reason. They are not exceptions to the layers or to the acyclic graph: each goes down or sideways.
OPTIONAL_DEPENDENCIES = ("matplotlib", "hypothesis", "gfloat", "sklearn", "torch", "flax", "PIL")
LAZY_IMPORTS = {
    ("fpemu._ops.quantize", "fpemu._ops.quantize_pallas"): "backend='pallas' loads Pallas (a fifth of a "
    "second on import), so import fpemu does not; the engine beside it in the same layer",
    ("fpemu.testing", "fpemu.testing._strategies"): "the strategies need hypothesis, an optional dependency",
}

MAX_LINES = 500
LONG_MODULES: dict[str, str] = {
    # module: why it is longer than MAX_LINES (tools and tests are exempt)
}


@dataclasses.dataclass(frozen=True)
class Import:
    importer: str
    module: str  # the module the statement names
    names: tuple[str, ...]  # the names taken from it (empty for `import a.b`)
    line: int
    in_function: bool


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def modules() -> dict[str, Path]:
    found = {}
    for package, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(package, root, path)] = path
    return found


MODULES = modules()


def _resolve(name: str) -> str:
    """``kernels.x`` (how a checkout may spell it) is ``fpemu.kernels.x``."""
    return "fpemu." + name if name == "kernels" or name.startswith("kernels.") else name


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(module, _resolve(alias.name), (), child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pytest.fail(f"{module}:{child.lineno}: relative import (fpemu uses absolute imports)")
                base = _resolve(child.module or "")
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    if sub in MODULES:  # `from a import b` where a.b is a module
                        found.append(Import(module, sub, (), child.lineno, in_function))
                    else:
                        found.append(Import(module, base, (alias.name,), child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]
INTERNAL = [imp for imp in IMPORTS if imp.module == "fpemu" or imp.module.startswith("fpemu.")]


def layer(module: str) -> int:
    for prefix, number in LAYERS:
        if module == prefix or (prefix != "fpemu" and module.startswith(prefix + ".")):
            return number
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def package(module: str) -> str:
    for name in PACKAGES:
        if module == name or module.startswith(name + "."):
            return name
    return "fpemu"


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def test_imports_go_down_the_layers():
    wrong = [
        f"{imp.importer} (layer {layer(imp.importer)}) imports {imp.module} (layer {layer(imp.module)}), line {imp.line}"
        for imp in INTERNAL
        if layer(imp.module) > layer(imp.importer)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in INTERNAL:
        # imports inside functions count too: a lazy import may not close a loop either
        if imp.module in MODULES and imp.module != imp.importer:
            graph[imp.importer].add(imp.module)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert not cycles, f"import cycles: {cycles}"


def test_imports_inside_functions_are_optional_dependencies_or_listed():
    wrong = []
    for imp in IMPORTS:
        if not imp.in_function:
            continue
        top = imp.module.split(".")[0]
        if top in OPTIONAL_DEPENDENCIES or (imp.importer, imp.module) in LAZY_IMPORTS:
            continue
        wrong.append(f"{imp.importer}:{imp.line} imports {imp.module} inside a function")
    assert not wrong, "\n".join(wrong)


def test_no_private_names_across_packages():
    wrong = []
    for imp in INTERNAL:
        source, target = package(imp.importer), package(imp.module)
        if source == target:
            continue
        private_names = [n for n in imp.names if n.startswith("_") and n != "__version__"]
        # Below another package's root, every module named must be public; core's private
        # subpackages (fpemu._core, _engine, ...) are the library's internal API for its own packages.
        below = imp.module[len(target) :].split(".")
        private_module = any(part.startswith("_") for part in below if part)
        if source in PUBLIC_ONLY or imp.importer in PUBLIC_ONLY:
            private_module = any(part.startswith("_") for part in imp.module.split("."))
        elif target == "fpemu":
            private_module = False
        if private_names or private_module:
            wrong.append(f"{imp.importer}:{imp.line} imports {imp.module} {list(imp.names) or ''}")
    assert not wrong, "private names across packages:\n" + "\n".join(wrong)


def test_modules_are_small():
    too_long = {}
    for module, path in MODULES.items():
        if module.startswith(("fpemu.tools", "fpemu.__main__")) or module in LONG_MODULES:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            too_long[module] = lines
    assert not too_long, f"modules over {MAX_LINES} lines (split them, or list them with a reason): {too_long}"


def test_long_module_list_is_current():
    for module, reason in LONG_MODULES.items():
        assert module in MODULES, f"{module} is listed in LONG_MODULES but does not exist"
        assert reason.strip()


# -- the walk of one emulated dot ---------------------------------------------------------------------
#
# Issue 30's measure of the house: one dot of ``emulate(f, Policy(dot=recipe))`` enters at most
# eight rooms (the LAYERS entries), never climbs back up a floor, and never re-enters a public
# entry point (internal callers use checked-once cores). The walk is every call made while JAX
# traces the dot rule (the forward GEMM) and the recipe's backward (dgrad and wgrad). A dot under a
# `DotPolicy`, and convolutions, are held to the same rules.

WALK_MAX_ROOMS = 8
WALK_STARTS = {
    ("fpemu._emulate.rules_dot", "dot_general"),
    ("fpemu._emulate.rules_dot", "conv_general_dilated"),
    ("fpemu._training.gemm_vjp", "gradients"),
}
# Public functions that are lookups, not entry points: they read the registry (the one source of
# format facts, which every layer reads) and check nothing but a name.
LOOKUPS = {"get_format", "scale_kind"}


def room(module: str) -> str:
    """The LAYERS entry a module belongs to."""
    for prefix, _ in LAYERS:
        if module == prefix or (prefix != "fpemu" and module.startswith(prefix + ".")):
            return prefix
    return "fpemu"


def _public_entry_points() -> set:
    """The code of every public function of ``fpemu`` and ``fpemu.scaled`` but the `LOOKUPS` (and of
    the wrappers that check a renamed keyword of an earlier release)."""
    import fpemu
    import fpemu.scaled

    codes = set()
    for module in (fpemu, fpemu.scaled):
        for name in sorted(set(module.__all__) - LOOKUPS):
            f = getattr(module, name)
            while callable(f) and not isinstance(f, type):
                code = getattr(f, "__code__", None)
                if code is not None:
                    codes.add(code)
                f = getattr(f, "__wrapped__", getattr(f, "__func__", None))
    return codes


def _dense(x, w):
    import jax.numpy as jnp

    return jnp.tanh(x @ w)


def _conv(x, w):
    import jax.numpy as jnp
    from jax import lax

    return jnp.tanh(lax.conv_general_dilated(x, w, (1, 1), "SAME"))


def _walk(policy, step) -> list[tuple[str, str, str, object]]:
    """(caller's module, callee's module, callee's name, callee's code) of every call of an fpemu
    function made inside the walk of ``jax.grad`` of ``emulate(step, policy)``, traced afresh (JAX's
    caches cleared)."""
    import jax
    import jax.numpy as jnp

    import fpemu

    key = jax.random.key(0) if policy.stochastic else None
    if step is _dense:
        x, w = jnp.ones((32, 64), jnp.float32), jnp.ones((64, 16), jnp.float32)
    else:
        x, w = jnp.ones((2, 8, 6, 6), jnp.float32), jnp.ones((4, 8, 3, 3), jnp.float32)
    if policy.stateful:  # delayed scaling: the amax histories are the first argument
        state = fpemu.init_training_state(step, policy, x, w)
        f = functools.partial(fpemu.emulate(step, policy, key=key, state=True), state)
        loss = jax.grad(lambda x, w: f(x, w)[0].sum(), argnums=(0, 1))
    else:
        f = fpemu.emulate(step, policy, key=key)
        loss = jax.grad(lambda x, w: f(x, w).sum(), argnums=(0, 1))
    jax.clear_caches()
    calls: list[tuple[str, str, str, object]] = []
    depth = [0]

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        where = (frame.f_globals.get("__name__", ""), frame.f_code.co_name)
        starts = where in WALK_STARTS
        if event == "return":
            depth[0] -= starts
            return
        depth[0] += starts
        if depth[0] and where[0].startswith("fpemu") and frame.f_back is not None:
            calls.append((frame.f_back.f_globals.get("__name__", ""), where[0], where[1], frame.f_code))

    sys.setprofile(profile)
    try:
        jax.make_jaxpr(loss)(x, w)
    finally:
        sys.setprofile(None)
    return calls


def _walk_cases() -> list:
    import fpemu

    recipes = [pytest.param(fpemu.Policy(dot=name), _dense, id=name) for name in fpemu.TRAINING_RECIPES]
    dot_policy = fpemu.DotPolicy(
        lhs="e4m3fn", rhs="e5m2", accumulate="bf16", accumulate_every=16, accumulate_rounding="stochastic", out="bf16"
    )
    return [
        *recipes,
        pytest.param(fpemu.Policy(dot="mxfp8", conv="mxfp8"), _conv, id="mxfp8 conv"),
        pytest.param(fpemu.Policy(dot=dot_policy), _dense, id="DotPolicy"),
        pytest.param(fpemu.Policy(dot=dot_policy, conv=dot_policy), _conv, id="DotPolicy conv"),
    ]


@pytest.mark.parametrize(("policy", "step"), _walk_cases())
def test_the_walk_of_one_emulated_dot(policy, step):
    import fpemu

    calls = _walk(policy, step)
    rooms = {room(callee) for _, callee, _, _ in calls}
    # the walk was seen: the rule, and the product; a recipe's GEMM core and the scaled engine
    seen = {"fpemu._emulate", "fpemu._ops"}
    if isinstance(policy.dot, fpemu.TrainingRecipe):
        seen |= {"fpemu._training", "fpemu._scaled"}
    assert seen <= rooms, rooms
    assert len(rooms) <= WALK_MAX_ROOMS, sorted(rooms)
    layer_of = dict(LAYERS)
    climbs = sorted(
        {f"{caller} -> {callee}.{name}" for caller, callee, name, _ in calls
         if caller.startswith("fpemu") and layer_of[room(callee)] > layer_of[room(caller)]}
    )  # fmt: skip
    assert not climbs, climbs
    public = _public_entry_points()
    entered = sorted({f"{callee}.{name} (from {caller})" for caller, callee, name, code in calls if code in public})
    assert not entered, entered


def test_the_walk_sees_a_public_entry_point():
    """The check above can fail: a dot rule that called `fpemu.quantize` would be seen."""
    import fpemu

    public = _public_entry_points()
    assert fpemu.quantize.__code__ in public
    assert fpemu.dot_general.__code__ in public
    assert fpemu.scaled.quantize_dequantize.__wrapped__.__code__ in public


@pytest.mark.long
def test_import_fpemu_loads_no_tools_kernels_or_testing():
    """``import fpemu`` is the library: the command line, benchmarks, plots, Pallas and hypothesis load on use."""
    import subprocess

    code = (
        "import sys, fpemu; "
        "print(sorted(m for m in sys.modules if m.startswith(('fpemu.tools', 'fpemu.kernels', 'fpemu.testing', "
        "'matplotlib', 'hypothesis', 'jax.experimental.pallas'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


@pytest.mark.long
def test_kernels_import_from_a_plain_checkout(tmp_path):
    """A checkout on PYTHONPATH (nothing installed) imports ``fpemu.kernels`` from its ``kernels/`` folder."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        # setuptools' editable install puts its finder class (not an instance) on sys.meta_path
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]; "
        "import fpemu.kernels, fpemu.kernels.quantize as q; print(fpemu.kernels.__file__, q.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=tmp_path
    ).stdout.split()
    assert out == [str(ROOT / "kernels" / "__init__.py"), "fpemu.kernels.quantize"]


def test_every_package_is_installed():
    """pyproject.toml lists the packages a wheel holds (``kernels/`` as ``fpemu.kernels``): every folder
    with an ``__init__.py`` is one of them, so that ``pip install .`` installs all of fpemu (an editable
    install imports any folder of the checkout, and did not notice one missing)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join((name, *init.parent.relative_to(source).parts))
        for name, source in SOURCES.items()
        for init in source.rglob("__init__.py")
    }
    assert sorted(config["packages"]) == sorted(folders)
    assert config["package-dir"] == {"fpemu.kernels": "kernels"}
