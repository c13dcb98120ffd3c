"""`invariant-jax --help` and argument parsing import no JAX (they answer at once); the
package's public names are loaded on first use and all resolve."""

import subprocess
import sys

import pytest

import invariant_jax as ij


def _loaded_after(code: str) -> str:
    probe = f"import sys\n{code}\nprint(sorted(m for m in ('jax', 'jaxlib', 'equinox', 'diffrax') if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_import_and_parsing_import_no_jax():
    assert _loaded_after("import invariant_jax") == "[]"
    assert (
        _loaded_after(
            "from invariant_jax.cli import build_parser\n"
            "for argv in (['sweep', '--n-inits', '3'], ['check', '--force'], ['channels', '--method', 'flow'],"
            " ['connectivity', '--from-sweep', 'x'], ['prune'], ['demo']):\n"
            "    build_parser().parse_args(argv)"
        )
        == "[]"
    )


@pytest.mark.parametrize("argv", [["--help"], ["sweep", "--help"], ["check", "--help"], ["sweep", "--n-inits", "x"]])
def test_help_and_flag_errors_exit_before_jax(argv):
    code = (
        "import sys\nfrom invariant_jax.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    print('exit', e.code)\n"
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False"), out
    assert ("exit 0" if "--help" in argv else "exit 2") in out


def test_every_public_name_resolves():
    for name in ij.__all__:
        assert getattr(ij, name) is not None, name
    assert set(ij.__all__) <= set(dir(ij))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        ij.not_a_name  # noqa: B018


def test_help_shows_sweep_config_defaults():
    from invariant_jax.cli import build_parser
    from invariant_jax.sweep import SweepConfig

    sub = build_parser()._subparsers._group_actions[0].choices
    helps = {a.dest: a.help for a in sub["check"]._actions}
    # the option tables' defaults are their objects' (rtol: SolverOptions'), the rest SweepConfig's
    assert (
        f"(default: {SweepConfig().rtol})" in helps["rtol"]
        and f"(default: {SweepConfig.activation})" in helps["activation"]
    )
    sweep_helps = {a.dest: a.help for a in sub["sweep"]._actions}
    assert "default" in sweep_helps["n_inits"] and str(SweepConfig.n_inits) in sweep_helps["n_inits"]
