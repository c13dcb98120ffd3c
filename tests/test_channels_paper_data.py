"""docs/channels.md's comparison with the authors' committed data is the committed JSON
(benchmarks/results/channels_paper_data.json, written by benchmarks/channels_paper_data.py):
the table below is rendered from the file and must appear verbatim in the docs, and the
file's own numbers are consistent (the max difference covers every tabled row)."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "channels_paper_data.json"


def render(d: dict) -> str:
    """The markdown table of docs/channels.md's "Checked against the authors' data"."""
    lai = d["loss_at_infinity"]
    lines = [
        "| quantity | theirs | ours | difference |",
        "|---|---|---|---|",
        f"| loss at infinity, all {lai['n_rows']} rows w = {lai['w_range'][0]:g}..{lai['w_range'][1]:g} | "
        f"`loss_at_infinity.csv` | `2 L0(w)` | max {lai['max_abs_diff']:.1e} (relative {lai['max_rel_diff']:.1e}) |",
    ]
    for r in d["optima"]:
        lines.append(
            f"| {r['point']}: w, loss | {r['w_theirs']:.6f}, {r['loss_theirs']:.6e} | "
            f"{r['w_ours']:.6f}, {r['loss_ours']:.6e} ({r['kind_ours']}) | "
            f"{abs(r['w_ours'] - r['w_theirs']):.1e}, {abs(r['loss_ours'] - r['loss_theirs']):.1e} |"
        )
    for name, c in d["channel_curves"].items():
        if c["predicted_slope"] == 0:
            got = f"relative change {c['relative_change_total']:.1e} over the curve, {c['relative_change_last_two']:.1e} in its last step"
        else:
            got = f"log-log slope {c['fitted_slope']:.3f} (last segment {c['last_segment_slope']:.3f})"
        lines.append(
            f"| `{name}.csv` vs 1/eps | {got} | predicted slope {c['predicted_slope']:+.0f} | "
            f"{'-' if c['predicted_slope'] == 0 else format(c['fitted_slope'] - c['predicted_slope'], '+.3f')} |"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def data():
    return json.loads(RESULT.read_text())


def test_docs_table_is_the_committed_json(data):
    docs = (ROOT / "docs" / "channels.md").read_text()
    assert render(data) in docs, "regenerate the table: print(render(json)) from tests/test_channels_paper_data.py"
    assert data["source"]["commit"] in docs


def test_json_is_consistent(data):
    lai = data["loss_at_infinity"]
    diffs = np.array([r["ours"] - r["theirs"] for r in lai["rows"]])
    assert np.allclose(diffs, [r["diff"] for r in lai["rows"]], rtol=0, atol=1e-18)
    assert np.max(np.abs(diffs)) <= lai["max_abs_diff"]
    assert len(lai["rows"]) == -(-lai["n_rows"] // 100)  # every 100th row (the recorded --stride)
    assert "--repo" in data["command"] and len(data["source"]["commit"]) == 40


# --- Fig. 6a-b: ours against rows of flavio-martinelli/channels-to-infinity@bbea24d, copied here
# as literals with their source (paper_data/...), so these checks need no mirror. ---

# paper_data/edge_of_stability/initialization.dat (Julia Serialization of (p, v2, ls)):
# p, v2 (= ls.v2), ls.ref; ls.v1 = (0, 0, 1, -1)/sqrt2. Order (w1, w2, a1, a2).
P = np.array([0.768064464862471, -0.005364874474282851, 4.0, -2.0])
V2 = np.array([0.3692278720976327, 0.9269996117264517, 0.046596664715615015, 0.046596664715865224])
REF = np.array([1.3995541493906465, 1.399554149390851, 1.07639182434444, 1.07639182434444])
V1 = np.array([0.0, 0.0, 1.0, -1.0]) / np.sqrt(2.0)


def coords(theta):
    d = np.asarray(theta) - REF
    return np.array([d @ V1, d @ V2])


def test_their_start_points_are_their_first_rows():
    # paper_data/plots_csv/projected_dynamics.csv, row 1: flow_i1, flow_i2 and saddle (gamma, proj);
    # 1e-11: they project with the SVD's u[:, 1:2] = -(v1, v2) up to entries of 1e-14
    assert np.allclose(coords(P), [4.242640687119376, -1.542642190551781], rtol=0, atol=1e-11)
    assert np.allclose(coords(P + 2 * V2), [4.2426406871189055, 0.4573578094482189], rtol=0, atol=1e-11)
    assert np.allclose(coords([P[0], P[1], 0.5, 0.5]), [9.381384558082573e-14, -1.5892388552677712], rtol=0, atol=1e-11)


def test_their_plane_is_centred_on_our_saddle():
    import jax

    jax.config.update("jax_enable_x64", True)
    from invariant_jax import channels as ch

    L0, c, a, _ = ch.toy_limit_loss(REF[0])
    dL0 = jax.grad(lambda w: ch.toy_limit_loss(w)[0])(REF[0])
    assert abs(float(dL0)) < 1e-9 and abs(float(a)) < 1e-9  # a critical point of L0 where the GLU is one neuron
    assert abs(float(c) - 2 * REF[2]) < 1e-9  # their a1 = a2 = a*/2


# paper_data/plots_csv/function.csv: x, target, saddleline, studentone, studenttwo
FUNCTION_ROWS = [
    (-1.0, -1.987580669348384, -1.8047929051313725, -1.8438885182434652, -1.9781875966044733),
    (0.4, 0.6170682821057243, 0.9136390379518552, 0.901824164134207, 0.6595739424148307),
    (1.4, 1.9999932046537505, 2.044996372943857, 2.093316032174577, 2.0173609014526614),
]


def test_functions_against_their_rows():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from invariant_jax import channels as ch

    act = ch.toy_activation()
    dL0 = jax.jit(jax.grad(lambda w: ch.toy_limit_loss(w)[0]))
    d2L0 = jax.jit(jax.grad(jax.grad(lambda w: ch.toy_limit_loss(w)[0])))
    glus = []
    for w in (1.4, 0.87, 3.15):  # near the saddle line, channel 1, channel 2; Newton on dL0/dw = 0
        for _ in range(8):
            w = w - float(dL0(w)) / float(d2L0(w))
        _, c, a, _ = ch.toy_limit_loss(w)
        glus.append((w, float(c), float(a)))
    for x, target, *theirs in FUNCTION_ROWS:
        assert abs(float(ch.toy_target(jnp.asarray([[x]]))[0, 0]) - target) < 1e-13
        for (w, c, a), th, tol in zip(glus, theirs, (1e-12, 1e-6, 1e-6)):
            ours = c * float(act(w * x)) + a * x * float(act.derivative(w * x))
            assert abs(ours - th) < tol, (x, w, ours, th)


# paper_data/plots_csv/losslandscape.csv (file rows 2, 5002, 50502, 77778, 101102): gamma, proj, loss
LANDSCAPE_ROWS = [
    (0.0, -1.5, 0.07878335616912757),
    (25.5, -1.255, 0.049665503904219754),
    (0.0, 1.0, 0.07522585982407959),
    (3.0, 2.35, 0.01866580823277264),
    (50.0, 3.5, 0.022879025042409573),
]


def test_landscape_is_the_loss_minimised_off_their_plane():
    import jax
    import jax.numpy as jnp
    from scipy.optimize import minimize

    jax.config.update("jax_enable_x64", True)
    from invariant_jax import channels as ch

    X, Y, loss = ch.toy_data(401)
    net = ch.toy_network(1.0, 1.0, 1.0, 1.0)
    Q, _ = np.linalg.qr(np.stack([V1, V2], axis=1), mode="complete")
    B = jnp.asarray(Q[:, 2:])

    def f(z, g, a):  # paper units: 2 L
        th = jnp.asarray(REF + g * V1 + a * V2) + B @ z
        return 2 * loss(net.with_edge_weights(th)(X), Y)

    fg = jax.jit(jax.value_and_grad(f))
    for g, a, theirs in LANDSCAPE_ROWS:
        best = min(
            minimize(lambda z: [np.asarray(v) for v in fg(jnp.asarray(z), g, a)], z0, jac=True, method="BFGS",
                     options=dict(gtol=1e-12)).fun
            for z0 in (np.zeros(2), -np.asarray(B).T @ REF)
        )  # fmt: skip
        assert abs(best - theirs) < 1e-8, (g, a, best, theirs)  # ~2e-9: their quadrature against ours
        plane = float(f(jnp.zeros(2), g, a))
        assert plane > theirs + 1e-3  # the loss on the plane itself is not what they plot


def test_fig6_json_is_consistent(data):
    land = data["landscape"]
    diffs = np.array([r["ours"] - r["theirs"] for r in land["rows"]])
    assert np.max(np.abs(diffs)) <= land["max_abs_diff"]
    assert len(land["rows"]) == -(-land["n_rows"] // 100)
    for t, c in data["projected_dynamics"]["trajectories"].items():
        d = np.array([r["distance"] for r in c["rows"]])
        assert len(d) == c["n_rows"] == 100
        assert np.isclose(d.max(), c["max_distance_theirs_to_ours"]) or c["rows_covered"] < c["n_rows"]
        assert c["hausdorff"] >= c["max_distance_theirs_to_ours"] - 1e-15
        assert c["start_distance"] < 1e-9, t
    for name, c in data["functions"]["columns"].items():
        rows = data["functions"]["rows"]
        assert max(abs(r[f"{name}_ours"] - r[f"{name}_theirs"]) for r in rows) == c["max_abs_diff"]
