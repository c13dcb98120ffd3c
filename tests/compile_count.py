"""Counting XLA compilations in a test (shared by the tests that assert a program is
compiled once: tests/test_sweep_recompile.py, tests/test_training_compiles.py)."""

import jax

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CountCompiles:
    """Counts XLA backend compilations (jax.monitoring) while active:
    `with counter: ...` resets `counter.n` and counts what the block compiles."""

    def __init__(self):
        self.n = 0
        self.on = False
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kw):
        if self.on and event == _COMPILE_EVENT:
            self.n += 1

    def __enter__(self):
        self.n, self.on = 0, True
        return self

    def __exit__(self, *exc):
        self.on = False
