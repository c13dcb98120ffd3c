"""Generate (and optionally execute) notebooks/connectivity_and_singularities.ipynb.

    .venv/bin/python notebooks/make_connectivity_notebook.py            # write the cells (as committed)
    .venv/bin/python notebooks/make_connectivity_notebook.py --execute  # and execute, full size
    IJ_NOTEBOOK_SMALL=1 .venv/bin/python notebooks/make_connectivity_notebook.py --execute
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NB = HERE / "connectivity_and_singularities.ipynb"

CELLS = [
    ("md", """# Connectivity of the invariant set, frozen edges and singular points

Gradient flow on a ReLU network conserves `c = B~ theta^2` (per hidden node: squared
incoming minus squared outgoing weights), so it never leaves
`H_G(c) = {theta : B~ theta^2 = c}`. This notebook shows

1. how `ij.connectivity` explains the components of `H_G(c)` (frozen edges and why),
2. the toy experiment: an out-bottleneck whose output weight must change sign, where the
   verdict at `t = 0` predicts failure,
3. how often random initializations disconnect `H_G(c)`, per architecture and initializer,
4. singular points: `J_G` loses rank exactly where sub-networks are cut off, and gradient flow
   keeps that rank,
5. the invariant set itself (the toy's two sheets and one sheet, with flows inside), and the
   component of a network, a path inside `H_G(c)` and the reachability of a teacher.

Time is the gradient-flow time of `L = (1/2N) sum ||f - y||^2`. Set the environment variable
`IJ_NOTEBOOK_SMALL=1` for a quick run (the test suite does)."""),
    ("code", """import os, sys, json
from pathlib import Path
SMALL = os.environ.get("IJ_NOTEBOOK_SMALL", "0") == "1"
N_PER_KIND = 3 if SMALL else 100      # toy initializations per kind
T1 = 4.0 if SMALL else 30.0            # small: no flow stalls at a kink for its whole step budget
N_INITS = 2_000 if SMALL else 100_000  # initializations per architecture (c at t = 0 only)
N_DAGS = 1 if SMALL else 3
ROOT = Path.cwd() if (Path.cwd() / "benchmarks").exists() else Path.cwd().parent
sys.path.insert(0, str(ROOT / "benchmarks"))"""),
    ("code", """import jax
jax.config.update("jax_enable_x64", True)
import numpy as np, jax.random as jr, matplotlib.pyplot as plt
import invariant_jax as ij
import toy_bottleneck, connectivity_frequency"""),
    ("md", """## 1. A verdict in words

`example_dag()` has an out-bottleneck `k` (one outgoing edge) whose pure ancestors are `a0, a1`
(they only feed `k`). The edge `k -> y0` is frozen when some closed set `S` of `{k, a0, a1}` has
`sum_S c < 0`: `S` must then supply `-sum_S c > 0` through that one edge, so `theta_{k y0}^2`
stays above it. The combinatorial verdict (one min cut per bottleneck) is checked against an
exact LP (HiGHS)."""),
    ("code", """g = ij.example_dag()
r = ij.connectivity(g, {"a0": 0.2, "a1": -0.1, "a2": 1.0, "a3": 1.0, "k": -0.3}, lp="all")
print(r.explain())
print("LP min theta_e^2 on frozen edges:", {e: round(float(r.lp_min_q[k]), 6) for e, k in zip(r.frozen_edges, r.frozen_index)})"""),
    ("md", """## 2. Toy experiment: the bottleneck's output weight must change sign

Graph `x0, x1 -> k -> y` plus a skip `x0 -> y`; teacher with `theta_{k y} = -1`. Three kinds of
Glorot initializations with `theta_{k y}` rescaled: *frozen-wrong* (`theta_ky > 0`, `c_k < 0`:
frozen), *balanced-wrong* (`theta_ky > 0`, `c_k > 0`: free), *right-sign* (`theta_ky < 0`).
Learnt = final loss below half the best loss any `theta_ky >= 0` can reach."""),
    ("code", """res = toy_bottleneck.run_toy(N_PER_KIND, t1=T1)
A = res["_arrays"]
print(f"{'kind':>15} {'frozen@0':>9} {'learnt':>7} {'median final loss':>18} {'sign changed':>13}")
for name, k in res["kinds"].items():
    print(f"{name:>15} {k['frozen_at_t0']:>9.2f} {k['learnt']:>7.2f} {k['final_loss_quantiles'][2]:>18.3e} {k['frac_theta_ky_sign_changed']:>13.2f}")
pred_fail = A["verdict"] & (A["theta_ky"][:, 0] > 0)
print("verdict at t=0 (frozen & wrong sign => cannot learn): accuracy", round(float(np.mean(pred_fail == ~A["success"])), 3),
      "| every predicted failure failed:", bool(np.all(~A["success"][pred_fail])))"""),
    ("code", """fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
bins = np.logspace(-14, 0, 40)
for i, name in enumerate(toy_bottleneck.KINDS):
    L = np.clip(A["loss_final"][A["kind"] == i], 1e-14, None)
    ax[0].hist(L, bins=bins, alpha=0.6, label=name)
    th = A["theta_ky"][A["kind"] == i]
    frac = np.nanmean(np.where(np.isfinite(th), th < 0, np.nan), axis=0)
    ax[1].plot(np.asarray(res["ts"])[1:], frac[1:], marker="o", ms=3, label=name)
ax[0].axvline(res["loss_nonneg_bound"], color="k", ls="--", lw=1, label="best with theta_ky >= 0")
ax[0].set_xscale("log"); ax[0].set_xlabel("final loss"); ax[0].set_ylabel("initializations"); ax[0].legend(fontsize=8)
ax[1].set_xscale("log"); ax[1].set_xlabel("gradient-flow time t"); ax[1].set_ylabel("fraction with theta_ky < 0"); ax[1].legend(fontsize=8)
ax[0].set_title("final-loss distribution"); ax[1].set_title("sign of the bottleneck weight")
plt.tight_layout(); plt.show()"""),
    ("md", """Frozen-wrong initializations never change the sign of `theta_ky` and all stay at the
`theta_ky >= 0` bound: the verdict at `t = 0` is a certificate of failure. Not-frozen ones change
sign; some of them still end in another (unrelated) local minimum of this ReLU regression, so
"not frozen" means *can* learn, not *will*. The frozen-wrong flows also exhaust diffrax's step
budget more often (the vector field is discontinuous where ReLU units switch, and the flow slides
along such a switching surface); their last state is kept, so nothing is lost.

## 3. How often does initialization disconnect `H_G(c)`?

Only `c` at `t = 0` is needed: `N_INITS` draws per architecture via `vmap`, decided at once by
`ij.frozen_mask`."""),
    ("code", """ONLY = ["layer 1", "layer 3", "2-3-3", "p=0.35"] if SMALL else None  # a few architectures when small
rows = connectivity_frequency.frequency_table(N_INITS, n_dags=N_DAGS, progress=False, only=ONLY)
print(f"{'architecture':>28} {'glorot':>8} {'kaiming':>8}")
for r in rows:
    print(f"{r['arch']:>28} {r['glorot']['disconnected']:>8.3f} {r['kaiming']['disconnected']:>8.3f}")"""),
    ("code", """fig, ax = plt.subplots(figsize=(11, 4))
x = np.arange(len(rows))
ax.bar(x - 0.2, [r["glorot"]["disconnected"] for r in rows], 0.4, label="Glorot")
ax.bar(x + 0.2, [r["kaiming"]["disconnected"] for r in rows], 0.4, label="Kaiming")
ax.set_xticks(x, [r["arch"] for r in rows], rotation=60, ha="right", fontsize=8)
ax.set_ylabel("P(H_G(c) disconnected)"); ax.set_title(f"{N_INITS} initializations per architecture"); ax.legend()
plt.tight_layout(); plt.show()"""),
    ("md", """## 4. Singular points and the rank of `J_G` along the flow

Cut a sub-network off (zero its boundary edges): `J_G = 2 B~ diag(theta)` loses one rank per
cut-off group, `sum_W c = 0`, and gradient flow keeps the boundary exactly at zero, so the rank
is constant. `ij.is_singular_value(g, c)` decides from `c` alone whether `H_G(c)` has such points."""),
    ("code", """import equinox as eqx, jax.numpy as jnp
g = ij.mlp([2, 4, 3, 1], bias=True)
W = {"h1_0", "h2_0"}                      # the sub-network to cut off
X, Y, _ = ij.teacher_student(g, 32, key=jr.key(0))
nets = eqx.filter_vmap(lambda k: ij.DAGNetwork(g, key=k))(jr.split(jr.key(7), 4))
theta = np.array(nets.edge_weights())
theta[0, [k for k, (u, v) in enumerate(g.edges) if (u in W) != (v in W)]] = 0.0   # row 0: cut off W
nets = nets.with_edge_weights(jnp.asarray(theta))
net0 = ij.DAGNetwork(g, edge_weights=theta[0])
c0 = np.asarray(ij.conserved_quantities(net0))
print("cut-off groups:", ij.singular_subnetworks(net0), " rank:", int(ij.jacobian_rank(net0)), "of", len(g.hidden))
print("is_singular_value(c):", ij.is_singular_value(g, c0), " | generic c:",
      ij.is_singular_value(g, np.asarray(ij.conserved_quantities(ij.DAGNetwork(g, edge_weights=theta[1])))))
flows = eqx.filter_jit(eqx.filter_vmap(lambda n: ij.gradient_flow(n, X, Y, 4.0 if SMALL else 20.0, saveat=ij.SaveTimes(n_save=12, spacing="log"))))(nets)
B = g.incidence()
fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
for i in range(4):
    th = np.asarray(flows.thetas[i])
    s = np.array([np.linalg.svd(2 * B * t[None], compute_uv=False) for t in th])
    rk = [int(np.linalg.matrix_rank(2 * B * t[None])) for t in th]
    node_norm = np.min(np.sqrt((th**2) @ np.abs(B).T), axis=1) * 2   # smallest row norm of J_G
    name = "cut-off init" if i == 0 else f"generic init {i}"
    print(f"{name}: ranks along the flow {sorted(set(rk))}, loss {float(flows.losses[i][0]):.3f} -> {float(flows.losses[i][-1]):.4f}, "
          f"edges that moved: {int(np.sum(np.abs(th[-1] - th[0]) > 1e-6))}/{len(g.edges)}")
    smin = s[:, max(rk) - 1]
    ax[0].plot(np.asarray(flows.ts[i])[1:], smin[1:], marker="o", ms=3, label=name)
    ax[1].plot(np.asarray(flows.ts[i])[1:], (smin / node_norm)[1:], marker="o", ms=3, label=name)
ax[0].set_ylabel("smallest nonzero singular value of J_G"); ax[1].set_ylabel("... / smallest row norm of J_G")
for a in ax:
    a.set_xscale("log"); a.set_xlabel("gradient-flow time t"); a.legend(fontsize=8)
ax[1].set_ylim(0, 1.05)
plt.tight_layout(); plt.show()"""),
    ("md", """## 5. The invariant set itself, and using the theorem

On the toy graph, `H_G(c)` in `(theta_x0k, theta_x1k, theta_ky)` is the hyperboloid
`theta_x0k^2 + theta_x1k^2 - theta_ky^2 = c_k` (the skip weight is free): two sheets when
`c_k < 0` (the sign of `theta_ky` is frozen), one when `c_k > 0`. `ij.plot_invariant_set`
samples it (points of `P(c)` from LP vertices plus input-output paths, random signs) and
colours the points by component; gradient-flow trajectories stay on their sheet.
`ij.component_of`, `ij.invariant_path` and `ij.reachability` answer the questions a user
of the theorem asks: which component, a path inside `H_G(c)`, and whether the teacher's
function is available from an initialization."""),
    ("code", """from toy_bottleneck import toy_data, toy_graph, toy_teacher
g = toy_graph()
X, Y, _ = toy_data()
E = {e: k for k, e in enumerate(g.edges)}
def on_H(ck, a, b, d_sign, s):
    th = np.zeros(len(g.edges))
    th[E["x0", "k"]], th[E["x1", "k"]], th[E["x0", "y"]] = a, b, s
    th[E["k", "y"]] = d_sign * np.sqrt(a * a + b * b - ck)
    return th
fig = plt.figure(figsize=(11, 5))
for j, ck in enumerate([-0.5, 0.5]):
    inits = [on_H(ck, 0.9, 0.4, 1, 0.1), on_H(ck, 0.8, -0.7, 1, -0.2), on_H(ck, 0.8, 0.5, -1, 0.0)]
    trajs = [np.asarray(ij.gradient_flow(ij.DAGNetwork(g, "relu", edge_weights=t), X, Y, T1,
                                         saveat=ij.SaveTimes(n_save=100)).thetas) for t in inits]
    trajs = [t[np.all(np.isfinite(t), axis=1)] for t in trajs]  # a flow stopped at a kink leaves later saves unfilled
    ax = fig.add_subplot(1, 2, j + 1, projection="3d")
    ij.plot_invariant_set(g, [ck], edges=[("x0", "k"), ("x1", "k"), ("k", "y")], trajectories=trajs,
                          n=800 if SMALL else 4000, seed=j, ax=ax)
    comp = ij.component_of(g, np.stack([t[[0, -1]] for t in trajs]))
    print(f"c_k = {ck:+}: components of each flow at start / end:", [list(l) for l in comp.labels])
plt.tight_layout(); plt.show()

teacher = ij.DAGNetwork(g, "relu", edge_weights=toy_teacher())
wrong = ij.DAGNetwork(g, "relu", edge_weights=on_H(-0.5, 0.6, 0.3, 1, 0.1))    # frozen, theta_ky > 0
free = ij.DAGNetwork(g, "relu", edge_weights=on_H(0.5, 0.9, 0.4, 1, 0.1))      # connected
print(ij.component_of(wrong).label, "|", ij.reachability(wrong, teacher).reason[:160], "...")
r = ij.reachability(free, teacher)
print("reachable:", r.reachable, " rescaling lambda_k =", r.scales, " residual", f"{r.residual:.1e}")
path = ij.invariant_path(free, r.network(free))
print(f"path to the rescaled teacher: {len(path)} networks, max |B~ theta^2 - c| / scale = {path.residual.max():.1e}, "
      f"largest step {path.max_step:.3f}, sign changes at {path.flips}")"""),
]


def build() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def execute(nb, timeout: int = 1800):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--execute", action="store_true", help="execute it and write it with outputs (for reading "
                   "locally; the repository keeps notebooks without outputs, and the tests execute them)")
    args = p.parse_args()
    nb = build()
    if args.execute:
        execute(nb)
    nbformat.write(nb, NB)
    print(f"wrote {NB}")


if __name__ == "__main__":
    main()
