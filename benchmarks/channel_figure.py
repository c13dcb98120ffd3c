"""The figure of `docs/channels.md` "Long flows": the toy channel's pair (`ch.toy_network(0.55,
0.7, 3.0, -2.5, convention="erf")` on the population loss of `ch.toy_data()`, Kvaerno5,
rtol = atol = 1e-9, log-spaced saves) drawn by `ch.channel_figure`: `eps`, `c`, `a` and the
loss against flow time.

    PYTHONPATH=. .venv/bin/python benchmarks/channel_figure.py --out docs/channel_figure.png
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import invariant_jax as ij  # noqa: E402
from _output import output_path, save_figure  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t1", type=float, default=1e7, help="flow time (default 1e7, the page's)")
    ap.add_argument(
        "--out",
        default=None,
        help="the PNG to write (default benchmarks/results/local/channel_figure.png; the docs' is "
        "docs/channel_figure.png)",
    )
    args = ap.parse_args(argv)
    t = time.perf_counter()
    X, Y, loss = ch.toy_data()
    flow = ij.gradient_flow(
        ch.toy_network(0.55, 0.7, 3.0, -2.5, convention="erf"),
        X,
        Y,
        args.t1,
        loss=loss,
        solver="kvaerno5",
        saveat=ij.SaveTimes(spacing="log"),
        rtol=1e-9,
        atol=1e-9,
    )
    fig = ch.channel_figure(flow, (0, 1), title="toy channel (erf students, population loss)")
    out = output_path(args.out, "channel_figure.png")
    out = save_figure(fig, out, dpi=90)  # the PNG records its command
    print(
        f"wrote {out} in {time.perf_counter() - t:.1f} s ({int(flow.num_steps)} steps, "
        f"final loss {float(flow.loss_final):.6g})"
    )


if __name__ == "__main__":
    main()
