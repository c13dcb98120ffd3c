"""The channel figure checked on the artists matplotlib holds (not pixels): each axis's line
is the pair's `eps`, `c`, `a` or loss at the flow's saved states with `t > 0`, computed by
`channel_coordinates` state by state, on a log time axis, under a title naming the
configuration."""

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import invariant_jax as ij  # noqa: E402
from invariant_jax import channels as ch  # noqa: E402


@pytest.fixture(scope="module")
def flow():
    X, Y, loss = ch.toy_data(n_points=41)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ij.NoConservationLaw)  # erf: no law, expected
        return ij.gradient_flow(
            ch.toy_network(0.55, 0.7, 3.0, -2.5, convention="erf"),
            X,
            Y,
            50.0,
            loss=loss,
            saveat=ij.SaveTimes(n_save=25, spacing="log"),
            rtol=1e-8,
            atol=1e-8,
        )


def test_channel_figure_lines_are_the_channel_coordinates(flow):
    fig = ch.channel_figure(flow, (0, 1), title="toy")
    ax_eps, ax_c, ax_a, ax_loss = fig.axes
    ts = np.asarray(flow.ts)
    keep = [k for k in range(len(ts)) if np.isfinite(ts[k]) and ts[k] > 0]
    assert len(keep) >= 10
    pairs = [ch.channel_coordinates(flow.network_at(k), 0, 1) for k in keep]
    want = {
        ax_eps: np.array([float(p.eps) for p in pairs]),
        ax_c: np.array([float(p.c[0]) for p in pairs]),
        ax_a: np.array([float(p.a[0]) for p in pairs]),
        ax_loss: np.asarray(flow.losses)[keep],
    }
    for ax, y in want.items():
        (line,) = ax.get_lines()
        np.testing.assert_allclose(line.get_xdata(), ts[keep])
        np.testing.assert_allclose(line.get_ydata(), y, rtol=1e-10, atol=1e-12)
        assert ax.get_xscale() == "log"
    assert ax_eps.get_yscale() == "log" and ax_loss.get_yscale() == "log"
    title = fig._suptitle.get_text()
    for part in ("toy", "h1_0", "h1_1", "erf", "2 hidden", "4 edges", "t_final=50", "rtol=1e-08"):
        assert part in title, (part, title)
    plt.close(fig)


def test_channel_figure_takes_a_channel_pair_and_labels(flow):
    p = ch.channel_coordinates(flow.network, 0, 1)
    by_pair = ch.pair_trajectory(flow, p)
    by_label = ch.pair_trajectory(flow, ("h1_0", "h1_1"))
    np.testing.assert_array_equal(by_pair["eps"], by_label["eps"])
    assert by_pair["nodes"] == ("h1_0", "h1_1") and by_pair["c"].shape == (len(by_pair["ts"]), 1)


def test_channel_figure_refuses_a_batch(flow):
    import jax

    batch = jax.tree.map(lambda x: np.stack([x, x]) if hasattr(x, "shape") and np.ndim(x) else x, flow)
    with pytest.raises(ValueError, match="batch"):
        ch.channel_figure(batch, (0, 1))
