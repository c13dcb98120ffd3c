"""The CLI runs SciPy's and NumPy's BLAS on one thread (`one_blas_thread`), gives the
caller's limits back, and leaves a user's own thread variable alone; checked against
threadpoolctl's own report of each loaded library."""

import jax.numpy as jnp
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from invariant_jax.cli import _common, main


def _threads() -> set[int]:
    jnp.linalg.solve(jnp.eye(2), jnp.ones(2)).block_until_ready()  # JAX's LAPACK kernels are loaded
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.fixture
def two_threads(monkeypatch):
    for name in _common.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with threadpool_limits(limits=2, user_api="blas"):
        assert _threads() == {2}
        yield


def test_one_thread_inside_and_the_callers_limits_after(two_threads):
    with _common.one_blas_thread():
        assert _threads() == {1}
    assert _threads() == {2}


def test_a_users_variable_wins(two_threads, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with _common.one_blas_thread():
        assert _threads() == {2}


def test_the_command_runs_with_one_thread(two_threads, monkeypatch):
    import invariant_jax.cli._check as check

    seen = []
    monkeypatch.setattr(check, "run", lambda args: seen.append(_threads()))
    assert main(["check"]) == 0
    assert seen == [{1}]
    assert _threads() == {2}
