"""Numbers in the docs come from committed files: every generated block of README.md,
docs/*.md and benchmarks/README.md equals what `benchmarks/docs_tables.py` writes from
the JSON files; every results file a page names exists; every committed result records
how it was made."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import docs_tables  # noqa: E402

RESULTS = sorted(p for p in (ROOT / "benchmarks" / "results").rglob("*.json") if "local" not in p.parts)


def test_generated_blocks_match_their_files():
    # the timing of the suite's own clean-clone run is the one file that can only come
    # after a run of the suite: its absence alone is not an error (a stale block is)
    stale = [s for s in docs_tables.stale_blocks() if "(test_suite_time.json missing)" not in s]
    assert not stale, f"stale generated blocks (run python benchmarks/docs_tables.py): {stale}"


def test_stale_block_check_can_fail():
    page = "x\n<!-- generated: jump-filter -->\n| made up | 1 / 2 |\n<!-- end generated -->\ny\n"
    new = docs_tables.render(page)
    assert new != page and "339 / 500" in new and new.startswith("x\n") and new.endswith("y\n")
    assert docs_tables.render(new) == new
    with pytest.raises(KeyError, match="unknown generated block"):
        docs_tables.render("<!-- generated: nothing -->\n<!-- end generated -->")


def test_every_generated_block_is_used():
    text = "".join(p.read_text() for p in docs_tables.PAGES)
    used = {m.group("name") for m in docs_tables.BLOCK.finditer(text)}
    assert used == set(docs_tables.BLOCKS), set(docs_tables.BLOCKS) ^ used


@pytest.mark.parametrize("page", docs_tables.PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cited_results_files_exist(page):
    # a path after --out is where a command writes, not a citation
    cited = set(re.findall(r"(?<!--out )(?<!--out=)benchmarks/results/((?:parts/)?\w+\.(?:json|png))",
                           page.read_text()))
    cited.discard("NAME.json")
    missing = sorted(c for c in cited if not (ROOT / "benchmarks" / "results" / c).exists())
    assert not missing, f"{page.name} cites results files that are not committed: {missing}"


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.relative_to(ROOT / "benchmarks" / "results").as_posix())
def test_committed_results_record_their_provenance(path):
    """A commit (with the dirty flag) for files written since issue 26; for older ones, the
    commit that added them and a note saying that is all that is known."""
    rec = json.loads(path.read_text())
    prov = rec.get("provenance") if isinstance(rec, dict) else None
    assert isinstance(prov, dict), f"{path.name}: no provenance"
    if prov.get("commit"):
        assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"]) and isinstance(prov["dirty"], bool)
        assert prov["versions"]["jax"] and prov["started"] <= prov["finished"]
    else:
        assert re.fullmatch(r"[0-9a-f]{40}", prov.get("committed_in", "")) and prov.get("note"), path.name
