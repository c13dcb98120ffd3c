"""`invariant-jax sweep` and `invariant-jax demo`: flags, TOML, outputs and clean errors."""

import json

import numpy as np
import pytest

from invariant_jax.cli import main
from invariant_jax.sweep import load_sweep

FLAGS = [
    "--t1",
    "0.5",
    "--n-samples",
    "10",
    "--n-save",
    "11",
    "--slots",
    "2",
    "--steps-per-call",
    "8",
    "--no-progress",
    "--no-kink-aware",
]


def test_sweep_flags_write_results_folder(tmp_path, capsys):
    out = tmp_path / "run"
    # --trajectories 0: no example flows re-integrated (a compilation of their own);
    # tests/test_figures.py checks trajectories.png
    assert main(["sweep", "--n-inits", "4", "--out", str(out), "--trajectories", "0", *FLAGS]) == 0
    text = capsys.readouterr().out
    assert "drift/tol" in text and "fraction_disconnected" in text
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"]["n_inits"] == 4 and man["config"]["graph"] == "example"
    assert len((out / "table.csv").read_text().splitlines()) == 5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["initializations"] == 4 and summary["status_ok"] + summary["status_max_steps"] <= 4
    assert all(k.isidentifier() for k in summary), list(summary)  # keys are identifiers, not display text
    assert len(summary["failures"]) == 4 - summary["status_ok"] - summary["status_stopped"]
    assert (out / "figures" / "overview.png").stat().st_size > 1000
    cfg, res = load_sweep(out)
    assert list(res.index) == [0, 1, 2, 3]


@pytest.mark.slow
def test_toml_config_and_flag_override(tmp_path):
    toml = tmp_path / "sweep.toml"
    toml.write_text(
        '[sweep]\ngraph = "mlp"\nwidths = [3, 4, 1]\nn_inits = 7\nt1 = 0.25\nn_samples = 10\nn_save = 11\nseed = 5\n'
    )
    out = tmp_path / "run"
    assert (
        main(
            [
                "sweep",
                "--config",
                str(toml),
                "--n-inits",
                "3",
                "--out",
                str(out),
                "--no-progress",
                "--no-figures",
                "--slots",
                "2",
            ]
        )
        == 0
    )
    cfg, res = load_sweep(out)
    assert (cfg.graph, cfg.widths, cfg.t1, cfg.seed, cfg.n_inits) == ("mlp", (3, 4, 1), 0.25, 5, 3)
    assert len(res) == 3 and not (out / "figures").exists()


@pytest.mark.slow
def test_edge_list_file(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("inputs: x0 x1\noutputs: y\nx0 h\nx1 h\nh y\nx0 y\n")
    out = tmp_path / "run"
    assert main(["sweep", "--graph", str(f), "--n-inits", "2", "--out", str(out), "--no-figures", *FLAGS]) == 0
    cfg, res = load_sweep(out)
    assert cfg.graph == "edges" and len(cfg.edges) == 4 and res.theta0.shape == (2, 4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--graph", "ladder"], "Unknown graph builder 'ladder'"),
        (["--activation", "relux"], "Unknown activation 'relux'"),
        (["--n-inits", "0"], "--n-inits must be an integer in [1, 2147483647]; got 0"),
        (["--n-inits", "-2"], "--n-inits must be an integer in [1, 2147483647]; got -2"),
        (["--graph", "missing.txt"], "Edge-list file 'missing.txt' does not exist"),
    ],
)
def test_bad_flags_are_clean_errors(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["sweep", *argv, "--out", str(out), "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # nothing was started


def test_unknown_toml_key(tmp_path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text("n_init = 3\n")
    assert main(["sweep", "--config", str(toml), "--out", str(tmp_path / "r")]) == 2
    assert "Unknown sweep option(s) ['n_init']" in capsys.readouterr().err


def test_other_config_in_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["sweep", "--n-inits", "2", "--out", str(out), "--no-figures", *FLAGS]) == 0
    assert main(["sweep", "--n-inits", "3", "--out", str(out), "--no-figures", *FLAGS]) == 2
    assert "holds a sweep with a different config" in capsys.readouterr().err
    assert main(["sweep", "--n-inits", "3", "--out", str(out), "--no-figures", "--overwrite", *FLAGS]) == 0
    assert main(["sweep", "--n-inits", "3", "--out", str(out), "--no-figures", "--resume", *FLAGS]) == 0
    _, res = load_sweep(out)
    assert len(res) == 3


@pytest.mark.slow
def test_demo_runs_the_default_sweep(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--n-inits", "2", "--out", str(out)]) == 0
    assert "fraction_disconnected" in capsys.readouterr().out
    cfg, res = load_sweep(out)
    assert cfg.graph == "example" and cfg.n_inits == 2
    assert np.all(res.status == 0) and (out / "figures" / "overview.png").exists()


def test_compilation_cache_folder_and_opt_out(tmp_path, monkeypatch):
    import jax

    from invariant_jax.cli._common import (
        compilation_cache_dir,
        compilation_cache_settings,
        enable_compilation_cache,
        restore_compilation_cache,
    )

    monkeypatch.delenv("INVARIANT_JAX_CACHE_DIR", raising=False)
    monkeypatch.delenv("INVARIANT_JAX_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache_dir() == tmp_path / "xdg" / "invariant-jax" / "jax"
    monkeypatch.setenv("INVARIANT_JAX_CACHE_DIR", str(tmp_path / "mine"))
    assert compilation_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("INVARIANT_JAX_NO_CACHE", "1")
    assert compilation_cache_dir() is None
    saved = compilation_cache_settings()
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        before = compilation_cache_settings()
        assert enable_compilation_cache() is None and compilation_cache_settings() == before  # opted out
        monkeypatch.delenv("INVARIANT_JAX_NO_CACHE")
        assert enable_compilation_cache() == tmp_path / "mine"
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine") and (tmp_path / "mine").is_dir()
        on = compilation_cache_settings()
        assert enable_compilation_cache() == tmp_path / "mine"  # idempotent: a second call changes nothing
        assert compilation_cache_settings() == on != before
        restore_compilation_cache(before)  # restorable: every option as it was
        assert compilation_cache_settings() == before
    finally:
        restore_compilation_cache(saved)


def test_cli_in_process_leaves_the_compilation_cache_as_it_was(tmp_path, monkeypatch, capsys):
    """`main` turns the persistent cache on for its run (the folder is created) and, called
    from Python, puts JAX's cache options back when it returns."""
    from invariant_jax.cli import main
    from invariant_jax.cli._common import compilation_cache_settings

    monkeypatch.delenv("INVARIANT_JAX_NO_CACHE", raising=False)
    monkeypatch.setenv("INVARIANT_JAX_CACHE_DIR", str(tmp_path / "cache"))
    before = compilation_cache_settings()
    assert main(["connectivity", "--graph", "mlp", "--widths", "2,3,3,1", "--seed", "0"]) == 0
    assert (tmp_path / "cache").is_dir() or before["jax_compilation_cache_dir"]  # a user's own JAX cache wins
    assert compilation_cache_settings() == before
    assert "H_G(c)" in capsys.readouterr().out
