"""Execute notebooks/pruning.ipynb at small size."""

import re


def test_pruning_notebook_runs_small(run_notebook):
    text, figures = run_notebook("pruning.ipynb")
    # the nuclear arm disconnects neurons and the pruning is lossless
    line = next(l for l in text.splitlines() if l.strip().startswith("nuclear:"))
    cut = eval(line.split("cut off")[1])
    assert min(cut) >= 10
    assert "max |f_pruned - f|" in text
    assert figures >= 3
    # the random DAG (hidden-to-hidden edges): the working-set step cuts neurons off with exact zeros,
    # pruning them is lossless, and the SVD rank drop equals the number of cut-off groups
    rows = [l.split() for l in text.splitlines() if l.split()[:2] in (["DAG", "nuclear"], ["DAG", "none"])]
    nuc = [r for r in rows if r[1] == "nuclear"]
    none = [r for r in rows if r[1] == "none"]
    assert nuc and none
    assert all(int(r[3].split("/")[0]) >= 5 and float(r[-1]) <= 1e-12 for r in nuc)
    assert all(int(r[3].split("/")[0]) == 0 for r in none)
    checks = re.findall(
        r"DAG, seed \d+: jacobian_rank (\d+) = H - groups (\d+); max \|sum_W c\| (\S+);"
        r" singular_point found (\w+); frozen boundary edges (\d+)",
        text,
    )
    assert checks
    for rank, h_minus_groups, gsum, found, frozen in checks:
        assert rank == h_minus_groups and int(rank) < 40
        assert float(gsum) <= 1e-10 and found == "True" and frozen == "0"
