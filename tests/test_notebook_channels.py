"""Execute notebooks/flat_channels.ipynb at small size."""


def test_flat_channels_notebook_runs_small(run_notebook):
    text, figures = run_notebook("flat_channels.ipynb", timeout=600)
    # the jump procedure's fitted exponents are printed and close to 2
    line = next(l for l in text.splitlines() if l.startswith("sharpness ~"))
    p = float(line.split("p =")[1].split("+-")[0])
    assert abs(p - 2) < 0.1
    assert "channel minimum" in text and "GLU convergence rate" in text
    assert "escape from gamma" in text
    assert figures >= 5
