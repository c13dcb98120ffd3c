"""`invariant-jax prune`: train with a regularizer, remove the cut-off neurons, report."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import check_integer, check_positive
from .._results import RESULTS, result_message
from ..datasets import breast_cancer, load_csv
from ..graph import mlp
from ..network import DAGNetwork
from ..options import Objective
from ..pruning import PruneReport, magnitude_prune, prune
from ..regularizers import REGULARIZERS
from ..training import TrainOptions, fit
from ._common import check_output_path, write_json

DATASETS = ("breast_cancer",)


def _load(args):
    if args.data in DATASETS:
        return breast_cancer(test_fraction=args.test_fraction, seed=args.split_seed)
    if args.data.endswith(".csv") or "/" in args.data:
        target = int(args.target) if args.target.lstrip("-").isdigit() else args.target
        return load_csv(args.data, target=target, test_fraction=args.test_fraction, seed=args.split_seed)
    raise ValueError(f"Unknown data set {args.data!r}; choose one of {list(DATASETS)} or give a .csv file.")


def _objective(reg: str, strength: float) -> Objective:
    """The BCE objective with regularizer `reg` (`"none"`: none) of this strength."""
    return Objective("bce") if reg == "none" else Objective("bce", regularizer=reg, strength=strength)


def _log_every(epochs: int) -> int:
    check_integer("--epochs", epochs, minimum=1)
    return next(k for k in range(max(1, epochs // 20), 0, -1) if epochs % k == 0)


def _acc(net, X, Y) -> float:
    return float(jnp.mean((net.forward(X) > 0) == (Y > 0.5)))


def run(args) -> int:
    json_out = check_output_path(args.json, "--json", overwrite=args.overwrite)  # before training, not after it
    fig_out = check_output_path(args.figure, "--figure", overwrite=args.overwrite)
    reg, hidden = _checked_options(args)
    d = _load(args)
    g = mlp([d.n_features, *hidden, 1], bias=not args.no_bias)
    proximal = reg in ("l1", "l2", "nuclear") and not args.subgradient
    # nuclear + proximal on several hidden layers: fit's working-set forward-backward step
    # (regularizers.nuclear_working_set; docs/pruning.md), as benchmarks/pruning_dag.py runs it
    net = DAGNetwork(g, "relu", key=jr.key(args.seed))
    train = TrainOptions(
        optimizer=args.optimizer,
        learning_rate=args.lr,
        epochs=args.epochs,
        batch_size=args.batch_size,
        log_every=_log_every(args.epochs),
    )
    res = fit(
        net,
        d.X_train,
        d.Y_train,
        X_test=d.X_test,
        Y_test=d.Y_test,
        loss=_objective(reg, args.strength),
        options=dataclasses.replace(train, proximal=proximal, tol=args.tol),
        key=jr.key(args.seed + 1),
        progress=True,
    )
    if not bool(np.all(res.success)):
        raise ValueError(result_message(RESULTS.training_diverged))
    cut = _prune_both_ways(res.network, d, args)
    base_acc = None if args.baseline == "off" else _baseline_accuracy(net, d, train, args, n_keep=cut.n_keep)
    out = _report(args, d, hidden, proximal, res.log, cut, base_acc)
    _print_report(args, d, out, res.log, cut, base_acc, n_hidden=len(g.hidden))
    if fig_out is not None:
        _write_figure(fig_out, res.log, out, n_hidden=len(g.hidden))
    if json_out is not None:
        print(f"wrote {write_json(json_out, out)}")
    return 0


def _checked_options(args) -> tuple[str, list[int]]:
    """The regularizer and the hidden widths, with the other flags checked before any data
    is loaded."""
    reg = args.regularizer
    if reg not in REGULARIZERS and reg != "none":
        raise ValueError(f"Unknown regularizer {reg!r}; choose one of {['none', *sorted(REGULARIZERS)]}.")
    if args.baseline not in ("none", "l2", "off"):
        raise ValueError(f"--baseline must be none, l2 or off; got {args.baseline!r}.")
    check_positive("--tol", args.tol, allow_zero=True)
    try:
        hidden = [int(h) for h in args.hidden.split(",")]
    except ValueError:
        raise ValueError(f"--hidden must be comma-separated integers; got {args.hidden!r}.") from None
    return reg, hidden


class _Pruning(NamedTuple):
    """The trained network, pruned losslessly and by magnitude to the same size."""

    trained: DAGNetwork
    pruned: DAGNetwork
    rep: PruneReport
    mag: DAGNetwork
    mrep: PruneReport  # magnitude_prune's
    change_test: float  # max |f_pruned - f| on the test set
    n_keep: int


def _prune_both_ways(trained, d, args) -> _Pruning:
    pruned, rep = prune(trained, args.tol, X=d.X_train, dead_on_data=args.dead_on_data)
    change_test = float(np.max(np.abs(pruned.forward(d.X_test) - trained.forward(d.X_test))))
    n_keep = len(pruned.graph.hidden)
    mag, mrep = magnitude_prune(trained, n_keep, X=d.X_test)
    return _Pruning(trained, pruned, rep, mag, mrep, change_test, n_keep)


def _baseline_accuracy(net, d, train, args, *, n_keep: int) -> tuple[float, float]:
    """Test accuracy of the baseline arm (same seed), before and after magnitude pruning
    to `n_keep` neurons."""
    base = fit(
        net,
        d.X_train,
        d.Y_train,
        loss=_objective(args.baseline, args.baseline_strength),
        options=train,
        key=jr.key(args.seed + 1),
    )
    bmag, _ = magnitude_prune(base.network, n_keep)
    return (_acc(base.network, d.X_test, d.Y_test), _acc(bmag, d.X_test, d.Y_test))


def _report(args, d, hidden, proximal, log, cut: _Pruning, base_acc) -> dict:
    """The JSON report (`--json`)."""
    rep, mrep = cut.rep, cut.mrep
    return {
        "data": d.name,
        "n_train": int(d.X_train.shape[0]),
        "n_test": int(d.X_test.shape[0]),
        "widths": [d.n_features, *hidden, 1],
        "bias": not args.no_bias,
        "regularizer": args.regularizer,
        "strength": args.strength,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "epochs": args.epochs,
        "proximal": proximal,
        "tol": args.tol,
        "final_loss": float(log.loss[-1]),
        "rank_J": int(log.rank[-1]),
        "nuclear_norm": float(log.nuclear_norm[-1]),
        "train_accuracy": _acc(cut.trained, d.X_train, d.Y_train),
        "test_accuracy": _acc(cut.trained, d.X_test, d.Y_test),
        "hidden_before": rep.n_hidden_before,
        "hidden_after": rep.n_hidden_after,
        "removed": {str(k): v for k, v in rep.removed},
        "max_abs_change_train": rep.max_abs_change,
        "max_abs_change_test": cut.change_test,
        "test_accuracy_pruned": _acc(cut.pruned, d.X_test, d.Y_test),
        "test_accuracy_magnitude_pruned": _acc(cut.mag, d.X_test, d.Y_test),
        "magnitude_max_abs_change_test": mrep.max_abs_change,
        "baseline": args.baseline,
        "baseline_test_accuracy": None if base_acc is None else base_acc[0],
        "baseline_test_accuracy_magnitude_pruned": None if base_acc is None else base_acc[1],
    }


def _print_report(args, d, out: dict, log, cut: _Pruning, base_acc, *, n_hidden: int) -> None:
    reg, proximal, n_keep = args.regularizer, out["proximal"], cut.n_keep
    print(f"data: {d!r}  net: {out['widths']} ReLU, bias={out['bias']}  loss: BCE on logits")
    print(
        f"train: {args.optimizer} lr={args.lr:g} epochs={args.epochs} regularizer={reg} strength={args.strength:g}"
        f" ({'proximal' if proximal else 'gradient'} steps)"
    )
    print(
        f"final loss {out['final_loss']:.4f}  rank J_G {out['rank_J']}/{n_hidden}  "
        f"||J_G||_* {out['nuclear_norm']:.3f}  drift of c {float(log.drift[-1]):.3g}"
    )
    print(cut.rep.summary())
    print(f"  max |f_pruned - f| over {d.X_test.shape[0]} test samples: {cut.change_test:.3e}")
    print(
        f"test accuracy: trained {out['test_accuracy']:.4f}  pruned {out['test_accuracy_pruned']:.4f}  "
        f"magnitude-pruned to {n_keep} neurons {out['test_accuracy_magnitude_pruned']:.4f} "
        f"(max |change| on test {cut.mrep.max_abs_change:.3g})"
    )
    if base_acc is not None:
        print(
            f"baseline ({args.baseline}, same seed): test accuracy {base_acc[0]:.4f}, magnitude-pruned to "
            f"{n_keep} neurons {base_acc[1]:.4f}"
        )


def _write_figure(path, log, out: dict, *, n_hidden: int) -> None:
    title = (
        f"{out['data']}: {out['widths']} relu, {out['regularizer']} {out['strength']:g} "
        f"({'proximal' if out['proximal'] else 'gradient'}), {out['optimizer']} lr={out['lr']:g}, "
        f"{out['epochs']} epochs"
    )
    prune_figure(log, n_hidden=n_hidden, title=title).savefig(path, dpi=110)
    print(f"wrote {path}")


def prune_figure(log, *, n_hidden: int, title: str):
    """Training as pruning sees it: the loss (and test accuracy), the number of cut-off
    hidden neurons, and the rank of `J_G` (= hidden nodes minus cut-off groups) over epochs.

    **Arguments:**

    - `log`: a `TrainLog` of one network (`fit(...).log`).
    - `n_hidden`: hidden nodes of the trained graph (the rank's ceiling).
    - `title`: the configuration, as the figure's title.

    **Returns:** a matplotlib `Figure` with three axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ep = np.asarray(log.epochs)
    fig, axs = plt.subplots(1, 3, figsize=(13.5, 3.6), layout="constrained")
    axs[0].plot(ep, np.asarray(log.loss), color="C0", label="training loss")
    axs[0].set_yscale("log")
    acc = np.asarray(log.test_accuracy, float)
    if np.isfinite(acc).any():
        twin = axs[0].twinx()
        twin.plot(ep, acc, color="C1", label="test accuracy")
        twin.set_ylabel("test accuracy")
    axs[0].set_ylabel("training loss (BCE, log)")
    axs[0].set_title("loss", fontsize=10)
    axs[1].step(ep, np.asarray(log.n_cut_off), where="post", color="C3")
    axs[1].set_ylabel("cut-off hidden neurons")
    axs[1].set_ylim(-0.5, n_hidden + 0.5)
    axs[1].set_title(f"cut off: {int(np.asarray(log.n_cut_off)[-1])} of {n_hidden} at the end", fontsize=10)
    axs[2].step(ep, np.asarray(log.rank), where="post", color="C2")
    axs[2].axhline(n_hidden, color="0.5", ls=":", lw=0.8)
    axs[2].set_ylabel("rank of J_G")
    axs[2].set_ylim(-0.5, n_hidden + 0.5)
    axs[2].set_title(
        f"rank of J_G: {int(np.asarray(log.rank)[0])} -> {int(np.asarray(log.rank)[-1])} (max {n_hidden})", fontsize=10
    )
    for ax in axs:
        ax.set_xlabel("epoch")
    for ax in axs[1:]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title, fontsize=10)
    return fig
