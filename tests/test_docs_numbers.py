"""Numbers in the docs come from committed files: every generated block of README.md,
docs/*.md and benchmarks/README.md equals what `benchmarks/docs_tables.py` writes from
the JSON files; every results file a page names exists; every committed result records
how it was made."""

import json
import math
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
    cited = set(
        re.findall(r"(?<!--out )(?<!--out=)benchmarks/results/((?:parts/)?\w+\.(?:json|png))", page.read_text())
    )
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


def _load(name):
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text())


def _pc(frac):
    return f"{100 * frac:.0f}%"


def _channels_loss_levels_claims():
    """The prose under docs/channels.md's loss-levels table, rebuilt from the four files."""
    cells = {
        (c["activation"], c["bias"], c["r"]): c
        for _, name in docs_tables.LOSS_LEVEL_STUDIES
        for c in _load(name)["summary"]
    }
    rng = lambda xs: f"{min(xs)}-{max(xs)}"  # noqa: E731
    conf_nobias = [
        round(100 * cells[k]["confirmed_fraction"])
        for k in cells
        if not k[1] and ((k[0] == "g" and k[2] >= 3) or (k[0] == "softplus" and 2 <= k[2] <= 4))
    ]
    sp5 = cells["softplus", False, 5]
    rec = _load("channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json")["records"]
    r5 = [i for i, r in enumerate(rec["r"]) if r == 5]
    unc = [i for i in r5 if rec["infinite"][i] and not rec["confirmed"][i]]
    near = [rec["glu_error"][i] for i in unc if rec["glu_error"][i] < 0.1]
    far = [rec["glu_error"][i] for i in unc if rec["glu_error"][i] >= 0.1]
    mse_unc = sorted({f"{rec['mse'][i]:.3f}" for i in unc})
    mse_con = sorted({f"{rec['mse'][i]:.3f}" for i in r5 if rec["confirmed"][i]})
    max_cos = max(rec["min_cos"][i] for i in unc)
    gb = [cells["g", True, r] for r in (3, 4, 5)]
    sb = [cells["softplus", True, r] for r in (3, 4, 5)]
    dup = [c["duplicate"] for c in cells.values()]
    return [
        f"{rng(conf_nobias)}% of the runs of those cells are confirmed",
        f"except softplus at r = 5 ({_pc(sp5['confirmed_fraction'])}). Its {sp5['infinite'] - sp5['confirmed']} unconfirmed",
        f"here < {math.ceil(max_cos * 1e5) / 10:.1f}e-4",
        f"(MSE {mse_unc[0]} and {mse_unc[1]}; GLU fit {100 * min(near):.1f}-{100 * max(near):.1f}% in {len(near)} runs, "
        f"{100 * min(far):.0f}-{100 * max(far):.0f}% in {len(far)})",
        f"{sp5['confirmed']} confirmed ones end at the lowest ({', '.join(mse_con)})",
        f"With `g`, {', '.join(_pc(c['infinite_fraction']) for c in gb[:2])} and {_pc(gb[2]['infinite_fraction'])} "
        f"of runs are infinite at r = 3, 4, 5",
        f"{', '.join(_pc(c['confirmed_fraction']) for c in gb[:2])} and {_pc(gb[2]['confirmed_fraction'])} are confirmed",
        f"With softplus, {rng([round(100 * c['infinite_fraction']) for c in sb])}% are infinite at r = 3-5, but at r = 3 "
        f"{sb[0]['sharpened']} of the {sb[0]['infinite']} are one",
        f"confirmed channels are {', '.join(_pc(c['confirmed_fraction']) for c in sb[:2])} and {_pc(sb[2]['confirmed_fraction'])}.",
        f"yet {_pc(cells['softplus', False, 1]['infinite_fraction'])} (softplus, no bias)",
        f"and {_pc(cells['softplus', True, 1]['infinite_fraction'])} (softplus, bias) of runs are infinite",
        f"at r = 2, {cells['g', True, 2]['infinite'] - cells['g', True, 2]['confirmed'] - cells['g', True, 2]['sharpened']} "
        "infinite runs are anti-parallel pairs",
        f"rare: {rng([round(100 * c['duplicate_fraction']) for c in cells.values()])}% per cell, {sum(dup)} of "
        f"{sum(c['n'] for c in cells.values())} runs.",
    ]


def _channels_roughness_claims():
    """The prose under docs/channels.md's roughness table, rebuilt from its file."""
    rec = _load("channels_roughness_paper_cpu_runs100.json")
    ss = sorted(rec["summary"], key=lambda c: float(c["label"][2:]))
    r = rec["records"]
    paper = [i for i in range(len(r["label"])) if r["channel_paper"][i]]
    conf = [i for i in range(len(r["label"])) if r["confirmed"][i]]
    miss = {c["label"]: sum(1 for i in paper if r["label"][i] == c["label"] and not r["confirmed"][i]) for c in ss}
    ms = [c["stopped_by"].get("max_steps", 0) for c in ss]
    inf = sum(c["infinite"] for c in ss)
    sharp = max(ss, key=lambda c: c["sharpened"])
    boot = rec["teacher_spread"]["s=2"]["channel_paper_ci_teacher_bootstrap"]
    missing = [(v, k[2:]) for k, v in miss.items() if v]
    return [
        " -> ".join(_pc(c["channel_paper_fraction"]) for c in ss) + " by the paper's",
        "(" + " -> ".join(str(c["confirmed"]) for c in ss) + " confirmed)",
        "Every confirmed channel also passes" if set(conf) <= set(paper) else "NOT every confirmed channel",
        f"of the {len(paper)} paper-criterion\n  channels, {len(paper) - sum(miss.values())} pass our stricter GLU fit "
        f"(all but {', '.join(str(v) for v, _ in missing[:-1])} and {missing[-1][0]} at s = "
        f"{', '.join(s for _, s in missing[:-1])} and {missing[-1][1]})",
        f"rises ({_pc(ss[2]['channel_paper_fraction'])[:-1]} -> {_pc(ss[3]['channel_paper_fraction'])})",
        f"flat ({ss[2]['confirmed']} -> {ss[3]['confirmed']})",
        f"falls\n  ({_pc(ss[2]['infinite_fraction'])[:-1]} -> {_pc(ss[3]['infinite_fraction'])})",
        f"bootstrap [{100 * boot[0]:.0f}, {100 * boot[1]:.0f}]%",
        f"{ms[0]} of the 100 smoothest runs and {min(ms[1], ms[3])}-{max(ms[1], ms[3])} of the s = 0.5\n  and s = 10 runs",
        f"median MSE is {ss[0]['median_mse']:.0e}".replace("e-04", "e-4"),
        f"{sum(c['sharpened'] for c in ss)} of the {inf} infinite runs are one neuron",
        f"{sharp['sharpened']} of them at s = {sharp['label'][2:]}",
        f"keeps only {sum(c['kept'] for c in ss)} of the {sum(c['n'] for c in ss)} runs",
    ]


@pytest.mark.parametrize("claims", [_channels_loss_levels_claims, _channels_roughness_claims], ids=lambda f: f.__name__)
def test_channels_prose_matches_its_files(claims):
    """Numbers in docs/channels.md's prose that are not in a generated block: each sentence
    is rebuilt from the JSON and must appear in the page as written."""
    page = (ROOT / "docs" / "channels.md").read_text()
    missing = [c for c in claims() if c not in page]
    assert not missing, f"docs/channels.md no longer says what its files hold: {missing}"


def _sweep_claims():
    """Numbers in docs/sweep.md's prose around its generated tables, rebuilt from the files."""
    tp = {w["workload"]: {a["arm"]: a for a in w["arms"]} for w in _load("sweep_throughput.json")["results"]}
    h, li = tp["heavy"], tp["light"]
    k, kd, naive = (
        "kink-aware (tsit5 inside)",
        "kink-aware (tsit5 inside, diffeqsolve segments)",
        "naive jit(vmap(gradient_flow))",
    )
    x, x_e = docs_tables._times, docs_tables._e
    seg = {w["workload"]: {a["arm"]: a for a in w["arms"]} for w in _load("sweep_throughput_segments.json")["results"]}
    sh, sl = seg["heavy"], seg["light"]
    same = all(
        (w[k]["steps_total"], w[k]["events_total"], x_e(w[k]["err_vs_ref_max"]), x_e(w[k]["err_vs_ref_median"]))
        == (w[kd]["steps_total"], w[kd]["events_total"], x_e(w[kd]["err_vs_ref_max"]), x_e(w[kd]["err_vs_ref_median"]))
        for w in (sh, sl)
    )
    claims = [
        "The lean segments take the same steps and events, with the same errors to the digits shown"
        if same
        else "the segment implementations differ",
        f"in {sh[k]['ms_per_segment']:.2f} ms per segment against {sh[kd]['ms_per_segment']:.2f} ms with `diffeqsolve` on "
        f"`heavy` and {sl[k]['ms_per_segment']:.2f} against {sl[kd]['ms_per_segment']:.2f} ms on `light`",
        f"the lean segments' wall time is {sh[k]['wall_over_bare']:.2f}x on `heavy` and {sl[k]['wall_over_bare']:.2f}x on `light`",
        f"CPU time {h['engine']['cpu_over_bare']:.2f}x (heavy) and {li['engine']['cpu_over_bare']:.2f}x (light) its bare "
        f"unbatched cost (goal 2x); wall / bare {h['engine']['wall_over_bare']:.2f} and "
        f"{li['engine']['wall_over_bare']:.2f}.",
        f"Vmap mode: {x(h['engine-vmap']['vs_naive'])} naive vmap on `heavy` and {x(li['engine-vmap']['vs_naive'])} on `light` "
        f"(CPU time {x(h['engine-vmap']['cpu_vs_naive'])} and {x(li['engine-vmap']['cpu_vs_naive'])})",
        f"it was {x(h['engine-vmap-full']['vs_naive'])} and {x(li['engine-vmap-full']['vs_naive'])} "
        f"(CPU {x(h['engine-vmap-full']['cpu_vs_naive'])} and {x(li['engine-vmap-full']['cpu_vs_naive'])})",
        f"(work efficiency {h['engine-vmap']['work_efficiency']:.2f} instead of {h['engine-vmap-full']['work_efficiency']:.2f} "
        f"on `heavy`, {li['engine-vmap']['work_efficiency']:.2f} instead of {li['engine-vmap-full']['work_efficiency']:.2f} on `light`)",
        f"({h['engine-vmap']['compile_s']:.1f} s instead of {h['engine-vmap-full']['compile_s']:.1f} s for `heavy`'s "
        f"{['no', 'one', 'two', 'three', 'four'][len(h['engine-vmap']['widths'])]} widths",
        f"the plain engine ran at {docs_tables._rate(h['engine-vmap']['traj_per_s'])} trajectories/s in vmap mode (narrowing) "
        f"against {docs_tables._rate(h['engine']['traj_per_s'])} in exact mode on `heavy`, and "
        f"{docs_tables._rate(li['engine-vmap']['traj_per_s'])} against {docs_tables._rate(li['engine']['traj_per_s'])} on `light`",
    ]
    assert h[naive]["vs_naive"] == 1.0
    for name, lead in [
        (
            "kink_compile.json",
            "Compile, old and new code at the same time on this shared 2-core machine "
            "(load average {load:.1f}; `benchmarks/results/kink_compile.json`): ",
        ),
        (
            "kink_compile_sequential.json",
            "Sequentially at load average {load:.1f} "
            "(`benchmarks/results/kink_compile_sequential.json`, before Tsit5 went back to two loops): ",
        ),
    ]:
        rows = _load(name)["rows"]
        r = {(x["code"], x["solver"]): x for x in rows}
        ba = lambda s, key, f="{:.1f}": f"{f.format(r['before', s][key])} -> {f.format(r['after', s][key])}"  # noqa: E731
        if name == "kink_compile.json":
            claims.append(
                lead.format(load=rows[0]["load_average_before"][0])
                + f"Tsit5 {ba('tsit5', 'compile_cpu_s')} CPU seconds ({ba('tsit5', 'compile_s')} s wall), "
                f"Gauss4 {ba('gauss4', 'compile_cpu_s')} CPU seconds ({ba('gauss4', 'compile_s')} s wall)."
            )
        else:
            ms = lambda v: f"{1e3 * v:.0f}" if v >= 0.01 else f"{1e3 * v:.1f}"  # noqa: E731
            run = lambda s: " -> ".join(ms(r[c, s]["run_median_s"]) for c in ("before", "after"))  # noqa: E731
            claims.append(
                lead.format(load=rows[0]["load_average_before"][0])
                + f"Gauss4 {ba('gauss4', 'compile_s')} s wall ({ba('gauss4', 'compile_cpu_s')} CPU s), run "
                f"{run('gauss4')} ms; Tsit5 with one loop {ba('tsit5', 'compile_s')} s wall "
                f"({ba('tsit5', 'compile_cpu_s')} CPU s), run {run('tsit5')} ms."
            )
    small = _load("sweep_throughput_small_n.json")["results"]
    ratio = lambda n, arm: [a["vs_naive"] for w in small if w["n_inits"] == n for a in w["arms"] if a["arm"] == arm]  # noqa: E731
    few = [a["vs_naive"] for w in small if w["n_inits"] < 16 for a in w["arms"] if not a["arm"].startswith("naive")]
    span = lambda xs: f"{min(xs):.1f}-{max(xs):.1f}x"  # noqa: E731
    claims.append(
        f"At 16 trajectories the engine is {span(ratio(16, 'engine'))} naive vmap in exact mode and "
        f"{span(ratio(16, 'engine-vmap'))} in vmap mode."
    )
    claims.append(
        f"At 1 and 4 it is within 20% of naive vmap either way ({min(few):.2f}x to {max(few):.2f}x)"
        if all(0.8 <= q <= 1.2 for q in few)
        else "NOT within 20% at 1 and 4 trajectories"
    )
    gpu = _load("sweep_throughput_gpu.json")
    ka = gpu["results"][0]["arms"][0]
    eng = [a for a in gpu["engine_naive_printed"] if a["arm"] == "engine"][0]
    claims += [
        f"its {ka['traj_per_s']:.0f} trajectories/s ({gpu['results'][0]['n_inits']} in {ka['seconds']:.1f} s, "
        f"{'no' if ka['failures'] == 0 else ka['failures']} failures)",
        f"kink-aware program is {ka['wall_over_bare']:.0f}x its bare arithmetic",
        f"no faster than naive vmap here ({eng['vs_naive']:.2f}x)",
    ]
    return claims


def test_sweep_prose_matches_its_files():
    """As test_channels_prose_matches_its_files, for docs/sweep.md (line breaks ignored)."""
    page = " ".join((ROOT / "docs" / "sweep.md").read_text().split())
    missing = [c for c in _sweep_claims() if " ".join(c.split()) not in page]
    assert not missing, f"docs/sweep.md no longer says what its files hold: {missing}"


def _channels_cost_optimizers_eos_claims():
    """The prose around docs/channels.md's run-cost, SGD/Adam and edge-of-stability tables."""
    cc = {r["r"]: r for r in _load("converge_cost_cpu.json")["rows"]}
    st = _load("converge_cost_cpu.json")["settings"]
    gb = _load("channels_loss_levels_paper_g_bias_cpu_seeds100.json")["records"]
    n6 = [gb["n_steps"][i] for i in range(len(gb["r"])) if gb["r"][i] == 2 and gb["seed"][i] < 6]
    sec = lambda r, k: cc[r]["newton"][k]["seconds"]  # noqa: E731
    claims = [
        f"The flow's end point is the same to {cc[2]['flow_max_abs_diff']:.0e} (r = 2) and {cc[5]['flow_max_abs_diff']:.0e} "
        f"(r = 5) after {st['flow_steps']} steps",
        f"1000 steps x 15 x {cc[5]['bare_ms']['grad_autodiff']:.1f} ms = {15 * round(cc[5]['bare_ms']['grad_autodiff'], 1):.1f} s at r = 5",
        f"need {', '.join(map(str, n6))} Newton steps, {len(n6) * max(n6)} lane-steps in one batch against {sum(n6)} one at a time",
        f"(the benchmark's {st['newton_steps']} steps) a batch is as fast or faster (r = 2: {sec(2, 'vmap_structured'):.2f} s "
        f"batched vs {sec(2, 'after'):.1f} s one at a time)"
        if sec(2, "vmap_structured") <= sec(2, "after")
        else "NOT faster batched",
    ]
    opt = {o: _load(f"channels_optimizers_softplus_nobias_r4_{o}.json") for o in ("sgd", "adam")}
    nw = opt["sgd"]["newton"]
    ll = _load(nw["path"].removeprefix("benchmarks/results/"))["records"]
    idx = [i for i in range(len(ll["r"])) if ll["r"][i] == opt["sgd"]["r"] and ll["seed"][i] < opt["sgd"]["seeds"]]
    t = sorted(ll["t_flow"][i] for i in idx)
    wf = [ll["weightnorm_flow"][i] for i in idx]
    rows = opt["sgd"]["rows"] + opt["adam"]["rows"]
    a2 = [r for r in opt["adam"]["rows"] if r["lr"] == 0.01 and r["batch_size"] is None][0]
    mb = [r for r in rows if r["batch_size"]][0]
    sgd_full = [r for r in opt["sgd"]["rows"] if r["batch_size"] is None]
    e = lambda x: f"{x:.1e}".replace("e+0", "e")  # noqa: E731
    claims += [
        f"On seeds 0-{opt['sgd']['seeds'] - 1} of this cell, flow-then-Newton ends in a confirmed channel "
        f"{nw['confirmed']} of {opt['sgd']['seeds']} times",
        f"Its Kvaerno5 phase covered flow time {e(t[0])}-{e(t[-1])} (median {e((t[7] + t[8]) / 2)}) and left the "
        f"weightnorm at {min(wf):.1f}-{max(wf):.0f}; Newton then walked to `maxnorm` in a median of "
        f"{sorted(nw['n_steps'])[7] / 2 + sorted(nw['n_steps'])[8] / 2:.0f} steps",
        f"minibatch {mb['batch_size']} for {mb['epochs']} epochs ({mb['updates']} updates)",
        f"{opt['sgd']['channel_like_at_init']} of the {opt['sgd']['seeds']} inits already pass it",
        f"At lr 1e-2, {a2['channel_like']} of {a2['n']} runs end with a merging pair",
        f"but at weightnorm {a2['median_weightnorm']:.1f} (median), not 1e3",
        f"The first-order runs end at MSE {min(r['median_mse'] for r in rows):.2f}-{max(r['median_mse'] for r in rows):.2f}",
        f"flow-then-Newton's channel end points are at a median of {sorted(nw['mse'])[7] / 2 + sorted(nw['mse'])[8] / 2:.3f} "
        f"({min(nw['mse']):.3f}-{max(nw['mse']):.3f})",
        "is gradient-flow time " + " / ".join(f"{r['lr'] * r['updates']:.0f}" for r in sgd_full),
        f"even there the weightnorm was still {min(wf):.1f}-{max(wf):.0f}",
        "From the same 16 inits, flow-then-Newton did so 16 times" if nw["infinite"] == 16 else "NOT 16",
    ]
    assert all(r["infinite"] == 0 for r in rows)
    eos = _load("channels_eos.json")
    s0, rr, fi = eos["start"], eos["rows"], eos["fits"]
    edge = [r for r in rr if r["reached_edge"]]
    below = [r for r in rr if not r["reached_edge"]]
    gr = [r["grad_norm_vs_eps_before_edge"]["exponent"] for r in rr]
    ld = [r["loss_decrease_per_update_vs_eps_before_edge"]["exponent"] for r in rr]
    pooled = fi["loss_decrease_per_update_vs_eps_pooled_over_lrs"]
    eps = [r["eps_end"] for r in rr] + [s0["eps"]]
    claims += [
        f"to `t = {s0['t']:g}` enters the channel (`eps = {s0['eps']:.3f}`, `w = {s0['w']:.3f}`, sharpness {s0['sharpness']:.2f})",
        f"(late median within {100 * max(abs(r['late_ratio_to_2_over_lr'] - 1) for r in edge):.1f}% of `2/lr`)",
        "("
        + ", ".join(f"{r['lr']:g}" for r in edge)
        + f": {edge[0]['loss_start']:.6f} -> "
        + ", ".join(f"{r['loss_end']:.6f}" for r in edge)
        + f"; lr {below[0]['lr']:g} ends below, at {below[0]['loss_end']:.6f})",
        f"({fi['grad_norm_vs_eps']['exponent']:.2f} pooled; {min(gr):.2f}-{max(gr):.2f} per learning rate)",
        f"({min(ld):.2f}-{max(ld):.2f} before the edge)",
        f"`eps^{pooled['exponent']:.2f} +- {pooled['stderr']:.2f}` with R^2 = {pooled['r2']:.2f} ({pooled['n']} points",
        f"The sharpness exponent here is {fi['sharpness_vs_inv_eps_before_edge']['exponent']:.2f}, not 2",
        f"reach `eps` between {min(eps):.2f} and {max(eps):.2f}",
    ]
    assert all(r["loss_end"] > r["loss_start"] for r in edge) and all(r["loss_end"] < r["loss_start"] for r in below)
    return claims


def test_channels_cost_optimizers_eos_prose_matches_its_files():
    page = " ".join((ROOT / "docs" / "channels.md").read_text().split())
    missing = [c for c in _channels_cost_optimizers_eos_claims() if " ".join(c.split()) not in page]
    assert not missing, f"docs/channels.md no longer says what its files hold: {missing}"


def _pruning_timing_claims():
    """docs/pruning.md's cost-per-epoch paragraph, from pruning_dag.json's timing runs."""
    g = _load("pruning_dag.json")["graphs"]
    cpu = {k: g[k]["timing_cpu_ms_per_epoch"] for k in ("mlp", "dag")}
    cr = {k: g[k]["timing_cpu_ratio_to_none"] for k in ("mlp", "dag")}
    wr = {k: g[k]["timing_ratio_to_none"] for k in ("mlp", "dag")}
    others = [cr[k][a] for k in cr for a in ("l2", "l1", "group_lasso")]
    return [
        f"the working-set step costs **{cr['mlp']['nuclear']:.2f}x** the unregularized loop on the MLP "
        f"({cpu['mlp']['nuclear']:.1f} vs {cpu['mlp']['none']:.1f} ms) and **{cr['dag']['nuclear']:.2f}x** on the DAG "
        f"({cpu['dag']['nuclear']:.1f} vs {cpu['dag']['none']:.1f} ms); L2, L1 and group lasso cost "
        f"{min(others):.2f}-{max(others):.2f}x.",
        f"Wall-clock ratios were {wr['mlp']['nuclear']:.2f}x and {wr['dag']['nuclear']:.2f}x.",
    ]


def test_pruning_prose_matches_its_files():
    page = " ".join((ROOT / "docs" / "pruning.md").read_text().split())
    missing = [c for c in _pruning_timing_claims() if " ".join(c.split()) not in page]
    assert not missing, f"docs/pruning.md no longer says what its files hold: {missing}"


def _recipe_seed_claims():
    """docs/getting_started.md's channel recipe on the study setting: seed 0 at softplus, no
    bias, r = 2 is a confirmed channel in its file, with the GLU error the page quotes."""
    rec = _load("channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json")["records"]
    (k,) = [k for k in range(len(rec["r"])) if rec["r"][k] == 2 and rec["seed"][k] == 0 and not rec["bias"][k]]
    assert rec["confirmed"][k] and rec["stopped_by"][k] == "maxnorm"
    return [
        f"a GLU error of {rec['glu_error'][k]:.0e}".replace("e-06", "e-6"),
        "`weightnorm` just above 1e3" if 1e3 <= rec["weightnorm"][k] < 1.1e3 else "weightnorm not near 1e3",
    ]


def test_getting_started_channel_setting_matches_its_file():
    page = " ".join((ROOT / "docs" / "getting_started.md").read_text().split())
    missing = [c for c in _recipe_seed_claims() if " ".join(c.split()) not in page]
    assert not missing, f"docs/getting_started.md no longer says what its files hold: {missing}"


def _restart_step_claims():
    """docs/solvers.md's prose under "The step after an event", rebuilt from its file."""
    w = _load("kink_restart_step.json")["workloads"]
    row = {(n, r["rule"], r["tol"]): r for n in w for r in w[n]["rows"]}

    def pct(n, k, new, old, tol=1e-8):  # |new / old - 1| in percent
        return f"{abs(round(100 * (row[(n, new, tol)][k] / row[(n, old, tol)][k] - 1))):d}%"

    def step(n, k):  # the proposed step against a fresh one, both at step ends only, at 1e-8
        return pct(n, k, "ends_only", "reselect")

    def signed(n, tol):
        x = round(100 * (row[(n, "default", tol)]["warm_s"] / row[(n, "ends_only", tol)]["warm_s"] - 1))
        return f"+{x}%" if x > 0 else f"{x}%"

    e = docs_tables._e
    p9 = {n: row[(n, "ends_only", 1e-9)] for n in w}
    r8 = {n: row[(n, "reselect", 1e-8)] for n in w}
    d8, o8 = {n: row[(n, "default", 1e-8)] for n in w}, {n: row[(n, "ends_only", 1e-8)] for n in w}
    assert all(p9[n][k] < r8[n][k] for n in w for k in ("err_median", "err_p90", "err_max"))
    assert (d8["demo"]["events_differ"], o8["demo"]["events_differ"], d8["heavy"]["events_differ"]) == (0, 1, 0)
    return [
        f"saves {step('demo', 'steps_per_traj')} of the steps and {step('demo', 'gradients_per_traj')} of the "
        f"gradients per trajectory on the demo DAG at 1e-8, and {step('heavy', 'steps_per_traj')} of the steps and "
        f"{step('heavy', 'gradients_per_traj')} of the gradients on `heavy`",
        f"Event conditions rise ({step('demo', 'conditions_per_traj')} and {step('heavy', 'conditions_per_traj')})",
        f"The bare cost falls {step('demo', 'bare_us_per_traj')} and {step('heavy', 'bare_us_per_traj')}; warm wall "
        f"time {step('demo', 'warm_s')} and {step('heavy', 'warm_s')}",
        f"(median {e(o8['heavy']['err_median'])} against {e(r8['heavy']['err_median'])})",
        f"for {round(100 * (1 - p9['heavy']['bare_us_per_traj'] / r8['heavy']['bare_us_per_traj'])):d}% less bare cost on "
        f"`heavy` and {round(100 * (p9['demo']['bare_us_per_traj'] / r8['demo']['bare_us_per_traj'] - 1)):d}% more on the "
        "demo DAG",
        f"cost {d8['demo']['conditions_per_traj'] - o8['demo']['conditions_per_traj']:.1f} more condition evaluations per "
        f"trajectory on the demo DAG at 1e-8 (forward passes: {pct('demo', 'bare_us_per_traj', 'default', 'ends_only')} "
        "more bare cost)",
        f"the largest error, {e(o8['demo']['err_max'])}, now {e(d8['demo']['err_max'])}",
        f"the gradients fell {pct('heavy', 'gradients_per_traj', 'default', 'ends_only')} "
        f"({d8['heavy']['gradients_per_traj']:.1f} against {o8['heavy']['gradients_per_traj']:.1f})",
        f"Warm wall time moved by {signed('demo', 1e-8)} and {signed('demo', 1e-9)} on the demo DAG and "
        f"{signed('heavy', 1e-8)} and {signed('heavy', 1e-9)} on `heavy`",
    ]


def _restart_step_10k_claims():
    rec = _load("kink_restart_step_10k.json")
    rows = {r["rule"]: r for r in rec["workloads"]["demo"]["rows"]}
    order = ("default", "ends_only", "reselect")
    e = docs_tables._e
    assert rec["workloads"]["demo"]["n_inits"] == 10_000
    return [
        f"differs from the reference's in {rows['default']['events_differ']}, {rows['ends_only']['events_differ']} and "
        f"{rows['reselect']['events_differ']} trajectories under the three rules",
        f"the largest error is {', '.join(e(rows[r]['err_max']) for r in order[:2])} and {e(rows['reselect']['err_max'])}",
        f"and the warm time {rows['default']['warm_s']:.2f}, {rows['ends_only']['warm_s']:.2f} and "
        f"{rows['reselect']['warm_s']:.2f} s",
    ]


def test_restart_step_prose_matches_its_file():
    page = " ".join((ROOT / "docs" / "solvers.md").read_text().split())
    missing = [c for c in _restart_step_claims() + _restart_step_10k_claims() if " ".join(c.split()) not in page]
    assert not missing, f"docs/solvers.md no longer says what kink_restart_step.json holds: {missing}"
