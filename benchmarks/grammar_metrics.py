"""The grammar of the public API, measured (issue 31): parameter counts of the public entry
points, function lengths, outcome vocabularies, private names that cross modules, and
inline validation outside `_checks`.

Reads a git revision (default: the working tree) without touching the checkout: the
revision is exported with `git archive` into a temporary folder, read with `ast`, and
imported in a subprocess for the signatures. Side by side for two revisions:

    PYTHONPATH=. python benchmarks/grammar_metrics.py --rev f79dbb6 --rev HEAD \
        --out benchmarks/results/grammar_metrics.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from _output import ROOT, output_path, write_json

MAX_LINES = 80
MAX_PARAMS = 12
# entry points: public functions (without their `**deprecated` shim), and option classes
# (their fields are what a user sets)
# top-level private modules shared by the whole package (the layout's first rows)
SHARED = {"_version", "_defaults", "_scalar_checks", "_diffrax_compat", "_results", "_checks"}
RESULT_CLASS = re.compile(r"(Result|Study|Report|Flow|Comparison|Reachability|Connectivity|Point|Path|Component)$")
INLINE_CHECK = re.compile(r"^\s*(el)?if (not \(?|.*\bor not \(?)(np|math)\.isfinite\(")  # a statement, not a filter


def _export(rev: str | None, dest: Path) -> Path:
    if rev is None:
        return ROOT
    data = subprocess.run(
        ["git", "archive", rev, "invariant_jax", "benchmarks"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _module(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _private_module_outside(importer: str, target: str) -> bool:
    """`target` has a private part that `importer` is not inside of."""
    parts = target.split(".")
    for i, p in enumerate(parts[1:], start=1):
        if p.startswith("_") and not p.startswith("__"):
            owner = ".".join(parts[:i])  # the package that owns the private module
            if i == 1 and p in SHARED:
                return False
            return not (importer == owner or importer.startswith(owner + "."))
    return False


def static_metrics(root: Path) -> dict:
    long_functions, private_names, private_modules, private_attributes, inline_checks = [], [], [], [], []
    pkg = root / "invariant_jax"
    modules = {_module(root, p) for p in pkg.rglob("*.py")}  # `from .x import _y` may name a submodule
    for path in sorted(pkg.rglob("*.py")):
        module = _module(root, path)
        text = path.read_text()
        tree = ast.parse(text)
        classes = {id(n): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    owner = classes.get(id(node))
                    long_functions.append([f"{module}.{owner + '.' if owner else ''}{node.name}", lines])
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, path.name == "__init__.py", node)
                if not target.startswith("invariant_jax"):
                    continue
                if _private_module_outside(module, target):
                    private_modules.append(f"{module} <- {target}")
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and f"{target}.{a.name}" not in modules:
                        private_names.append(f"{module} <- {target}.{a.name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls", "type"):
                    continue
                if node.attr in ("_replace", "_asdict", "_fields", "_make", "_value_", "_name_", "_member_map_"):
                    continue  # NamedTuple and Enum protocol
                private_attributes.append(f"{module}:{node.lineno} .{node.attr}")
        if path.name not in ("_checks.py", "_scalar_checks.py"):
            inline_checks += [
                f"{module}:{i}" for i, line in enumerate(text.splitlines(), 1) if INLINE_CHECK.search(line)
            ]
    bench = []
    for path in sorted((root / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("invariant_jax"):
                private_module = any(p.startswith("_") for p in node.module.split(".")[1:])
                bench += [
                    f"{path.name} <- {node.module}.{a.name}"
                    for a in node.names
                    if private_module or a.name.startswith("_")
                ]
            elif isinstance(node, ast.Import):
                bench += [
                    f"{path.name} <- {a.name}"
                    for a in node.names
                    if a.name.startswith("invariant_jax.") and any(p.startswith("_") for p in a.name.split(".")[1:])
                ]
    return dict(
        long_functions=sorted(long_functions, key=lambda r: -r[1]),
        private_names=private_names,
        private_modules=private_modules,
        private_attributes=private_attributes,
        inline_checks=inline_checks,
        benchmark_private_imports=bench,
    )


_SIGNATURES = r"""
import inspect, json, sys, importlib, dataclasses
import invariant_jax as ij
rows, classes, seen = [], [], set()
# `converge`: the convergence phase's module in older revisions; now its deprecated alias
# (importing it warns), whose names `channels` has already counted
for modname in ["invariant_jax", "invariant_jax.sweep", "invariant_jax.channels", "invariant_jax.topology",
                "invariant_jax.kinks", "invariant_jax.converge", "invariant_jax.datasets"]:
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        continue
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    for name in names:
        obj = getattr(mod, name, None)
        if obj is None or id(obj) in seen or not getattr(obj, "__module__", "").startswith("invariant_jax"):
            continue
        seen.add(id(obj))
        where = f"{modname.replace('invariant_jax', 'ij')}.{name}"
        if inspect.isfunction(obj):
            # `**deprecated` (the old keywords' shim, see `_checks.take_deprecated`) is not counted
            params = [p for p in inspect.signature(obj).parameters.values()
                      if not (p.kind is p.VAR_KEYWORD and p.name == "deprecated")]
            rows.append([where, len(params)])
        elif inspect.isclass(obj):
            fields = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
            if fields and __import__("re").search(r"(Options|Config|Rules|Times|Objective)$", name):
                rows.append([where, len(fields)])
            if sys.argv[1] and __import__("re").search(sys.argv[1], name):
                has = "result" in fields or isinstance(getattr(obj, "result", None), property) or hasattr(obj, "result")
                ok = "success" in fields or hasattr(obj, "success")
                classes.append([where, bool(has), bool(ok)])
# STOP_REASONS (deprecated) lives on the alias module `converge` alone: `channels` has none
sweep, converge = (importlib.import_module(f"invariant_jax.{m}") for m in ("sweep", "converge"))
pairs = [(ij, "RESULTS"), (ij, "STATUSES"), (sweep, "STATUSES"), (converge, "STOP_REASONS")]
vocab = {k: k in getattr(m, "__all__", dir(m)) for m, k in pairs}
print(json.dumps(dict(parameters=sorted(rows, key=lambda r: -r[1]), result_classes=classes, vocabularies=vocab)))
"""


def import_metrics(root: Path) -> dict:
    env = {"PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _SIGNATURES, RESULT_CLASS.pattern],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["over_12_parameters"] = [r for r in data["parameters"] if r[1] > MAX_PARAMS]
    return data


def measure(rev: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = _export(rev, Path(tmp))
        static = static_metrics(root)
        imported = import_metrics(root)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev or "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    counts = {
        "public_callables_over_12_parameters": len(imported["over_12_parameters"]),
        "max_parameters": max(r[1] for r in imported["parameters"]),
        "functions_over_80_lines": len(static["long_functions"]),
        "private_names_imported_across_modules": len(static["private_names"]),
        "private_modules_imported_from_other_packages": len(static["private_modules"]),
        "private_attributes_reached": len(static["private_attributes"]),
        "benchmark_private_imports": len(static["benchmark_private_imports"]),
        "inline_finite_checks_outside_checks": len(static["inline_checks"]),
        "result_classes_without_result": sum(not r[1] for r in imported["result_classes"]),
        "result_classes_without_success": sum(not r[2] for r in imported["result_classes"]),
        "outcome_vocabularies": sum(imported["vocabularies"].values()),
    }
    return dict(rev=rev or "working tree", commit=commit, counts=counts, **static, **imported)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", help="a git revision (repeatable); default the working tree")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/local/grammar_metrics.json)")
    args = parser.parse_args(argv)
    revs = args.rev or [None]
    runs = [measure(r) for r in revs]
    for key in runs[0]["counts"]:
        print(f"{key:48s} " + "  ".join(f"{r['counts'][key]:>6}" for r in runs))
    write_json(
        output_path(args.out, "grammar_metrics.json"),
        dict(benchmark="grammar_metrics", max_lines=MAX_LINES, max_parameters=MAX_PARAMS, runs=runs),
    )


if __name__ == "__main__":
    main()
