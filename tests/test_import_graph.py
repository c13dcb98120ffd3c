"""The package's import graph (read from the source with `ast`, so nothing is imported):
no cycle, every import points up the layout of shared/DESIGN.md, and imports inside
functions only for heavy optional dependencies, which `import invariant_jax` (and so the
CLI's start-up) never loads."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import invariant_jax

ROOT = Path(invariant_jax.__file__).parent

# The layout order: a module imports only modules earlier in this list. It is the list of
# shared/DESIGN.md, except that `_diffrax_compat` comes before `_results` (which lists the
# enumeration's members through it), `_scalar_checks` (NumPy only, so `graph` may use
# it) before `_checks`, `solvers` before `options` (`SolverOptions` checks
# solver names against the registry) and `converge` after `channels`: the convergence
# phase lives in `channels` (`channels._flow_phase`, `channels._converge`; its flow phase
# runs through `sweep_flows`), and `converge` is its deprecated alias for one release,
# which re-exports `invariant_jax.channels`' names.
LAYOUT = [
    "_version",
    "_defaults",
    "_scalar_checks",
    "_diffrax_compat",
    "_results",
    "_checks",
    "_compile",
    "graph",
    "activations",
    "network",
    "losses",
    "datasets",
    "invariants",
    "topology",
    "regularizers",
    "solvers",
    "options",
    "flow",
    "kinks",
    "training",
    "pruning",
    "sweep",
    "channels",
    "converge",
    "cli",
]

# Imported inside functions only: heavy to import and needed by few code paths.
LAZY = ("matplotlib", "pyarrow", "sklearn", "scipy.stats", "pandas")


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = ("invariant_jax",) + p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _targets(module: str, node) -> list[str]:
    """The invariant_jax modules an import statement in `module` names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "invariant_jax"]
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(base + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != "invariant_jax":
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


@functools.cache
def _imports():
    """`(module, target, inside_function, lineno, node)` for every import statement (parsed
    when a test first asks, not at collection, which every pytest-xdist worker pays)."""
    rows = []

    def visit(module, node, inside):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                rows.extend((module, t, inside, child.lineno, child) for t in _targets(module, child) or [None])
            visit(module, child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    for module, path in MODULES.items():
        visit(module, ast.parse(path.read_text()), False)
    return rows


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, t, *_ in _imports():
        if t is not None and t != m:
            graph[m].add(t)
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in sorted(graph[m]):
            assert state.get(t) != 1, f"import cycle: {' -> '.join(path[path.index(t) :] + [t]) if t in path else t}"
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m, [m])


def test_imports_point_up_the_layout():
    tops = {_top(m) for m in MODULES} - {"", "__main__"}
    assert tops <= set(LAYOUT), f"modules missing from LAYOUT: {sorted(tops - set(LAYOUT))}"
    bad = [
        f"{m}:{line} imports {t}"
        for m, t, _, line, _ in _imports()
        if t is not None
        and _top(m) in LAYOUT
        and _top(t) in LAYOUT
        and _top(m) != _top(t)
        and LAYOUT.index(_top(t)) > LAYOUT.index(_top(m))
    ]
    assert not bad, "imports against the layout order:\n" + "\n".join(bad)
    # graph stays NumPy-only
    assert not [n for m, _, _, _, n in _imports() if _top(m) == "graph" and "jax" in ast.unparse(n)]


def test_nothing_imports_the_deprecated_converge_alias():
    """`invariant_jax.converge` is an alias of `channels`' convergence phase that warns on
    import: no module of the package imports it (`ij.flow_then_newton` and the others come
    from `channels`), so `import invariant_jax` and its lazy names never warn."""
    bad = [f"{m}:{line}" for m, t, _, line, _ in _imports() if t == "invariant_jax.converge" and m != t]
    assert not bad, "import from invariant_jax.channels instead:\n" + "\n".join(bad)
    code = "import invariant_jax as ij; ij.flow_then_newton, ij.NewtonOptions, ij.weightnorm"
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], check=True, cwd=ROOT.parent)


def _reaches_for_jax(node) -> str | None:
    """Why an AST node of graph.py names JAX or a back door to it, or None."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] + (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        )
        if any(
            n.split(".")[0] in ("jax", "jaxlib", "jaxtyping", "equinox", "sys", "importlib", "builtins") for n in names
        ):
            return "imports " + ", ".join(names)
    if isinstance(node, ast.Name) and (
        "jax" in node.id.lower() or node.id in ("__import__", "sys", "importlib", "builtins")
    ):
        return f"names {node.id}"
    if isinstance(node, ast.Attribute) and (
        "jax" in node.attr.lower() or node.attr in ("modules", "import_module", "__import__")
    ):
        return f"reads .{node.attr}"
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.split(".")[0] in ("jax", "jaxlib", "equinox")
    ):
        return f"spells the module name {node.value!r}"
    return None


def test_graph_never_reaches_jax():
    """`graph` is NumPy only: it imports nothing of JAX (nor `sys`/`importlib`, the back doors
    through which it once found `jax.random` in `sys.modules`), names nothing JAX and spells no
    JAX module name; a typed key is converted by `network.random_dag`. Importing it and building
    a random graph loads no JAX module."""
    for door in (
        'import sys\nr = sys.modules.get("jax.random")',
        'from sys import modules\nr = modules["jax.random"]',
        'import importlib\nr = importlib.import_module("jax.random")',
        'r = __import__("jax")',
        'import builtins\nr = builtins.__import__("numpy").random',
        "from jax import random",
    ):
        assert any(_reaches_for_jax(n) for n in ast.walk(ast.parse(door))), f"the scan misses: {door}"
    path = MODULES["invariant_jax.graph"]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [f"graph.py:{n.lineno} {why}" for n in ast.walk(tree) if (why := _reaches_for_jax(n))]
    assert not bad, "graph.py reaches for JAX:\n" + "\n".join(bad)
    code = (
        "import sys, numpy as np, invariant_jax.graph as g; g.random_dag(2, 4, 1, 0.5, 3); "
        "g.random_dag(2, 4, 1, 0.5, np.array([0, 3], np.uint32)); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'equinox')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent
    ).stdout
    assert out.strip() == "[]", out


def test_function_level_imports_only_for_heavy_optional_dependencies():
    bad, seen = [], set()
    for m, _, inside, line, node in _imports():
        if not inside or id(node) in seen:
            continue
        seen.add(id(node))
        names = (
            [a.name for a in node.names] if isinstance(node, ast.Import) else ["." * node.level + (node.module or "")]
        )
        if not all(any(n == p or n.startswith(p + ".") for p in LAZY) for n in names):
            bad.append(f"{m}:{line} {ast.unparse(node)}")
    assert not bad, "move these imports to the top of their module:\n" + "\n".join(bad)


def test_import_loads_no_heavy_optional_dependency():
    code = (
        "import sys, invariant_jax, invariant_jax.cli; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {LAZY!r} or m in {LAZY!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent
    ).stdout
    assert out.strip() == "[]", out
