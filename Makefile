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

test: install
	$(BIN)/python -m pytest -q

test-all: install
	$(BIN)/python -m pytest -q -m ''

clean:
	rm -rf $(VENV) .pytest_cache
