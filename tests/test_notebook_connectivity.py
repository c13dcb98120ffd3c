"""Execute notebooks/connectivity_and_singularities.ipynb at small size."""

import ast


def test_connectivity_notebook_runs_small(run_notebook):
    text, figures = run_notebook("connectivity_and_singularities.ipynb")
    assert "every predicted failure failed: True" in text  # the theorem, on the toy
    assert "components" in text
    assert "is_singular_value(c): True  | generic c: False" in text
    assert figures >= 3
    # section 5: every flow ends in the component of H_G(c) it started in (c_k = -0.5: two
    # sheets; c_k = +0.5: one), and the teacher is reachable from the connected init
    starts_ends = [
        ast.literal_eval(line.split("at start / end:")[1]) for line in text.splitlines() if "at start / end:" in line
    ]
    assert len(starts_ends) == 2
    assert all(start == end for flows in starts_ends for start, end in flows)
    assert "reachable: True" in text
