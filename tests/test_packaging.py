"""Installs are pinned to what passed: constraints.txt pins every dependency that
pyproject.toml declares, each pin satisfies its declared range, and every private name
of diffrax / equinox that the package reaches for still resolves (`_diffrax_compat`)."""

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    name = canonicalize_name(project["name"])
    return [r for r in map(Requirement, reqs) if canonicalize_name(r.name) != name]  # not its own extras


PINS = _pins((ROOT / "constraints.txt").read_text())


@pytest.mark.parametrize("req", _declared(), ids=str)
def test_every_declared_dependency_is_pinned_within_its_range(req):
    name = canonicalize_name(req.name)
    assert name in PINS, f"constraints.txt does not pin {req.name}: run `make constraints` after `make test-latest`"
    assert req.specifier.contains(PINS[name], prereleases=True), (
        f"constraints.txt pins {req.name}=={PINS[name]}, outside pyproject.toml's {req.specifier}"
    )


def test_pin_parser_can_fail():
    assert _pins("a==1\n# c\nB_c==2.0  # why\n") == {"a": "1", "b-c": "2.0"}
    with pytest.raises(AssertionError, match="not an exact pin"):
        _pins("jax>=0.4")


def test_readme_names_the_tested_versions():
    """README says which versions the suite passed with: the pins of the core stack."""
    readme = (ROOT / "README.md").read_text()
    for name in ("jax", "diffrax", "equinox"):
        assert re.search(rf"{name} {re.escape(PINS[name])}\b", readme), f"README.md does not name {name} {PINS[name]}"


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_private_names_still_resolve():
    from invariant_jax import _diffrax_compat as compat

    assert set(compat.CHECKED_AGAINST) >= {"diffrax", "equinox"}
    for name in compat.INTERNALS:
        _resolve(name)  # AttributeError / ImportError names the private name that moved
    with pytest.raises((AttributeError, ImportError)):
        _resolve("diffrax._term.NoSuchTerm")


def test_private_names_are_all_listed():
    """Every `equinox._x` / `diffrax._x` / `equinox.internal` import in the package is in
    `_diffrax_compat.INTERNALS` (and made in that module alone)."""
    from invariant_jax import _diffrax_compat as compat

    listed = {n.rsplit(".", 1)[0] for n in compat.INTERNALS} | set(compat.INTERNALS)
    for path in (ROOT / "invariant_jax").rglob("*.py"):
        for mod, names in re.findall(
            r"^\s*from ((?:diffrax|equinox)\.(?:_\w+|internal)[\w.]*) import ([\w, ]+)", path.read_text(), re.M
        ):
            for n in names.replace(" ", "").split(","):
                assert f"{mod}.{n}" in listed or mod in listed, f"{path.name}: {mod}.{n} not in INTERNALS"


_PRIVATE_MODULE = re.compile(r"^(diffrax|equinox)\.(_\w*|internal)(\.|$)")


def _private_uses(source: str) -> list[str]:
    """Where Python source reaches a private name of diffrax or equinox: an import of a private
    module (`diffrax._term`, `equinox.internal`, ...) or of an `_`-prefixed name from them, an
    `_`-prefixed or `.internal` attribute of the modules themselves (`eqx._errors`,
    `diffrax._integrate`, `eqx.internal`), or a lookup by string (`importlib.import_module`)."""
    tree = ast.parse(source)
    aliases, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("diffrax", "equinox"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if _PRIVATE_MODULE.match(a.name):
                    out.append(f"{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("diffrax", "equinox"):
            if _PRIVATE_MODULE.match(node.module):
                out.append(f"{node.lineno}: from {node.module} import ...")
            out += [
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") or a.name == "internal"
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _PRIVATE_MODULE.match(node.value):
            out.append(f"{node.lineno}: {node.value!r}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and (node.attr.startswith("_") or node.attr == "internal")
        ):
            out.append(f"{node.lineno}: {aliases[node.value.id]}.{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr in _PRIVATE_ATTRIBUTES:
            out.append(f"{node.lineno}: .{node.attr}")
    return out


# Private attributes of equinox objects (an `Enumeration`, its items): those INTERNALS lists,
# and the items' `_value` (read `result_code` instead).
_PRIVATE_ATTRIBUTES = {"_value", "_enumeration", "_index_to_message", "_name_to_item", "EQX_ON_ERROR"}


def test_private_names_of_diffrax_and_equinox_only_in_diffrax_compat():
    """Only `invariant_jax/_diffrax_compat.py` touches diffrax's and equinox's internals
    (`equinox.internal`, `diffrax._term.WrapTerm`, ...); the package and the benchmarks reach
    them through its public wrappers, so a new diffrax or equinox means reading one file."""
    files = sorted((ROOT / "invariant_jax").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    bad = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in files
        if path.name != "_diffrax_compat.py"
        for use in _private_uses(path.read_text(encoding="utf-8"))
    ]
    assert not bad, "route these through invariant_jax/_diffrax_compat.py (and list them in INTERNALS):\n" + "\n".join(
        bad
    )
    from invariant_jax._diffrax_compat import INTERNALS

    assert {n.rsplit(".", 1)[1] for n in INTERNALS if n.rsplit(".", 1)[1].startswith("_")} <= _PRIVATE_ATTRIBUTES
    compat = _private_uses((ROOT / "invariant_jax" / "_diffrax_compat.py").read_text(encoding="utf-8"))
    assert compat, "the scan finds nothing in _diffrax_compat.py itself, so it cannot fail"


def test_private_use_scan_can_fail():
    src = (
        "import equinox.internal as eqxi\nimport equinox as eqx\nimport diffrax as dfx\n"
        "from diffrax._term import WrapTerm\nfrom equinox import _errors\n"
        "x = eqx._enum\ny = dfx._integrate\nz = eqx.internal\nimportlib.import_module('diffrax._solution')\n"
        "ok = eqx.Module, dfx.ODETerm\nc = RESULTS.successful._value\n"
    )
    assert [u.split(":")[0] for u in _private_uses(src)] == ["1", "4", "5", "9", "6", "7", "8", "11"]


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs(path):
    """Notebooks are stored as their generators write them (`notebooks/make_*.py`), with
    no outputs: a re-run adds no megabytes to the history, and the suite executes each
    one (tests/test_notebook_*.py)."""
    import json

    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert cells, f"{path.name} has no code"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in cells), (
        f"{path.name} carries outputs: write it again with notebooks/make_*.py (without --execute)"
    )
    assert path.stat().st_size < 100_000


def test_step_budget_defaults_written_once():
    """The flow step budgets (`MAX_STEPS`, `KINK_MAX_STEPS`) are written once, in
    `invariant_jax/_defaults.py`: no `max_steps` / `max_flow_steps` default repeats their
    value as a literal (other budgets, e.g. Newton's, are their own defaults)."""
    from invariant_jax import _defaults

    pkg = Path(__file__).resolve().parent.parent / "invariant_jax"
    literal = []
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                pairs.append((node.target.id, node.value))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
                pairs += [(a.arg, d) for a, d in zip(args, defaults + node.args.kw_defaults) if d is not None]
            for name, value in pairs:
                if (
                    name in ("max_steps", "max_flow_steps")
                    and isinstance(value, ast.Constant)
                    and value.value in (_defaults.MAX_STEPS, _defaults.KINK_MAX_STEPS)
                    and path.name != "_defaults.py"
                ):
                    literal.append(f"{path.relative_to(pkg)}:{value.lineno} {name} = {value.value}")
    assert not literal, literal
