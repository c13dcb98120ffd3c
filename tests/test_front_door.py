"""Issue 30, front door: bad input is refused before any work, with a message that names
the value (file and line for files) and the fix.

- `kink_aware_flow` with non-finite weights raises at once, as `gradient_flow` does;
- `SolverOptions(rtol >= 1)` is refused (it accepts any error);
- `SweepConfig.from_toml` and the CLI's `--config` share one reader: keys beside a
  `[sweep]` table, unknown tables, binary files and syntax errors are refused by name,
  a byte-order mark is skipped;
- `load_csv`: a byte-order mark is skipped (no row lost), a binary file or a CSV syntax
  error names the file and the line.

Every check here runs before compiling anything (the flows are stubbed to fail if reached)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import invariant_jax as ij
import invariant_jax.kinks._driver as kink_driver
from invariant_jax.cli._common import read_config_file
from invariant_jax.sweep import SweepConfig

# ------------------------------------------------------------ kink_aware_flow


def _net(bad):
    """A 2-1-1 relu net whose second edge weight is `bad`. The constructor refuses a
    non-finite weight, so it is set afterwards, as a diverged training run or a
    hand-edited module would leave it."""
    g = ij.mlp([2, 1, 1], bias=False)
    net = ij.DAGNetwork(g, "relu", edge_weights=jnp.array([0.3, 0.2, 1.0]))
    u, v = g.edges[1]
    return eqx.tree_at(lambda n: n.weights, net, net.weights.at[g.index[u], g.index[v]].set(bad))


@pytest.fixture
def no_compile(monkeypatch):
    def compiled(*a, **k):
        raise AssertionError("the kink-aware flow was compiled and run")

    monkeypatch.setattr(kink_driver, "integrate_kink_flow", compiled)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_kink_aware_flow_refuses_non_finite_weights_at_once(no_compile, bad):
    net, X, Y = _net(bad), jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([-1.0, 1.0])
    msg = r"initial weight theta0\[1\] is not finite; re-initialize the network"
    with pytest.raises(ValueError, match=msg):
        ij.kink_aware_flow(net, X, Y, 1.0)
    with pytest.raises(ValueError, match=msg):  # the same words as gradient_flow
        ij.gradient_flow(net, X, Y, 1.0)


def test_kink_aware_flow_finite_weights_reach_the_integrator(no_compile):
    net, X, Y = _net(0.2), jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([-1.0, 1.0])
    with pytest.raises(AssertionError, match="compiled"):  # the check lets good weights through
        ij.kink_aware_flow(net, X, Y, 1.0)


# ------------------------------------------------------------ rtol >= 1


@pytest.mark.parametrize("rtol", [1, 1.0, 2.5, 1e3])
def test_rtol_of_one_or_more_is_refused_with_the_fix(rtol, no_compile):
    match = rf"rtol must be < 1 \(a relative tolerance of 1 or more accepts any error.*got {rtol!r}.*rtol=1e-8"
    with pytest.raises(ValueError, match=match):
        ij.SolverOptions(rtol=rtol)
    with pytest.raises(ValueError, match=match):
        SweepConfig(solver=ij.SolverOptions(rtol=rtol))
    net, X, Y = _net(0.2), jnp.ones((2, 2)), jnp.ones(2)
    for flow in (ij.gradient_flow, ij.kink_aware_flow):
        with pytest.raises(ValueError, match=match):
            flow(net, X, Y, 1.0, rtol=rtol)


def test_rtol_just_below_one_is_accepted():
    assert ij.SolverOptions(rtol=0.999).rtol == 0.999


# ------------------------------------------------------------ TOML config files

TOML_CASES = {  # file content -> words the refusal must contain
    b"seed = 3\n[sweep]\nn_inits = 4\n": r"keys \['seed'\] sit beside the \[sweep\] table",
    b"n_inits = 4\n[solvers]\nrtol = 1e-3\n": r"unknown table\(s\) \['\[solvers\]'\]",
    b"[sweep]\nn_inits = 4\n[extra]\nx = 1\n": r"unknown table\(s\) \['\[extra\]'\]",
    b"n_inits = 4\nseed = \x00\x01\n": r"not a text file \(line 2, byte \d+: a NUL byte\)",
    b"n_inits = 4\nseed = \xff\xfe\n": r"not a text file \(line 2, byte \d+: not UTF-8\)",
    b"n_inits = 4\nseed = = 3\n": r"not valid TOML: .*line 2",
}


@pytest.mark.parametrize(
    "content", list(TOML_CASES), ids=["beside", "unknown", "unknown+sweep", "nul", "latin", "syntax"]
)
def test_toml_is_refused_by_name_by_one_reader(tmp_path, content):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"Config file '{path}'.*" + TOML_CASES[content]) as api:
        SweepConfig.from_toml(path)
    with pytest.raises(ValueError) as cli:
        read_config_file(path)
    assert str(cli.value) == str(api.value)  # one reader, one message


@pytest.mark.parametrize("table", [False, True])
def test_toml_byte_order_mark_is_skipped(tmp_path, table):
    text = ("[sweep]\n" if table else "") + "n_inits = 4\nseed = 3\n"
    plain, bom = tmp_path / "plain.toml", tmp_path / "bom.toml"
    plain.write_text(text, encoding="utf-8")
    bom.write_text(text, encoding="utf-8-sig")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    assert SweepConfig.from_toml(bom) == SweepConfig.from_toml(plain) == SweepConfig(n_inits=4, seed=3)
    assert read_config_file(bom) == {"n_inits": 4, "seed": 3}


def test_toml_directory_is_not_reported_missing(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        SweepConfig.from_toml(tmp_path)


# ------------------------------------------------------------ CSV files

BODY = "".join(f"{i / 7:.6f},{(i * 3) % 5},{i % 2}\n" for i in range(24))


def _load(path, **k):
    d = ij.load_csv(path, **k)
    return np.concatenate([d.X_train, d.X_test]), d.feature_names


@pytest.mark.parametrize("header", ["", "a,b,label\n"])
def test_csv_byte_order_mark_is_skipped(tmp_path, header):
    """Before: a BOM made the first numeric row look like a header and it was dropped."""
    plain, bom = tmp_path / "plain.csv", tmp_path / "bom.csv"
    plain.write_text(header + BODY, encoding="utf-8")
    bom.write_text(header + BODY, encoding="utf-8-sig")
    Xp, names_p = _load(plain)
    Xb, names_b = _load(bom)
    assert Xb.shape[0] == 24 and names_b == names_p
    np.testing.assert_array_equal(Xb, Xp)
    assert names_b == (("a", "b") if header else ("column 0", "column 1"))


CSV_CASES = {  # content -> (the line named, words)
    "nul": (b"a,b,y\n1,2,0\n3,\x00\x01,1\n", 3, "NUL byte: this is not a text file"),
    "latin": ("a,b,y\n1,2,0\n3,\xe9,1\n".encode("latin-1"), 3, "is not UTF-8"),
    "unterminated": (("a,b,y\n" + BODY + '1,"2,0\n').encode(), 26, "CSV syntax error .*unexpected end of data"),
    "stray": (('a,b,y\n1,2,0\n"1"x,2,0\n' + BODY).encode(), 3, "CSV syntax error .*expected after"),
}


@pytest.mark.parametrize("case", list(CSV_CASES))
def test_csv_binary_or_syntax_error_names_file_and_line(tmp_path, case):
    content, line, words = CSV_CASES[case]
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{path}: line {line}.*{words}"):
        ij.load_csv(path)


def test_csv_directory_is_not_reported_missing(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        ij.load_csv(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ij.load_csv(tmp_path / "nope.csv")
