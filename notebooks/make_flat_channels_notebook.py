"""Generate (and optionally execute) notebooks/flat_channels.ipynb.

    .venv/bin/python notebooks/make_flat_channels_notebook.py            # write the cells (as committed)
    .venv/bin/python notebooks/make_flat_channels_notebook.py --execute  # and execute, full size
"""

import argparse
from pathlib import Path

import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731
HERE = Path(__file__).resolve().parent

md("""# Flat channels to infinity

Smooth networks (softplus, erf, `g(x) = sigmoid(4x) + softplus(x)`) trained by gradient flow can
run into *channels*: two neurons' input weights merge while their output weights diverge with
opposite signs. In channel coordinates `w = (w_i + w_j)/2`, `eps = ||w_i - w_j||/2`,
`Delta = (w_i - w_j)/||w_i - w_j||`, `c = a_i + a_j`, `a = eps (a_i - a_j)` the pair tends to the
gated linear unit `c sigma(w.x) + a (Delta.x) sigma'(w.x)` as `eps -> 0`; the loss approaches the
limit loss like `eps^2` while the sharpness grows like `1/eps^2`.

This notebook shows a channel trajectory of the two-neuron toy model, the jump procedure and
its scaling, the GLU approximation, the toy model's critical points (on the paper's `w` axis), a
saddle line, the gradient-flow-only frequency study, and the paper's own study done its way
(flow, then trust-region Newton): loss levels, roughness, SGD/Adam, edge of stability, beside
the paper's claims. Set `IJ_NOTEBOOK_SMALL=1` for a quick run
(the tests do). Times are gradient-flow times of `L = (1/2) E (f - y)^2` (population) or
`(1/2N) sum (f - y)^2` (data).""")

code("""import json, os, time
from pathlib import Path

import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jax.random as jr
import matplotlib.pyplot as plt
import numpy as np

import invariant_jax as ij
from invariant_jax import channels as ch
from invariant_jax.losses import hessian

SMALL = os.environ.get("IJ_NOTEBOOK_SMALL") == "1"
print("small run" if SMALL else "full run")""")

md("""## 1. A channel trajectory of the toy model

Two neurons without bias, `f(x) = a1 erf(w1 x) + a2 erf(w2 x)` (sections 1-3 use these `erf(z)`
students, `convention="erf"`, whose `w` is the paper's divided by sqrt2; section 4 uses the
paper's `erf(z/sqrt2)` neurons, the default), trained on the population
loss (x ~ N(0, 1), Gauss-Hermite with 401 nodes) for the target
`erf((5x + 2.5)/sqrt2) + erf((5x - 2.5)/sqrt2)`. The flow is stiff in the channel, so we use the
implicit Kvaerno5 solver and log-spaced save times.""")

code("""X, Y, loss = ch.toy_data()
net0 = ch.toy_network(0.55, 0.7, 3.0, -2.5, convention="erf")
T1 = 1e3 if SMALL else 1e7
t = time.perf_counter()
flow = ij.gradient_flow(net0, X, Y, T1, loss=loss, saveat=ij.SaveTimes(n_save=21 if SMALL else 81, spacing="log"),
                        solver=ij.SolverOptions("kvaerno5", rtol=1e-9, atol=1e-9, max_steps=50_000))
print(f"{int(flow.num_steps)} Kvaerno5 steps to t = {float(flow.t_final):.0e} in {time.perf_counter() - t:.1f} s;",
      "status:", ij.result_name(flow.result))
report = ch.detect_channels(flow)
print(report.table())""")

code("""ts = np.asarray(flow.ts)[1:]
th = np.asarray(flow.thetas)[1:]
fig, ax = plt.subplots(1, 3, figsize=(13, 3.4))
L_channel = float(ch.toy_limit_loss(0.6126, convention="erf")[0])  # limit loss at the channel minimum (section 4)
ax[0].loglog(ts, np.asarray(flow.losses)[1:] - L_channel)
ax[0].set(xlabel="t", ylabel="loss - L0(channel minimum)", title="loss creeps down")
ax[1].semilogx(ts, th[:, 2], label="a1"); ax[1].semilogx(ts, th[:, 3], label="a2")
ax[1].set(xlabel="t", title="output weights diverge"); ax[1].legend()
ax[2].loglog(ts, np.abs(th[:, 0] - th[:, 1]) / 2, label="eps"); ax[2].loglog(ts, np.linalg.norm(th, axis=1), label="||theta||")
ax[2].set(xlabel="t", title="input weights merge"); ax[2].legend()
plt.tight_layout(); plt.show()""")

md("""## 2. The jump procedure

Halve `eps` holding `(w, Delta, c, a)`, map back to weights, continue the flow, repeat. We record
the gap to the limit loss (the loss of `collapse_channel`) and the top Hessian eigenvalue, and
fit the exponents with their standard errors.""")

code("""jumps = ch.jump_procedure(flow.final, (0, 1), X, Y, loss=loss, n_jumps=5 if SMALL else 8,
                          t_flow=0.0 if SMALL else 1e3, progress=False)
print(jumps.table())
fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
inv = 1 / jumps.eps
ax[0].loglog(inv, jumps.sharpness, "o-", label=f"sharpness, slope {jumps.sharpness_fit.exponent:.3f}")
ax[0].loglog(inv, jumps.sharpness[0] * (inv / inv[0]) ** 2, "k--", lw=0.8, label="(1/eps)^2")
ax[0].set(xlabel="1/eps", ylabel="top Hessian eigenvalue"); ax[0].legend()
ax[1].loglog(inv, jumps.gap, "o-", label=f"loss - L0, slope {-jumps.gap_fit.exponent:.3f}")
ax[1].loglog(inv, jumps.gap[0] * (inv / inv[0]) ** -2, "k--", lw=0.8, label="eps^2")
ax[1].set(xlabel="1/eps"); ax[1].legend()
plt.tight_layout(); plt.show()""")

md("""## 3. The GLU approximation

At fixed `(w, Delta, c, a)` the pair's output tends to `c erf(w x) + a (Delta x) erf'(w x)`. With
`w` the midpoint, the error terms are even in `eps`: the rate is `eps^2` (better than the
`O(eps)` the limit needs).""")

code("""pair = ch.channel_coordinates(flow.final, 0, 1)
xs = jnp.linspace(-3, 3, 400)[:, None]
fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
ax[0].plot(xs[:, 0], ch.toy_target(xs)[:, 0], "k", lw=2, label="target")
for e in (0.5, 0.2, 0.05):
    ax[0].plot(xs[:, 0], ch.pair_output(pair.with_eps(e), xs)[:, 0], label=f"pair, eps={e}")
ax[0].plot(xs[:, 0], ch.glu_limit(pair, xs)[:, 0], "r--", label="GLU limit")
ax[0].set(xlabel="x"); ax[0].legend(fontsize=8)
conv = ch.glu_convergence(pair, xs, np.geomspace(0.3, 1e-3, 10))
ax[1].loglog(conv.eps, conv.errors, "o-", label=f"slope {conv.fit}")
ax[1].set(xlabel="eps", ylabel="max |pair - GLU|"); ax[1].legend(fontsize=8)
plt.tight_layout(); plt.show()
print("GLU convergence rate:", conv.fit)""")

md("""## 4. The toy model's limit loss and its critical points (paper's axis)

With the paper's student neurons `erf(z/sqrt2)` (the default `convention="paper"`), collapse the
pair to its GLU and choose `(c, a)` optimally: the limit loss `L0(w)` depends on the
merged input weight only (the channel minimum sits at `w = 0.866`, sqrt2 times the `0.6126` of
the `erf(z)` convention). Its critical points are saddles (maxima along `w`) or channel minima;
`h(w)` in `L ~ L0 + eps^2 h` decides whether the channel attracts (`h > 0`).""")

code("""cp = ch.toy_critical_points(w_max=4.5, n_grid=151 if SMALL else 601)
print(cp.table())
fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
ax[0].semilogy(cp.ws, cp.losses); ax[0].set(xlabel="w", ylabel="limit loss L0(w)")
for w, L, k in zip(cp.w, cp.loss, cp.kind):
    if k != "h = 0":
        ax[0].plot(w, L, "o", label=f"{k} (w={w:.3f})")
ax[0].legend(fontsize=7)
ax[1].plot(cp.ws, cp.hs); ax[1].axhline(0, color="k", lw=0.5); ax[1].set(xlabel="w", ylabel="h(w)")
ax[1].set_ylim(-0.1, 0.1)
plt.tight_layout(); plt.show()""")

code("""import pandas as pd  # noqa
""" if False else """rows = [dict(w=round(float(w), 4), L0=float(L), kind=k, h=float(h), sign_h_after=s)
        for w, L, k, h, s in zip(cp.w, cp.loss, cp.kind, cp.h, cp.h_sign_after)]
print(json.dumps(rows, indent=1))""")

md("""## 5. A saddle line

Duplicate the neuron of a critical point of a width-1 erf network: the loss is the same along
the whole line `gamma`, the gradient stays zero, and the Hessian spectrum shows where the line
is a saddle. A push along the most negative eigenvector lets gradient flow escape.""")

code("""Xd, Yd, _ = ij.teacher_student(ij.mlp([2, 2, 1]), 40, key=jr.key(0), activation="erf")
small = ij.DAGNetwork(ij.mlp([2, 1, 1]), "erf", key=jr.key(10))
crit = ch.refine_critical_point(ij.gradient_flow(small, Xd, Yd, 1e4, saveat=ij.SaveTimes(spacing="log"),
                                          stop=ij.StopRules(grad_norm_tol=1e-9)).final, Xd, Yd)
gammas = jnp.linspace(-1.5, 2.5, 5 if SMALL else 41)
line = ch.saddle_line(crit, 0, Xd, Yd, gammas)
print("loss along the line: min", float(line.losses.min()), "max", float(line.losses.max()))
print("max |grad| along the line:", float(line.grad_norms.max()))
k = int(jnp.argmin(line.min_eigenvalue))
esc = ch.escape_saddle(ch.duplicate_neuron(crit, 0, float(gammas[k])), Xd, Yd, size=1e-2, t1=2e3,
                       saveat=ij.SaveTimes(n_save=11 if SMALL else 101, spacing="log"))
print(f"escape from gamma = {float(gammas[k]):.2f}: loss {float(esc.loss_saddle):.6f} -> {float(esc.loss_final):.6f}")
plt.figure(figsize=(5, 3.2)); plt.plot(gammas, line.min_eigenvalue, "o-"); plt.axhline(0, color="k", lw=0.5)
plt.xlabel("gamma"); plt.ylabel("min Hessian eigenvalue"); plt.tight_layout(); plt.show()""")

md("""## 6. The gradient-flow-only frequency study (not the paper's method)

This study has **no second-order phase**: flows stop at `t1`, and at `t1 = 1e6` none had crossed
the norm threshold (the norm grows like a small power of `t`), so it reports 0 channels
everywhere. Section 7 does the study the paper's way. Glorot-normal initializations of `mlp([1, width, 1], bias=True)` on Matérn-3/2 GP targets of
roughness `s` (length scale `1/s`), softplus and erf, Kvaerno5. The full run reads the result of
`benchmarks/channels_frequency.py` (the same `ch.channel_frequency` call, larger); the small run
computes a tiny study. "channel" uses all of the paper's criteria (`||theta|| > 1e3`); "+cand."
also counts merging pairs with diverging, opposite output weights below that norm.""")

code("""bench = Path("../benchmarks/results/channels_frequency.json")
if SMALL or not bench.exists():
    st = ch.channel_frequency(grid=ch.FrequencyGrid(activations=("softplus",), roughness=(0.5, 10.0), widths=(2,),
                                                    n_inits=2, n_samples=16), t1=1e2, progress=False)
    freq = st.to_dict()
    print(st.table())
else:
    freq = json.loads(bench.read_text())
    print(f"from {bench}: {freq['n_flows']} flows, t1 = {freq['settings']['t1']:g}")
cand = np.asarray(freq["candidate_fraction"]); chan = np.asarray(freq["channel_fraction"])
fig, ax = plt.subplots(1, len(freq["activations"]), figsize=(5 * len(freq["activations"]), 3.4), sharey=True,
                       squeeze=False)
ax = ax[0]
for a, act in enumerate(freq["activations"]):
    for m, w in enumerate(freq["widths"]):
        ax[a].semilogx(freq["roughness"], cand[a, :, m], "o-", label=f"width {w}: channel + candidate")
        ax[a].semilogx(freq["roughness"], chan[a, :, m], "x--", label=f"width {w}: channel")
    ax[a].set(title=act, xlabel="roughness s"); ax[a].legend(fontsize=7)
ax[0].set_ylabel("fraction of initializations")
plt.tight_layout(); plt.show()""")

md("""## 7. The paper's study, done its way: flow, then trust-region Newton

`ij.flow_then_newton` is MLPGradientFlow's `train`: a Kvaerno5 flow (rtol 1e-3, atol 1e-6), then
trust-region Newton with the exact Hessian (`ij.newton_phase`), stopping on the gradient,
patience, wall time, or `weightnorm = sum(theta^2)/(2E) >= 1e3` (the paper's "infinite"). First a
toy channel walked to `maxnorm = 20` in a few Newton steps, confirmed by `ch.confirm_channel`
(merging pair, opposite diverging output weights, GLU limit fitting the pair).""")

code("""Xt = jnp.linspace(-3, 3, 61)[:, None]; Yt = ch.toy_target(Xt)
start = ch.toy_network(1.10, 0.57, 3.83, -2.21)   # paper convention, inside the channel
res = ij.newton_phase(start, Xt, Yt, options=ij.NewtonOptions(maxnorm=20.0, max_steps=300))
print(res.table())
print("weightnorm", float(res.weightnorm[0]), "confirmed:", ch.confirm_channel(start.with_edge_weights(res.theta[0]), Xt, Yt, maxnorm=20.0, pair_tol=1.0))""")

md("""### Loss levels at the paper's settings (modified Rosenbrock on the authors' 101 x 101 grid)

All 20 cells (`g` / softplus, without / with bias, r = 1..5) at 100 seeds each: a Kvaerno5 flow
of up to 1000 steps, then trust-region Newton for up to 2000 iterations, `maxnorm = 1e3`
(`benchmarks/channels_loss_levels.py`; `g` without bias on one H200, the rest on the CPU, merged
from parts by `benchmarks/channels_merge.py`). Per cell: runs infinite by the paper's criterion
with Wilson 95% intervals, confirmed channels (`ch.confirm_channel`: merging pair, opposite
diverging output weights, GLU limit fitting to 1%), infinite runs that are one neuron sharpening
into its ReLU limit (`ch.sharpened_neuron`; `-` where the JSON predates the final weights),
duplicate neurons and loss levels.

The paper claims gradient-based training reaches channels *with high probability*. **Without
biases this agrees:** every run with r >= 3 (`g`) or r >= 2 (softplus) ends infinite, and 71-100%
of them are confirmed channels (softplus at r = 5: 38%, the rest are channel pairs whose GLU fit
misses 1%, which the paper's criterion counts). **With biases it does not:** `g` ends infinite in
7-27% of runs at r = 3-5 (1-19% confirmed channels; most runs stop at a finite critical point),
and softplus's 58-84% infinite runs at r = 3-5 are mostly one neuron sharpening into its ReLU
limit (confirmed channels 1%, 14%, 35%). With r = 1 no channel exists, yet 47-49% of softplus
runs are infinite: the paper's `weightnorm >= 1e3` counts the sharpened neuron too.
`docs/channels.md` has the per-width stopping reasons, wall times and the authors'
post-processing. Below the figure are the SGD / Adam arms: `g` with bias on the reduced grid, and
softplus without bias at r = 4 on the paper's grid, from the inits where flow-then-Newton ends in a
channel 16 of 16 times. No first-order run reaches `weightnorm >= 1e3` within 20000 updates.""")

code("""res_dir = Path("../benchmarks/results")
paper_runs = ["channels_loss_levels_paper_g_nobias.json",                # one H200 GPU
              "channels_loss_levels_paper_g_bias_cpu_seeds100.json",     # CPU, merged parts
              "channels_loss_levels_paper_softplus_nobias_cpu_seeds100.json",
              "channels_loss_levels_paper_softplus_bias_cpu_seeds100.json"]
rows = []
for name in paper_runs:
    path = res_dir / name
    if not path.exists():
        print(f"{name}: not in this checkout"); continue
    lv = json.loads(path.read_text())
    print(f"{name}: {len(lv['records']['loss'])} runs on {lv['devices'][0]}, {lv['total_seconds'] / 60:.0f} min")
    rows += lv["summary"]
print(f"\\n{'act':>9} {'bias':>5} {'r':>2} {'n':>4} {'infinite':>8} {'95% CI':>14} {'confirmed':>9} {'sharpened':>9} "
      f"{'dup':>4} {'levels':>6}")
for s in rows:
    lo, hi = s["infinite_ci"]
    print(f"{s['activation']:>9} {str(s['bias']):>5} {s['r']:>2} {s['n']:>4} {s['infinite']:>8} [{100*lo:5.1f},{100*hi:6.1f}]% "
          f"{s['confirmed']:>9} {s.get('sharpened', '-'):>9} {s['duplicate']:>4} {s['n_levels']:>6}")
fig, ax = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for k, bias in enumerate((False, True)):
    for act, colour in (("g", "C0"), ("softplus", "C1")):
        cell = sorted((s for s in rows if s["activation"] == act and s["bias"] == bias), key=lambda s: s["r"])
        if not cell:
            continue
        r = np.array([s["r"] for s in cell])
        for key, style, shift in (("infinite", "o-", -0.06), ("confirmed", "s--", 0.06)):
            p = np.array([s[f"{key}_fraction"] for s in cell]); ci = np.array([s[f"{key}_ci"] for s in cell])
            ax[k].errorbar(r + shift, 100 * p, yerr=100 * np.abs(ci.T - p), fmt=style, color=colour, capsize=3,
                           label=f"{act}: {key}")
    ax[k].set(title=f"bias={bias}", xlabel="hidden neurons r", xticks=range(1, 6))
    ax[k].legend(fontsize=7)
ax[0].set_ylabel("% of runs (Wilson 95%)")
plt.tight_layout(); plt.show()

# the SGD / Adam arms: g with bias on the reduced grid, softplus without bias on the paper's grid
arms = [(p, "optimizers") for p in [res_dir / "channels_loss_levels_reduced_cpu.json"] if p.exists()]
arms += [(p, "rows") for p in sorted(res_dir.glob("channels_optimizers_*.json"))]
for path, key in arms:
    doc = json.loads(path.read_text())
    print(f"\\n{path.name}: {doc['command']}")
    if doc.get("newton"):
        nw = doc["newton"]
        print(f"  flow-then-Newton from the same inits: infinite {nw['infinite']}/{doc['seeds']}, confirmed {nw['confirmed']}; "
              f"merging pair at init {doc.get('channel_like_at_init', '-')}/{doc['seeds']}")
    for r in doc[key]:
        budget = f"{r['updates']} updates" if "updates" in r else f"{r['epochs']} epochs"
        print(f"{r['optimizer']:>5} lr={r['lr']:<6g} batch={str(r['batch_size']):>5}: {budget}, "
              f"infinite {r['infinite']}/{r['n']}, merging pair {r.get('channel_like', '-')}/{r['n']}, "
              f"median weightnorm {r['median_weightnorm']:.2f} (max {r['max_weightnorm']:.1f})")""")

md("""### Roughness (Matérn-3/2 GP teachers, the paper's kernel scalings 0.1, 0.5, 2, 10)

The paper claims the channel fraction rises with the roughness of the target. Softplus, bias,
r = 4, 2-D standard-normal inputs, 10^4 samples: 10 GP teachers x 10 inits per scaling (the
merged CPU run; its `parts` name the commands). Runs of one teacher share its data, so beside the
Wilson intervals the per-teacher counts and a teacher-bootstrap interval are printed.""")

code("""paper_size = res_dir / "channels_roughness_paper_cpu_runs100.json"  # 10^4 samples, 100 runs per scaling
rough = [paper_size] if paper_size.exists() else sorted(res_dir.glob("channels_roughness_*.json"))[-1:]
if rough:
    ro = json.loads(rough[-1].read_text())
    print(f"{rough[-1].name}: {ro['command']}")
    for s in ro["summary"]:
        lo, hi = s["channel_paper_ci"]; clo, chi = s["confirmed_ci"]
        print(f"{s['label']:>7}: n={s['n']}, infinite {s['infinite']}, paper-criterion channels {s['channel_paper']} "
              f"[{100*lo:.0f}, {100*hi:.0f}]%, confirmed {s['confirmed']} [{100*clo:.0f}, {100*chi:.0f}]%, median MSE {s['median_mse']:.3g}")
    for label, t in ro.get("teacher_spread", {}).items():  # runs of one teacher share its data
        blo, bhi = t["channel_paper_ci_teacher_bootstrap"]
        print(f"{label:>7}: paper-criterion channels per teacher {t['channel_paper_per_teacher']}, "
              f"teacher-bootstrap 95% [{100*blo:.0f}, {100*bhi:.0f}]%")
    fig = plt.figure(figsize=(6, 4)); plt.imshow(plt.imread(str(rough[-1].with_suffix(".png")))); plt.axis("off"); plt.show()""")

md("""### Edge of stability

Full-batch GD inside the toy channel (4096 samples, paper convention): the top Hessian
eigenvalue rises to `2/lr` and stays there; fitted exponents with standard errors
(`benchmarks/channels_eos.py`).""")

code("""eos_path = res_dir / "channels_eos.json"
if eos_path.exists():
    eo = json.loads(eos_path.read_text())
    for r in eo["rows"]:
        print(f"lr={r['lr']:<5g} 2/lr={r['two_over_lr']:6.2f}: late sharpness / (2/lr) = {r['late_ratio_to_2_over_lr']:.3f}, "
              f"eps {r['eps_start']:.3f} -> {r['eps_end']:.3f}, reached edge: {r['reached_edge']}")
    for k, f in eo["fits"].items():
        print(k, ":", f"{f['exponent']:.3f} +- {f['stderr']:.3f}" if "exponent" in f else f["error"])
    fig = plt.figure(figsize=(12, 3.6)); plt.imshow(plt.imread(str(eos_path.with_suffix(".png")))); plt.axis("off"); plt.show()""")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--execute", action="store_true", help="execute it and write it with outputs (for reading "
                   "locally; the repository keeps notebooks without outputs, and the tests execute them)")
    args = p.parse_args()
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if args.execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    nbf.write(nb, HERE / "flat_channels.ipynb")
    print(f"wrote {HERE / 'flat_channels.ipynb'}")


if __name__ == "__main__":
    main()
