"""The package keeps one grammar (issue 31), measured by `benchmarks/grammar_metrics.py`
on the working tree: no public entry point over 12 parameters, no function over 80
lines, no private name or private module of another package imported, benchmarks on the
public API only, every result class with `result` and `success`, and one outcome
vocabulary. Each rule is first shown to catch a violation it is built to find."""

import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import grammar_metrics as gm  # noqa: E402


@pytest.fixture(scope="module")
def metrics():
    return gm.static_metrics(ROOT) | gm.import_metrics(ROOT)


def test_the_rules_catch_what_they_look_for(tmp_path):
    pkg = tmp_path / "invariant_jax"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_inner.py").write_text("def _helper():\n    pass\n")
    body = "\n".join(f"    x{i} = {i}" for i in range(gm.MAX_LINES))
    (pkg / "other.py").write_text(
        textwrap.dedent("""\
        from .sub._inner import _helper
        import numpy as np

        def check(v):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(v)
        """)
        + f"def long():\n{body}\n"
    )
    (tmp_path / "benchmarks" / "bench.py").write_text("from invariant_jax.sub._inner import thing\n")
    found = gm.static_metrics(tmp_path)
    assert [name for name, _ in found["long_functions"]] == ["invariant_jax.other.long"]
    assert found["private_names"] == ["invariant_jax.other <- invariant_jax.sub._inner._helper"]
    assert found["private_modules"] == ["invariant_jax.other <- invariant_jax.sub._inner"]
    assert found["inline_checks"] == ["invariant_jax.other:5"]
    assert found["benchmark_private_imports"] == ["bench.py <- invariant_jax.sub._inner.thing"]


# `SweepConfig` is the record of a sweep's TOML file: 27 fields, 13 of them the graph
# specification (one `[graph]` table is its own work); its options are objects already.
WIDE_RECORDS = {"ij.SweepConfig"}


def test_no_public_entry_point_over_12_parameters(metrics):
    over = [name for name, _ in metrics["over_12_parameters"] if name not in WIDE_RECORDS]
    assert over == [], "group keywords into an option object (see options.py)"


def test_no_function_over_80_lines(metrics):
    assert metrics["long_functions"] == [], "split into named steps"


def test_no_private_name_crosses_a_module(metrics):
    assert metrics["private_names"] == []
    assert metrics["private_modules"] == [], "import the public name from the package's __init__"


def test_benchmarks_use_the_public_api(metrics):
    # store_robustness injects a full disk by replacing the store's atomic writer,
    # kink_compile --ablate replaces pieces of the kink-aware program by stubs, and
    # channels_breakdown wraps the Newton phase's loss in a counter
    fault_injection = {
        "store_robustness.py <- invariant_jax.sweep._store._chunks",
        "channels_breakdown.py <- invariant_jax.channels._converge",
        "kink_compile.py <- invariant_jax.kinks._driver",
        "kink_compile.py <- invariant_jax.kinks._modes",
    }
    assert [b for b in metrics["benchmark_private_imports"] if b not in fault_injection] == []


# Diagnostics no generic check can word: a CSV cell (file, column, row) and a sweep's first
# initialization (which of weights, |theta0|^2 or loss overflows, at which scale).
DIAGNOSTICS = ("invariant_jax.datasets._tabular:", "invariant_jax.sweep._run:")


def test_validation_goes_through_checks(metrics):
    inline = [c for c in metrics["inline_checks"] if not c.startswith(DIAGNOSTICS)]
    assert inline == [], "use _checks.check_positive / check_integer / check_finite"


def test_every_result_class_answers_result_and_success(metrics):
    missing = [name for name, has_result, has_success in metrics["result_classes"] if not (has_result and has_success)]
    assert missing == []


def test_one_outcome_vocabulary(metrics):
    assert metrics["vocabularies"]["RESULTS"]
    assert not metrics["vocabularies"]["STOP_REASONS"], "Newton stop reasons are RESULTS members"
