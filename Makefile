PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install test test-fast lint bench serve

$(BIN)/convtune: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/convtune

install: $(BIN)/convtune

# Two pytest workers, a test file each at a time (module fixtures are built once): TVM compiles
# one candidate on one thread, so the 2-core CI machine ran the suite in 62 minutes in one
# worker and 35 in two (AMX Xeon VM, 2026-12-07, a clean .ci/run).
PYTEST := $(BIN)/python -m pytest -q -x --durations=15 -n 2 --dist loadfile

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench
	$(PYTEST) tests

test-fast: install
	$(BIN)/ruff check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench
	$(PYTEST) -m "not slow" tests

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench

serve: install
	$(BIN)/convtune serve

bench: install
	$(BIN)/python bench/run.py
