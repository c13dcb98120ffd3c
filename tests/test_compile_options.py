"""The single-flow programs' XLA options (`invariant_jax._compile`): on CPU, `gradient_flow`
and `kink_aware_flow` compile with XLA's loop emitters, unless `XLA_FLAGS` says otherwise;
the options change the generated code, not the mathematics."""

import hashlib
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import invariant_jax as ij
from invariant_jax import _compile

# The child gets its inputs from a file the parent wrote, so that the flow's program is the
# only XLA code whose generation the options change (data and weights built by JAX in the
# child would be compiled programs too, and could round differently under the two
# emitters on another CPU).
CHILD = r"""
import hashlib, sys, jax, numpy as np
jax.config.update("jax_enable_x64", True)
import invariant_jax as ij
d = np.load(sys.argv[1])
net = ij.DAGNetwork(ij.mlp([3, 6, 1], bias=True), "relu", edge_weights=d["theta"])
f = ij.gradient_flow(net, d["X"], d["Y"], t1=2.0, rtol=1e-8, atol=1e-8, solver="tsit5")
print("DIGEST", hashlib.sha256(np.asarray(f.theta_final).tobytes()).hexdigest())
"""


def _problem():
    g = ij.mlp([3, 6, 1], bias=True)
    X, Y, _ = ij.teacher_student(g, 12, key=jax.random.key(0))
    return ij.DAGNetwork(g, "relu", key=jax.random.key(1), init="glorot"), X, Y


def _flow(net, X, Y):
    return ij.gradient_flow(net, X, Y, t1=2.0, rtol=1e-8, atol=1e-8, solver="tsit5")


def _run_with_xla_flag(flag: str, inputs) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip())
    cmd = [sys.executable, "-c", CHILD, str(inputs)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.exactness
def test_gradient_flow_is_the_program_that_xla_flags_loop_emitters_compile(tmp_path):
    # the reference: the same flow in a process whose XLA_FLAGS ask for the loop emitters
    # (as the Makefile probes it: a jaxlib that does not know the flag fails to start)
    net, X, Y = _problem()
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, theta=np.asarray(net.edge_weights()), X=np.asarray(X), Y=np.asarray(Y))
    child = _run_with_xla_flag("--xla_cpu_use_fusion_emitters=false", inputs)
    if child.returncode:
        assert _compile.compiler_options() == {}, "this jaxlib does not know the flag, so no option is passed"
        pytest.skip("this jaxlib does not know --xla_cpu_use_fusion_emitters")
    digest = [ln.split()[1] for ln in child.stdout.splitlines() if ln.startswith("DIGEST ")]
    theta = np.asarray(_flow(net, X, Y).theta_final)
    # bit for bit: the in-process flow compiled with the loop emitters too (XLA's two
    # emitters round differently here, at full optimization, under either ISA of `make test`)
    assert hashlib.sha256(theta.tobytes()).hexdigest() == digest[0]


def test_options_respect_xla_flags_and_leave_the_mathematics(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert jax.default_backend() == "cpu"
    known = _compile._known("xla_cpu_use_fusion_emitters", False)
    assert _compile.compiler_options() == (_compile.CPU_COMPILER_OPTIONS if known else {})
    # an option that XLA_FLAGS sets is left to it (the backend read it at start-up)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert _compile.compiler_options() == {}
    monkeypatch.delenv("XLA_FLAGS")
    with_options = np.asarray(_flow(*_problem()).theta_final)
    monkeypatch.setattr(_compile, "compiler_options", lambda: {})
    default = np.asarray(_flow(*_problem()).theta_final)  # (XLA's default emitters: another program)
    # round-off apart, grown along the flow (3.6e-11 when written), well below rtol = atol = 1e-8
    np.testing.assert_allclose(with_options, default, rtol=0, atol=1e-9)


def test_an_unknown_option_is_left_out(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(_compile, "CPU_COMPILER_OPTIONS", {"xla_cpu_no_such_option_ij": True})
    assert _compile.compiler_options() == {}
    # and the flow still compiles and runs
    assert _flow(*_problem()).success


def test_inside_another_program_the_outer_options_rule():
    # JAX refuses options on a nested jit: under jit and vmap, with traced arguments or
    # with closed-over constants only, the flow is part of the outer program
    net, X, Y = _problem()
    flow = lambda n: ij.gradient_flow(n, X, Y, t1=0.5, rtol=1e-8, atol=1e-8, solver="tsit5").theta_final  # noqa: E731
    alone = np.asarray(flow(net))
    traced = np.asarray(jax.jit(flow)(net))
    constants = np.asarray(jax.jit(lambda: flow(net))())
    nets = jax.tree.map(lambda a: a[None] if isinstance(a, jax.Array) else a, net)
    batched = np.asarray(jax.vmap(flow)(nets))[0]
    for other in (traced, constants, batched):
        np.testing.assert_allclose(other, alone, rtol=0, atol=1e-9)  # (round-off apart, as above)
