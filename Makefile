# Every target does its own set-up: a fresh clone needs only `make demo` or `make test`.
SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench overload clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,mcp,fastmcp,redis,demo]"
	touch $(STAMP)

## The main job: the overload demo on the embedded in-memory default.
demo: $(STAMP)
	$(BIN)/fusion-guard demo

## The whole test suite: lint, strict typing, tests (asyncio and trio), benchmark smoke run.
test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests benchmarks --benchmark-disable -q

## Benchmarks with figures (ratios measured side by side in one run).
bench: $(STAMP)
	$(BIN)/pytest benchmarks -q --benchmark-only --benchmark-columns=min,median,mean,ops --benchmark-sort=name

## The full-length overload scenario (20 s windows); writes benchmarks/results/.
overload: $(STAMP)
	$(BIN)/python benchmarks/overload_full.py | tee benchmarks/results/overload.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks
