"""Installs are pinned to what passed: constraints.txt pins every dependency that
pyproject.toml declares, each pin satisfies its declared range, and every private name
of diffrax / equinox that the package reaches for still resolves (`_diffrax_compat`)."""

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
    assert req.specifier.contains(PINS[name], prereleases=True), \
        f"constraints.txt pins {req.name}=={PINS[name]}, outside pyproject.toml's {req.specifier}"


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
        for mod, names in re.findall(r"^\s*from ((?:diffrax|equinox)\.(?:_\w+|internal)[\w.]*) import ([\w, ]+)",
                                     path.read_text(), re.M):
            for n in names.replace(" ", "").split(","):
                assert f"{mod}.{n}" in listed or mod in listed, f"{path.name}: {mod}.{n} not in INTERNALS"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs(path):
    """Notebooks are stored as their generators write them (`notebooks/make_*.py`), with
    no outputs: a re-run adds no megabytes to the history, and the suite executes each
    one (tests/test_notebook_*.py)."""
    import json

    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert cells, f"{path.name} has no code"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in cells), \
        f"{path.name} carries outputs: write it again with notebooks/make_*.py (without --execute)"
    assert path.stat().st_size < 100_000
