"""What the per-device loops of one sweep run share: the rule by which a device that
must compile first joins (`worth_joining`), and the queue and callbacks (`RunQueue`).
Two devices running together are tested in `test_sweep_devices.py` (a fresh process)."""

import math
import threading
import time

import numpy as np
import pytest

from invariant_jax.sweep._devices import JOIN_FACTOR, RunQueue, worth_joining


@pytest.mark.parametrize(
    "remaining, rate, compile_s, expected",
    [
        (1000, 100.0, 4.0, True),  # 10 s of work left > 2 x 4 s of compiling
        (1000, 100.0, 5.0, False),  # 10 s = 2 x 5 s: not more
        (1000, 100.0, 6.0, False),
        (math.inf, 0.0, 8.0, True),  # unknown work (a caller's `more`): join
        (10, 100.0, 0.0, True),  # compiled already (or from the disk cache)
        (0, 100.0, 0.0, False),  # nothing left
        (1000, 0.0, 1.0, False),  # no rate measured yet
    ],
)
def test_a_device_joins_when_the_work_left_outlasts_its_compilation(remaining, rate, compile_s, expected):
    assert JOIN_FACTOR == 2.0
    assert worth_joining(remaining, rate, compile_s) is expected


def _queue(indices, rounds=(), **kw):
    got: list = []
    rounds = list(rounds)
    more = (lambda: np.asarray(rounds.pop(0) if rounds else [], np.int64)) if kw.pop("with_more", False) else None
    q = RunQueue(indices, on_results=got.append, progress=None, should_stop=None, more=more, expected=None, **kw)
    return q, got


def test_the_queue_hands_out_each_index_once_across_rounds():
    q, _ = _queue([0, 1, 2], rounds=([3, 4], [5]), with_more=True)
    assert math.isinf(q.expected)  # `more`: the run's size is unknown
    assert q.take(2).tolist() == [0, 1]
    assert not q.exhausted
    assert q.take(4).tolist() == [2, 3, 4, 5]  # through both rounds
    assert q.take(4).tolist() == [] and q.exhausted


def test_a_prefetch_asks_for_the_next_round_only_when_the_queue_runs_low():
    asked = []
    q, _ = _queue([0, 1, 2], rounds=([3, 4], [5], []), with_more=True)
    q._more = lambda f=q._more: asked.append(1) or f()
    q.prefetch(3)  # three queued: not asked
    assert asked == []
    assert q.take(2).tolist() == [0, 1]
    q.prefetch(3)  # one queued: the next round joins it, in order
    assert len(asked) == 1 and q.take(3).tolist() == [2, 3, 4] and not q.exhausted
    q.prefetch(1)
    q.prefetch(2)  # [5] then an empty round: the queue ends with what it holds
    assert len(asked) == 3 and q.exhausted is False and q.take(5).tolist() == [5] and q.exhausted


def test_the_queue_shared_by_threads_loses_and_repeats_nothing():
    q, got = _queue(np.arange(2_000))
    assert q.expected == 2_000
    inside, most = [], []  # callbacks running now: never more than one (each sleeps, releasing the GIL)

    def on_results(rec):
        inside.append(1)
        time.sleep(1e-4)
        most.append(len(inside))
        inside.pop()
        got.append(rec)

    q._on_results = on_results

    def worker():
        while (new := q.take(7)).size:
            q.deliver({"index": new})

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(most) == 1, "two threads ran on_results at once"
    done = np.concatenate([g["index"] for g in got])
    np.testing.assert_array_equal(np.sort(done), np.arange(2_000))
    assert q.done == 2_000 and q.exhausted


def test_a_failure_stops_the_queue_and_keeps_the_first_error():
    q, _ = _queue([0, 1, 2])
    q.fail(ValueError("first"))
    q.fail(RuntimeError("second"))
    assert isinstance(q.error, ValueError) and q.exhausted and q.check_stop()
    assert q.take(3).size == 0


def test_the_callers_time_is_host_time_and_every_record_arrives():
    # a slow caller (on_results sleeps) is the host's work, counted in host_seconds (the
    # last harvest too, handed on after the loop); every record arrives once
    import jax
    import jax.random as jr

    import invariant_jax as ij
    from invariant_jax.sweep._engine import Engine, make_problem

    g = ij.mlp([2, 3, 1])
    X, Y, _ = ij.teacher_student(g, 8, key=jr.key(0))
    nets = jax.vmap(lambda k: ij.DAGNetwork(g, "tanh", key=k).edge_weights())(jr.split(jr.key(1), 12))
    engine = Engine(make_problem(ij.DAGNetwork(g, "tanh", key=jr.key(2)), X, Y, 0.3), init_table=nets, slots=4)
    engine.run(np.arange(4), on_results=lambda rec: None)  # compile
    got, nap = [], 0.05

    def on_results(rec):
        time.sleep(nap)
        got.append(rec["index"])

    st = engine.run(np.arange(12), on_results=on_results)
    assert np.sort(np.concatenate(got)).tolist() == list(range(12))
    assert nap * len(got) <= st.host_seconds <= st.seconds
