PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LATEST := .venv-latest

.PHONY: demo test test-all test-latest constraints install docs clean

# Installs are pinned to the versions the suite passed with (constraints.txt);
# `make test-latest` tries the newest releases instead.
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
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
# runs everything in one process; PYTEST_ARGS adds pytest options. A worker that crashes ends
# the run (--max-worker-restart=0): with a replacement worker, xdist's loadfile scheduling was
# seen to wait forever. Both runs share one
# persistent compilation cache in a temporary folder that lives for this `make test` only
# (conftest.py).
#
# Almost all of the suite's time is XLA compilation. The first run compiles with most of
# XLA's optimization off (JAX_DISABLE_MOST_OPTIMIZATIONS: LLVM at -O0, no expensive passes),
# which compiles much faster; the programs compute the same mathematics (no fast-math either
# way), and the exactness rerun compiles with full optimization, as users run, so every
# exactness claim is checked under two code generations. `make test TEST_FAST_COMPILE=0`
# runs the first run fully optimized too; `make test-all` always does.
#
# The first run also compiles with XLA's CPU loop emitters instead of its fusion emitters
# (FAST_XLA_FLAGS), which halves the compile time of the suite's thousands of small
# programs (the two runs side by side: benchmarks/results/test_suite_time.json). The flag
# is passed only when this jaxlib knows it (an unknown XLA flag aborts the process), so
# `make test-latest` still runs on a jaxlib that dropped it.
TEST_FAST_COMPILE ?= 1
FAST_XLA_FLAGS := --xla_cpu_use_fusion_emitters=false
PYTEST_N ?= logical
XDIST := -n $(PYTEST_N) --maxprocesses=4 --dist loadfile --no-loadscope-reorder --max-worker-restart=0 $(PYTEST_ARGS)

# Both workers keep the cores busy, so SciPy's OpenBLAS (the implicit solvers' LU) runs on
# one thread, as the CLI does (benchmarks/results/blas_threads.json).
define run_tests
	cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && export IJ_TEST_CACHE_DIR="$$cache" && \
	export OPENBLAS_NUM_THREADS="$${OPENBLAS_NUM_THREADS:-1}" && fast="" && \
	if [ "$(TEST_FAST_COMPILE)" = 1 ] && XLA_FLAGS="$(FAST_XLA_FLAGS)" $(1)/python -c 'import jax; jax.numpy.zeros(1)' 2>/dev/null; \
	then fast="$(FAST_XLA_FLAGS)"; fi && \
	XLA_FLAGS="$$XLA_FLAGS $$fast" JAX_DISABLE_MOST_OPTIMIZATIONS=$(TEST_FAST_COMPILE) $(1)/python -m pytest -q $(XDIST) $(2) && \
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_max_isa=$(EXACTNESS_ISA)" $(1)/python -m pytest -q $(XDIST) $(3)
endef

test: install
	$(call run_tests,$(BIN),,-m "exactness and not slow")

test-all: TEST_FAST_COMPILE = 0
test-all: install
	$(call run_tests,$(BIN),-m '',-m exactness)

# The user guide and API reference (mkdocs + mkdocstrings), built with --strict into site/;
# the suite builds it too (tests/test_glue_docs.py).
# mkdocs empties its output folder first, so a site/ that `make docs` did not build (no
# marker file) is refused, not overwritten.
SITE_MARK := site/.built-by-make-docs

docs: install
	@if [ -e site ] && [ ! -e $(SITE_MARK) ]; then \
	  echo "site/ exists and was not built by 'make docs' (no $(SITE_MARK)): move it away first; nothing was changed." >&2; exit 1; fi
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict -d site
	touch $(SITE_MARK)

# The newest releases of every dependency, in a separate venv: catches upstream breaks.
test-latest:
	$(PY) -m venv $(LATEST)
	touch $(LATEST)/.made-by-make
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet --upgrade -e '.[test]'
	$(LATEST)/bin/pip freeze --exclude-editable | grep -iE '^(jax|jaxlib|diffrax|equinox)=='
	$(call run_tests,$(LATEST)/bin,,-m "exactness and not slow")

# After a green `make test-latest`: pin what it installed.
constraints:
	{ sed -n '1,3p' constraints.txt; $(LATEST)/bin/pip freeze --exclude-editable | grep -v '^-e'; } > constraints.tmp
	mv constraints.tmp constraints.txt

# Removes only what make built: each folder must hold the marker file its target wrote.
clean:
	@for pair in "$(VENV):$(BIN)/.installed" "$(LATEST):$(LATEST)/.made-by-make" "site:$(SITE_MARK)"; do \
	  dir=$${pair%%:*}; mark=$${pair#*:}; \
	  if [ -e "$$mark" ]; then rm -rf "$$dir" && echo "removed $$dir/"; \
	  elif [ -e "$$dir" ]; then echo "kept $$dir/: make did not build it (no $$mark)"; fi; done
	rm -rf .pytest_cache
