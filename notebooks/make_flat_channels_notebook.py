"""Build notebooks/flat_channels.ipynb (then execute it with nbclient or jupyter)."""

from pathlib import Path

import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

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
    st = ch.channel_frequency(activations=("softplus",), roughness=(0.5, 10.0), widths=(2,), n_inits=2,
                              n_samples=16, t1=1e2, progress=False)
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
res = ij.newton_phase(start, Xt, Yt, maxnorm=20.0, max_steps=300)
print(res.table())
print("weightnorm", float(res.weightnorm[0]), "confirmed:", ch.confirm_channel(start.with_edge_weights(res.theta[0]), Xt, Yt, maxnorm=20.0, pair_tol=1.0))""")

md("""### Loss levels (modified Rosenbrock on the authors' regular grid)

Read from `benchmarks/results/channels_loss_levels_*.json` (`benchmarks/channels_loss_levels.py`).
The committed run is **reduced** (shared 2-core CPU): an 11 x 11 grid instead of 101 x 101, 16
seeds per cell instead of >= 100, 500 flow steps and 500 Newton iterations. Infinite runs /
confirmed channels per cell, with Wilson 95% intervals.

The paper claims channels are reached *with high probability*. Done its way they are, without
biases (most runs with r >= 2 end in confirmed channels); with biases fewer runs are infinite
and few of those are channels; with r = 1 a single neuron diverges along softplus's own ReLU
limit, which `weightnorm >= 1e3` also counts as infinite but is no channel.""")

code("""res_dir = Path("../benchmarks/results")
levels = sorted(res_dir.glob("channels_loss_levels_*.json"))
if levels:
    lv = json.loads(levels[-1].read_text())
    print(f"{levels[-1].name}: {lv['command']}")
    print(f"{'act':>9} {'bias':>5} {'r':>2} {'n':>4} {'infinite':>9} {'95% CI':>14} {'confirmed':>9} {'dup':>4} {'levels':>6}")
    for s in lv["summary"]:
        lo, hi = s["infinite_ci"]
        print(f"{s['activation']:>9} {str(s['bias']):>5} {s['r']:>2} {s['n']:>4} {s['infinite']:>9} [{100*lo:5.1f},{100*hi:6.1f}]% "
              f"{s['confirmed']:>9} {s['duplicate']:>4} {s['n_levels']:>6}")
    rec = lv["records"]
    print(f"total: {sum(rec['infinite'])} of {len(rec['infinite'])} infinite, {sum(rec['confirmed'])} confirmed channels")
    for r in lv.get("optimizers", []):
        print(f"{r['optimizer']:>5} lr={r['lr']:<6g} batch={str(r['batch_size']):>5}: infinite {r['infinite']}/{r['n']}, "
              f"median weightnorm {r['median_weightnorm']:.2f}")
    fig = plt.figure(figsize=(12, 8)); plt.imshow(plt.imread(str(levels[-1].with_suffix(".png")))); plt.axis("off"); plt.show()""")

md("""### Roughness (Matérn-3/2 GP teachers, the paper's kernel scalings 0.1, 0.5, 2, 10)

The paper claims the channel fraction rises with the roughness of the target. Softplus, bias,
r = 4, 2-D standard-normal inputs; the committed run is reduced (fewer samples and runs, see its
command).""")

code("""rough = sorted(res_dir.glob("channels_roughness_*.json"))
if rough:
    ro = json.loads(rough[-1].read_text())
    print(f"{rough[-1].name}: {ro['command']}")
    for s in ro["summary"]:
        lo, hi = s["channel_paper_ci"]; clo, chi = s["confirmed_ci"]
        print(f"{s['label']:>7}: n={s['n']}, infinite {s['infinite']}, paper-criterion channels {s['channel_paper']} "
              f"[{100*lo:.0f}, {100*hi:.0f}]%, confirmed {s['confirmed']} [{100*clo:.0f}, {100*chi:.0f}]%, median MSE {s['median_mse']:.3g}")
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

nb = nbf.v4.new_notebook()
nb.cells = cells
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, Path(__file__).parent / "flat_channels.ipynb")
