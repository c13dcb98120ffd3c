"""The shell commands in README.md, docs/*.md and benchmarks/README.md: every
`invariant-jax ...` line parses with the real argument parser (a renamed subcommand or
flag fails here), and README's `check` command and a small sweep run as written."""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from invariant_jax.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
FENCE = re.compile(r"^\s*```(\S*)\s*$")


def shell_commands(page: Path) -> list[str]:
    """`invariant-jax` command lines inside the page's non-Python fenced blocks, with
    backslash continuations joined and trailing `# comments` removed."""
    out, lang, buf = [], None, ""
    for line in page.read_text().splitlines():
        m = FENCE.match(line)
        if m:
            lang = None if lang is not None else m.group(1)
            continue
        if lang is None or lang in ("python", "toml"):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        cmd, buf = buf.strip(), ""
        if cmd.startswith("invariant-jax"):
            out.append(cmd)
    return out


def _argv(cmd: str) -> list[str]:
    return shlex.split(cmd, comments=True)[1:]


COMMANDS = [(p.relative_to(ROOT).as_posix(), c) for p in PAGES for c in shell_commands(p)]


def test_the_pages_have_commands():
    pages = {p for p, _ in COMMANDS}
    assert {"README.md", "docs/sweep.md", "docs/channels.md"} <= pages, pages
    assert {_argv(c)[0] for _, c in COMMANDS if _argv(c)} >= {"sweep", "check", "demo", "channels"}


@pytest.mark.parametrize("page,cmd", COMMANDS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(COMMANDS)])
def test_documented_command_parses(page, cmd):
    argv = _argv(cmd)
    assert argv and argv[0] in SUBCOMMANDS, f"{page}: unknown subcommand in {cmd!r}"
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{page}: `{cmd}` does not parse (exit {e.code})")


def test_a_wrong_flag_fails_the_parse():
    """The check above can fail: a flag that does not exist is refused."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--n-trajectories", "4"])


def _readme_command(sub: str) -> list[str]:
    cmds = [_argv(c) for c in shell_commands(ROOT / "README.md") if _argv(c)[:1] == [sub]]
    assert cmds, f"README.md has no `invariant-jax {sub}` command"
    return cmds[0]


def test_readme_check_command_passes(capsys):
    """README's `check` command, exactly as written, exits 0 and says why."""
    argv = _readme_command("check")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "drift/tol" in out and "conserved to solver tolerance" in out  # the table and the verdict
    n = int(argv[argv.index("--n-inits") + 1])
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] and ln.split()[0].isdigit()]
    assert len(rows) == n, out  # one row per initialization


@pytest.mark.slow  # ~50 s here (compiles the kink-aware engine); tests/test_sweep_cli.py runs the sweep CLI by default
def test_readme_sweep_command_runs_small(tmp_path, capsys):
    """README's first `sweep` command with 4 inits into a temporary folder."""
    argv = _readme_command("sweep")
    argv = [a for a in argv]
    for flag, value in (("--n-inits", "4"), ("--out", str(tmp_path / "run"))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    argv += ["--no-progress", "--no-figures", "--slots", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "run" / "manifest.json").exists(), out
    assert (tmp_path / "run" / "table.csv").exists(), out


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_shows_defaults(sub, capsys):
    """`invariant-jax SUB --help` names the default of every option that has one."""
    import argparse

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([sub, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    subparser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[sub]
    n = 0
    for action in subparser._actions:
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            shown = f"(default: {action.default})" in text
            named = "default" in (action.help or "").lower()  # a help that says it in words
            assert shown or named, (sub, action.option_strings, action.default)
            n += shown
    assert n >= 1 or sub in ("demo", "sweep"), f"{sub} --help shows no default"
    if sub == "sweep":  # flags left at None for the TOML file show SweepConfig's defaults
        assert "--n-inputs N_INPUTS (default: 3)" in text and "--data-seed DATA_SEED (default: 1)" in text
    if sub == "prune":
        assert "--epochs EPOCHS (default: 2000)" in text


def test_benchmark_output_defaults_to_an_ignored_folder(tmp_path, monkeypatch):
    """benchmarks/_output.py: without --out a script writes under results/local/ (never over
    the committed results), and the JSON records the command that produced it."""
    import json
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _output

    assert _output.output_path(None, "x.json") == ROOT / "benchmarks" / "results" / "local" / "x.json"
    assert _output.output_path(str(tmp_path / "y.json"), "x.json") == tmp_path / "y.json"
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "flow_vs_scipy.py"), "--n-inits", "2"])
    path = _output.write_json(tmp_path / "z.json", {"a": 1})
    rec = json.loads(path.read_text())
    assert rec["a"] == 1 and rec["command"].endswith("python benchmarks/flow_vs_scipy.py --n-inits 2")
    prov = rec["provenance"]  # how it was made: the code, the packages, the machine, the times
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:  # in a git checkout: the commit and whether tracked files differ from it
        assert prov["commit"] == head.stdout.strip() and isinstance(prov["dirty"], bool)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        assert prov["dirty"] == bool(dirty)
    from importlib.metadata import version

    assert prov["versions"]["jax"] == version("jax") and prov["versions"]["diffrax"] == version("diffrax")
    assert prov["python"] == platform.python_version() and prov["cpu_count"] == os.cpu_count()
    assert prov["started"] <= prov["finished"] and prov["finished"].endswith("+00:00")
    assert not list(tmp_path.glob(".*.tmp")), "write_json leaves no temporary file"
    ignore = (ROOT / ".gitignore").read_text().split()  # works without a git checkout too
    assert "/benchmarks/results/local/" in ignore, "benchmarks/results/local/ must be ignored by git"


def test_benchmarks_readme_lists_every_script():
    """DESIGN.md: benchmarks/ holds standalone scripts and "README.md lists them" (a row of
    its script table each)."""
    rows = {
        line.split("`")[1]
        for line in (ROOT / "benchmarks" / "README.md").read_text().splitlines()
        if line.startswith("| `")
    }
    missing = sorted(
        p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_") and p.name not in rows
    )
    assert not missing, f"benchmarks/README.md's script table does not list {missing}"


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in (ROOT / "benchmarks").glob("[!_]*.py") if p.name != "docs_tables.py"),
)
def test_every_benchmark_writes_through_output(script):
    """No script writes its results JSON by itself (that is how committed results got
    overwritten and commands went unrecorded): each takes `--out` and goes through
    `_output.output_path` / `write_json` / `save_figure`, and none names a committed results file as a default."""
    import re

    src = (ROOT / "benchmarks" / script).read_text()
    writes = ("write_json(", "save_figure(", "command()")
    assert "output_path(" in src and any(w in src for w in writes), (
        f"{script}: write results via benchmarks/_output.py (output_path, and write_json, save_figure or command())"
    )
    assert ".savefig(" not in src, f"{script}: save figures with _output.save_figure (it records the command)"
    assert '"--out"' in src, f"{script}: no --out option"
    assert not re.search(r'"results"\s*/', src), f"{script}: builds a path into benchmarks/results/ itself"


def test_readme_edge_list_example_reads(tmp_path):
    """README's edge-list example is a valid file for `--graph FILE` (names separated by
    spaces), with the edges it lists."""
    from invariant_jax.cli._common import read_edge_list

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(inputs:.*?)```", text, re.S)
    assert block, "README.md lost its edge-list example"
    path = tmp_path / "graph.txt"
    path.write_text(block.group(1))
    g = read_edge_list(str(path))
    edges = [ln.split() for ln in block.group(1).splitlines() if ln and ":" not in ln]
    assert len(g.edges) == len(edges) and len(g.inputs) == 2


def _recorded_command(rec) -> str:
    """The command a results JSON records: its top-level `"command"`, else `meta["command"]`."""
    cmd = rec.get("command") if isinstance(rec, dict) else None
    if not cmd and isinstance(rec, dict) and isinstance(rec.get("meta"), dict):
        cmd = rec["meta"].get("command")
    return cmd if isinstance(cmd, str) else ""


RESULTS = sorted(p for p in (ROOT / "benchmarks" / "results").rglob("*.json") if "local" not in p.parts)


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_committed_results_record_their_command(path):
    """Every committed results JSON names the command that produced it (issue 17): a
    non-empty `command` that runs an existing script of benchmarks/."""
    import json

    cmd = _recorded_command(json.loads(path.read_text()))
    assert cmd.strip(), f"{path.name} records no command (add 'command', and 'command_note' if reconstructed)"
    scripts = re.findall(r"benchmarks/(\w+)\.py", cmd)
    assert scripts and all((ROOT / "benchmarks" / f"{s}.py").exists() for s in scripts), (path.name, cmd)


def test_recorded_command_check_can_fail():
    assert _recorded_command({"meta": {"command": "python benchmarks/x.py"}}) == "python benchmarks/x.py"
    assert _recorded_command({"rows": [], "command": ""}) == "" and _recorded_command([1]) == ""
