PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-all install clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/invariant-jax demo

# The exactness tests run twice: on this CPU's own code generation, then under another
# (XLA's CPU code depends on the instruction set), so a claim that holds only on the
# machine where it was written fails here first.
EXACTNESS_ISA ?= SSE4_2

# The test files run in parallel (pytest-xdist), one worker per CPU (at most 4; XLA
# compiles on one thread, so 2 workers on 2 cores nearly halve the time): a whole file goes
# to one worker, so its module fixtures compile once and a docs page's blocks stay
# together; tests/conftest.py starts the costliest files first. `make test PYTEST_N=0`
# runs everything in one process.
PYTEST_N ?= logical
XDIST := -n $(PYTEST_N) --maxprocesses=4 --dist loadfile --no-loadscope-reorder

test: install
	$(BIN)/python -m pytest -q $(XDIST)
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_max_isa=$(EXACTNESS_ISA)" $(BIN)/python -m pytest -q $(XDIST) -m "exactness and not slow"

test-all: install
	$(BIN)/python -m pytest -q $(XDIST) -m ''
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_max_isa=$(EXACTNESS_ISA)" $(BIN)/python -m pytest -q $(XDIST) -m exactness

clean:
	rm -rf $(VENV) .pytest_cache
