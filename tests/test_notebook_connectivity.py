"""Execute notebooks/connectivity_and_singularities.ipynb at small size."""


def test_connectivity_notebook_runs_small(run_notebook):
    text, figures = run_notebook("connectivity_and_singularities.ipynb")
    assert "every predicted failure failed: True" in text  # the theorem, on the toy
    assert "components" in text
    assert "is_singular_value(c): True  | generic c: False" in text
    assert figures >= 3
