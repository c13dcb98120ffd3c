"""Execute notebooks/pruning.ipynb at small size."""


def test_pruning_notebook_runs_small(run_notebook):
    text, figures = run_notebook("pruning.ipynb")
    # the nuclear arm disconnects neurons and the pruning is lossless
    line = next(l for l in text.splitlines() if l.strip().startswith("nuclear:"))
    cut = eval(line.split("cut off")[1])
    assert min(cut) >= 10
    assert "max |f_pruned - f|" in text
    assert figures >= 2
