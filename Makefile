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

test: install
	$(BIN)/python -m pytest -q
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_max_isa=$(EXACTNESS_ISA)" $(BIN)/python -m pytest -q -m "exactness and not slow"

test-all: install
	$(BIN)/python -m pytest -q -m ''
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_max_isa=$(EXACTNESS_ISA)" $(BIN)/python -m pytest -q -m exactness

clean:
	rm -rf $(VENV) .pytest_cache
