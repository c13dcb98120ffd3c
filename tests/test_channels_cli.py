"""`invariant-jax channels`: flag validation and a tiny frequency study."""

import json

import pytest

from invariant_jax.cli import main


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--activations", "relu"], "'relu' is not smooth"),
        (["--roughness", "0,1"], "every roughness s (length scale 1/s) must be a positive finite number"),
        (["--widths", "1"], "every width (a channel needs two neurons) must be an integer >= 2"),
        (["--widths", "a"], "--widths must be comma-separated integers"),
    ],
)
def test_channels_cli_bad_flags(capsys, argv, msg):
    assert main(["channels", *argv, "--no-progress"]) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.slow
def test_channels_cli_tiny_study(tmp_path, capsys):
    out = tmp_path / "freq.json"
    rc = main(
        [
            "channels",
            "--method",
            "flow",
            "--activations",
            "softplus",
            "--roughness",
            "0.5,10",
            "--widths",
            "2",
            "--n-inits",
            "2",
            "--n-samples",
            "12",
            "--t1",
            "10",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    d = json.loads(out.read_text())
    assert len(d["channel_fraction"]) == 1 and len(d["channel_fraction"][0]) == 2
    assert all(0 <= f <= 1 for row in d["candidate_fraction"][0] for f in row)
    assert "softplus" in capsys.readouterr().out
