# Every target does its own set-up: a fresh clone needs only `make demo` or `make test`.
SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOWEST := .venv-lowest

.PHONY: demo test lint typecheck unit test-lowest test-lowest-all test-lowest-core \
	lowest-venv-all lowest-venv-core lowest-run-all lowest-run-core bench overload docs docs-check clean

# pip >= 25.1 reads the PEP 735 dependency group (`--group dev`): upgrade pip first.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[mcp,fastmcp,redis,demo]" --group dev
	touch $(STAMP)

## The main job: the overload demo on the embedded in-memory default. It exits 1 when a target
## is missed; on a busy or noisy machine: make demo DEMO_ARGS=--no-check
demo: $(STAMP)
	$(BIN)/fusion-guard demo $(DEMO_ARGS)

## The whole test suite: lint, strict typing, tests (asyncio and trio), benchmark smoke run.
test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks ci
	$(BIN)/ruff format --check src tests benchmarks ci

typecheck: $(STAMP)
	$(BIN)/mypy

## Four pytest workers on two cores: most of the suite's run is waiting (subprocesses, servers,
## real-time scenarios), a worker keeps about 0.6 of a core busy, and the tests hold no timing
## that a loaded machine breaks (measured on this 2-core machine, others' tests running: one
## worker 410 s, two 248 s, four 141 s). Tests of one file stay on one worker (their module
## fixtures start once). The figures' smoke run (the `figure` mark: tests that time something
## against a baseline) goes on alone afterwards, in one process with no neighbour of its own,
## which prints their table; so do the tests that still judge the wall clock against a tight
## bound (the `alone` mark, put on such a test: the scenarios whose point is the logic run in
## virtual time instead, tests/virtual_time.py), which a busy neighbour worker would break.
WORKERS ?= 4

unit: $(STAMP)
	$(BIN)/pytest tests benchmarks --benchmark-disable -q -n $(WORKERS) --dist loadfile \
	  -m "not figure and not alone"
	$(BIN)/pytest tests benchmarks --benchmark-disable -q -m "figure or alone"

## The tests again, against the lowest versions pyproject.toml allows (its `>=` floors, read by
## ci/lowest.py), in fresh venvs: the core floors exactly, with the extras that fit beside them
## (redis, demo), then every extra at lowest-direct versions (mcp and fastmcp need a newer
## pydantic and anyio than the core's floors: ci/lowest.py).
## What each run proves decides what it runs. The core run runs every test that is not `slow`:
## nearly every test goes through anyio, pydantic and prometheus-client, so no subset picked by
## what a test imports would leave a floor less exercised. The test modules that need an extra
## it leaves out are reported skipped (ci/absent_extras.py) and listed; the second run runs
## exactly those modules, at mcp's and fastmcp's floors: every other test would only repeat the
## core run at versions that are no floor. Left out of both: the `slow` mark, the long real-time
## scenarios (fleets of processes, failovers, a real Prometheus, the demo's levels), run once in
## `make test`; here the point is whether the floors work, which the quicker tests of the same
## code paths show. The two venvs are built side by side (their installs wait on the network; pip's
## cache keeps the wheels); each run's tests go on as many workers as in `make test`.
## `make test-lowest-all` alone runs every test that is not `slow` at lowest-direct versions.
LOWEST_TESTS := tests

test-lowest:
	$(MAKE) -j2 --output-sync=target lowest-venv-core lowest-venv-all
	$(MAKE) lowest-run-core
	$(MAKE) lowest-run-all LOWEST_TESTS="$$(sort -u $(LOWEST)-core/needs-left-out-extras | tr "\n" " ")"

test-lowest-all test-lowest-core: test-lowest-%: lowest-venv-%
	$(MAKE) lowest-run-$*

lowest-venv-all lowest-venv-core: lowest-venv-%:
	rm -rf $(LOWEST)-$*
	$(PYTHON) -m venv $(LOWEST)-$*
	$(LOWEST)-$*/bin/pip install --quiet --upgrade pip
	$(LOWEST)-$*/bin/pip install --quiet --group dev
	$(LOWEST)-$*/bin/python ci/lowest.py install $* $(LOWEST)-$*/bin/python
	touch $(LOWEST)-$*/absent-modules

# An empty LOWEST_TESTS (no test needed a left-out extra) runs pytest's testpaths: every test.
lowest-run-all lowest-run-core: lowest-run-%:
	rm -f $(LOWEST)-$*/needs-left-out-extras
	PYTHONPATH=ci FG_ABSENT_MODULES=$(LOWEST)-$*/absent-modules \
	  FG_NEEDS_LEFT_OUT=$(LOWEST)-$*/needs-left-out-extras \
	  $(LOWEST)-$*/bin/pytest $(LOWEST_TESTS) -q -m "not slow and not alone" \
	  -p no:cacheprovider -p absent_extras -n $(WORKERS) --dist loadfile
	PYTHONPATH=ci FG_ABSENT_MODULES=$(LOWEST)-$*/absent-modules \
	  FG_NEEDS_LEFT_OUT=$(LOWEST)-$*/needs-left-out-extras \
	  $(LOWEST)-$*/bin/pytest $(LOWEST_TESTS) -q -m "alone and not slow" \
	  -p no:cacheprovider -p absent_extras || test $$? -eq 5  # 5: none of them is `alone`
	touch $(LOWEST)-$*/needs-left-out-extras

DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --group docs
	touch $(DOCS_STAMP)

## The documentation site, served at http://127.0.0.1:8000 (MkDocs with Material).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## The site built strictly (a broken link, a missing page or a bad docstring fails), into site/.
docs-check: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## Benchmarks with figures (ratios measured side by side in one run): every test that records a
## figure (the `figure` mark, benchmarks/conftest.py), failing when one misses its target.
bench: $(STAMP)
	$(BIN)/pytest benchmarks -q -m figure --benchmark-columns=min,median,mean,ops --benchmark-sort=name

## The full-length overload scenario (20 s windows); writes benchmarks/results/.
overload: $(STAMP)
	$(BIN)/python benchmarks/overload_full.py | tee benchmarks/results/overload.txt

clean:
	rm -rf $(VENV) $(LOWEST)-all $(LOWEST)-core .pytest_cache .mypy_cache .ruff_cache .benchmarks site
