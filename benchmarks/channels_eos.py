"""Edge of stability inside a flat channel (the paper's Fig. 6d setting): the toy model,
teacher erf((5x +- 2.5)/sqrt2), 4096 standard-normal inputs, two erf(z/sqrt2) students
without bias (the paper's convention). Gradient flow (Kvaerno5) from
(w1, w2, a1, a2) = (0.55 sqrt2, 0.7 sqrt2, 3, -2.5) enters the channel; from its state at
t_start, full-batch GD runs at several learning rates (`ch.gd_channel_trace`).

Measured, with fitted exponents and standard errors (`ch.power_law_fit`):
- the top Hessian eigenvalue over training against 2/lr (its late median / (2/lr));
- sharpness against 1/eps (paper: sharpness ~ 1/eps^2, exponent 2), along the GD
  trajectories before they reach the edge, and across learning rates at the edge;
- the loss decrease per update against eps (the issue quotes "like eps^3"), and the
  gradient norm against eps, on the stable (monotone) part of the trajectories.

Losses are L = (1/2N) sum (f - y)^2; MLPGradientFlow's Descent(eta) on (1/N) sum is GD
with lr = 2 eta here (the paper's eta = 3.16 ... 0.01 is lr = 6.3 ... 0.02).

Usage: python benchmarks/channels_eos.py [--steps 100000] [--lrs 0.5,0.4,0.33,0.1]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402

import invariant_jax as ij  # noqa: E402
from _output import output_path, save_figure, write_json  # noqa: E402 (benchmarks/_output.py)
from invariant_jax import channels as ch  # noqa: E402


def fit(x, y):
    try:
        p = ch.power_law_fit(x, y)
        return dict(exponent=p.exponent, stderr=p.stderr, r2=p.r2, n=p.n)
    except ValueError as e:
        return dict(error=str(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--record", type=int, default=250)
    ap.add_argument("--lrs", default="0.5,0.4,0.33,0.1")
    ap.add_argument("--t-start", type=float, default=2640.0)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/local/channels_eos.json); the PNG goes beside it",
    )
    args = ap.parse_args()
    lrs = [float(v) for v in args.lrs.split(",")]
    X = jr.normal(jr.key(12), (args.samples, 1))
    Y = ch.toy_target(X)
    s2 = np.sqrt(2.0)
    net = ch.toy_network(0.55 * s2, 0.7 * s2, 3.0, -2.5)
    t0 = time.perf_counter()
    flow = ij.gradient_flow(
        net, X, Y, args.t_start, solver="kvaerno5", rtol=1e-8, atol=1e-8, saveat=ij.SaveTimes(n_save=2)
    )
    start = flow.final
    p0 = ch.channel_coordinates(start, 0, 1)
    lam0 = float(np.linalg.eigvalsh(np.asarray(ij.hessian(start, X, Y)))[-1])
    print(
        f"start (flow to t = {args.t_start:g}): eps = {float(p0.eps):.4f}, w = {float(p0.w[0]):.4f}, "
        f"sharpness = {lam0:.3f}, loss = {float(flow.loss_final):.6f}",
        flush=True,
    )
    tr = ch.gd_channel_trace(start, (0, 1), X, Y, lrs, n_steps=args.steps, record_every=args.record)
    dt = time.perf_counter() - t0
    rows, pre_eps, pre_lam, dl_eps, dl, gn_eps, gn = [], [], [], [], [], [], []
    edge_eps, edge_lam = [], []
    for k, lr in enumerate(lrs):
        lam, eps, L, G = (np.asarray(v[k]) for v in (tr.sharpness, tr.eps, tr.loss, tr.grad_norm))
        late = slice(int(0.8 * lam.size), None)
        ratio = float(np.median(lam[late]) * lr / 2)
        reached = bool(np.max(lam) >= 0.95 * 2 / lr)
        # before the edge: sharpness below 0.9 * 2/lr and the loss still monotone
        first_edge = int(np.argmax(lam >= 0.9 * 2 / lr)) if reached else lam.size
        stable = slice(0, max(first_edge, 1))
        pre_eps += list(eps[stable])
        pre_lam += list(lam[stable])
        dL = -np.diff(L) / args.record  # mean decrease per update over each record interval
        m = np.arange(dL.size) < first_edge - 1
        m &= dL > 0
        dl_eps += list(eps[:-1][m])
        dl += list(dL[m])
        per_lr_dl = fit(eps[:-1][m], dL[m]) if m.sum() >= 3 else dict(error="fewer than 3 points")
        gn_eps += list(eps[stable])
        gn += list(G[stable])
        if reached:
            edge_eps.append(float(np.median(eps[late])))
            edge_lam.append(float(np.median(lam[late])))
        rows.append(
            dict(
                lr=lr,
                two_over_lr=2 / lr,
                sharpness_start=float(lam[0]),
                sharpness_max=float(lam.max()),
                sharpness_late_median=float(np.median(lam[late])),
                late_ratio_to_2_over_lr=ratio,
                reached_edge=reached,
                eps_start=float(eps[0]),
                eps_end=float(eps[-1]),
                loss_start=float(L[0]),
                loss_end=float(L[-1]),
                loss_monotone=bool(np.all(np.diff(L) <= 1e-15)),
                loss_decrease_per_update_vs_eps_before_edge=per_lr_dl,
                grad_norm_vs_eps_before_edge=fit(eps[stable], G[stable]) if first_edge >= 3 else {},
            )
        )
        print(
            f"lr={lr:<5g} 2/lr={2 / lr:6.2f}: sharpness {lam[0]:.3f} -> max {lam.max():.3f}, late median "
            f"{np.median(lam[late]):.3f} (= {ratio:.3f} x 2/lr); eps {eps[0]:.4f} -> {eps[-1]:.4f}; loss "
            f"{L[0]:.7f} -> {L[-1]:.7f}{'' if rows[-1]['loss_monotone'] else ' (not monotone)'}; before the edge: "
            f"dL/update ~ eps^{per_lr_dl.get('exponent', float('nan')):.3f} +- {per_lr_dl.get('stderr', float('nan')):.3f}",
            flush=True,
        )
    fits = dict(
        sharpness_vs_inv_eps_before_edge=fit(1 / np.asarray(pre_eps), pre_lam),
        sharpness_vs_inv_eps_at_edge_across_lrs=fit(1 / np.asarray(edge_eps), edge_lam)
        if len(edge_eps) >= 3
        else dict(error=f"{len(edge_eps)} learning rates reached the edge; need 3"),
        loss_decrease_per_update_vs_eps_pooled_over_lrs=fit(dl_eps, dl),
        grad_norm_vs_eps=fit(gn_eps, gn),
    )
    for name, f in fits.items():
        print(
            f"{name}: "
            + (
                f"exponent {f['exponent']:.3f} +- {f['stderr']:.3f} (r2 {f['r2']:.3f}, {f['n']} points)"
                if "exponent" in f
                else f["error"]
            )
        )
    print(f"{dt:.0f} s (compilation included; shared 2-core CPU)")
    out = dict(
        benchmark="channels_eos",
        platform=platform.platform(),
        jax=jax.__version__,
        seconds=dt,
        start=dict(t=args.t_start, eps=float(p0.eps), w=float(p0.w[0]), sharpness=lam0),
        lrs=lrs,
        rows=rows,
        fits=fits,
        steps=tr.steps.tolist(),
        trace=dict(
            loss=np.asarray(tr.loss).tolist(),
            eps=np.asarray(tr.eps).tolist(),
            sharpness=np.asarray(tr.sharpness).tolist(),
            grad_norm=np.asarray(tr.grad_norm).tolist(),
        ),
    )
    out_path = output_path(args.out, "channels_eos.json")
    write_json(out_path, out)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for k, lr in enumerate(lrs):
        (line,) = axes[0].plot(tr.steps, np.asarray(tr.sharpness[k]), label=f"lr={lr:g}")
        axes[0].axhline(2 / lr, color=line.get_color(), ls="--", lw=0.8)
        axes[1].loglog(np.asarray(tr.eps[k]), np.asarray(tr.sharpness[k]), ".", ms=2, color=line.get_color())
    e = np.geomspace(min(pre_eps), max(pre_eps), 10)
    f = fits["sharpness_vs_inv_eps_before_edge"]
    if "exponent" in f:
        i = int(np.argmax(pre_eps))
        axes[1].loglog(e, pre_lam[i] * (pre_eps[i] / e) ** 2, "k:", label="~ eps^-2")
    axes[0].set_xlabel("GD update")
    axes[0].set_ylabel("top Hessian eigenvalue (dashed: 2/lr)")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("eps")
    axes[1].set_ylabel("sharpness")
    axes[1].legend(fontsize=7)
    for k, lr in enumerate(lrs):
        lam, eps, L = (np.asarray(v[k]) for v in (tr.sharpness, tr.eps, tr.loss))
        first_edge = int(np.argmax(lam >= 0.9 * 2 / lr)) if np.max(lam) >= 0.95 * 2 / lr else lam.size
        dL = -np.diff(L) / args.record
        m = (np.arange(dL.size) < first_edge - 1) & (dL > 0)
        f = rows[k]["loss_decrease_per_update_vs_eps_before_edge"]
        lab = f"lr={lr:g}: slope {f['exponent']:.2f} +- {f['stderr']:.2f}" if "exponent" in f else f"lr={lr:g}"
        axes[2].loglog(eps[:-1][m], dL[m], ".", ms=2, label=lab)
    axes[2].legend(fontsize=7)
    axes[2].set_title("before the edge, per learning rate", fontsize=9)
    axes[2].set_xlabel("eps")
    axes[2].set_ylabel("loss decrease per update")
    fig.tight_layout()
    save_figure(fig, out_path.with_suffix(".png"), dpi=110)
    print(f"wrote {out_path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
