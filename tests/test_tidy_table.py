"""One tidy results table: the Parquet chunks, `load_sweep(...).to_pandas()`, DuckDB and
`table.csv` carry the same per-trajectory columns, and they agree with `summary.json`'s
aggregates and with independent references (per-row `ij.connectivity` with its LP,
NumPy's matrix rank)."""

import csv
import json

import numpy as np
import pandas as pd
import pytest

import invariant_jax as ij
from invariant_jax.cli import main

ARGS = ["--graph", "example", "--n-inits", "12", "--t1", "0.5", "--n-samples", "8", "--slots", "4",
        "--no-figures", "--no-progress", "--rows", "0"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("tidy") / "run"
    assert main(["sweep", *ARGS, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def frame(folder):
    _, res = ij.load_sweep(folder)
    return res.to_pandas()


def test_chunks_carry_every_per_trajectory_column(folder, frame):
    chunks = pd.read_parquet(folder / "chunks").drop_duplicates("index").sort_values("index").reset_index(drop=True)
    # the chunks add only the store's config_hash column
    assert set(chunks.columns) - set(frame.columns) == {"config_hash"}
    assert set(frame.columns) - set(chunks.columns) == set()
    for name in ("connected", "n_components", "component", "rank_start", "rank_end", "num_events", "sliding_time",
                 "status_name", "result_name", "bottleneck_sign_changes", "frozen_sign_changes", "drift_in_tol"):
        np.testing.assert_array_equal(chunks[name].to_numpy(), frame[name].to_numpy(), err_msg=name)
    np.testing.assert_array_equal(np.stack(chunks["frozen"]), np.stack(frame["frozen"]))
    np.testing.assert_array_equal(np.stack(chunks["theta0"]), np.stack(frame["theta0"]))


def test_columns_against_independent_references(folder, frame):
    cfg, _ = ij.load_sweep(folder)
    g = cfg.build_graph()
    B = g.incidence()
    for _, row in frame.iterrows():
        con = ij.connectivity(g, np.asarray(row["c0"]))  # combinatorial verdict + LP cross-check
        assert bool(row["connected"]) == con.connected
        assert row["n_components"] == con.n_components
        assert np.flatnonzero(row["frozen"]).tolist() == sorted(con.frozen_index)
        th0, th1 = np.asarray(row["theta0"]), np.asarray(row["theta_final"])
        assert row["rank_start"] == np.linalg.matrix_rank(2 * B * th0)
        assert row["rank_end"] == np.linalg.matrix_rank(2 * B * th1)
        signs = [f"{u}->{v}:{'+' if th0[e] > 0 else '-'}" for e, (u, v) in enumerate(g.edges) if row["frozen"][e]]
        assert row["component"] == (" ".join(signs) or "connected")
        assert row["frozen_sign_changes"] == int(np.sum((np.sign(th0) != np.sign(th1)) & row["frozen"]))
        assert row["status_name"] == ij.sweep.STATUSES[row["status"]]
        assert row["result_name"] == ij.result_name(row["result"])
    np.testing.assert_allclose(frame["drift_in_tol"], frame["drift"] / (cfg.atol + cfg.rtol * frame["scale"]),
                               rtol=1e-15)


def test_table_csv_is_a_view_and_summary_agrees(folder, frame):
    with (folder / "table.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(frame)
    for name in table[0]:
        assert name in frame.columns, name
        for got, want in zip((r[name] for r in table), frame[name]):
            if isinstance(want, (bool, np.bool_)):
                want = int(want)
            if isinstance(want, (float, np.floating)):
                assert float(got) == float(want), name  # written exactly (repr)
            else:
                assert got == str(want), name
    summary = json.loads((folder / "summary.json").read_text())
    ok = frame["status"] <= 1
    assert summary["initializations"] == len(frame)
    assert summary["fraction_disconnected"] == pytest.approx(float(np.mean(~frame["connected"])), abs=0)
    assert summary["max_components"] == frame["n_components"].max()
    assert summary["rank_changed"] == int(np.sum((frame["rank_start"] != frame["rank_end"]) & ok))
    assert summary["bottleneck_sign_changes"] == frame["bottleneck_sign_changes"].sum()
    assert summary["frozen_sign_changes"] == frame["frozen_sign_changes"].sum() == 0
    assert summary["kink_events_total"] == frame["num_events"].sum()
    assert summary["drift_tol_max"] == pytest.approx(frame["drift_in_tol"][ok].max(), rel=1e-15)
    for k, name in enumerate(ij.sweep.STATUSES):
        assert summary[f"status_{name}"] == int(np.sum(frame["status_name"] == name))
    assert summary["connectivity_mismatches"] == 0


def test_duckdb_reads_the_chunks_directly(folder, frame):
    duckdb = pytest.importorskip("duckdb")
    q = (f"SELECT connected, count(DISTINCT index) AS n, max(rank_start) AS r FROM '{folder}/chunks/*.parquet' "
         "GROUP BY connected ORDER BY connected")
    got = duckdb.sql(q).df()
    want = frame.groupby("connected").agg(n=("index", "nunique"), r=("rank_start", "max")).reset_index()
    np.testing.assert_array_equal(got[["n", "r"]].to_numpy(), want[["n", "r"]].to_numpy())


def test_old_folders_get_the_columns_on_load(folder, tmp_path):
    """Records written before the derived columns existed: load_sweep derives them."""
    from invariant_jax.sweep._columns import DERIVED
    from invariant_jax.sweep._run import with_columns

    cfg, res = ij.load_sweep(folder)
    base = {k: getattr(res, k) for k in ("index", "theta0", "theta_final", "c0", "drift", "scale", "result",
                                         "status")}
    again = with_columns(cfg, cfg.build_graph(), base)
    for k in DERIVED:
        want = res.drift_in_tol if k == "drift_in_tol" else res.columns[k]
        np.testing.assert_array_equal(again[k], want, err_msg=k)
