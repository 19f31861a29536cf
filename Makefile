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

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench
	$(BIN)/python -m pytest -q -x --durations=15 tests

test-fast: install
	$(BIN)/ruff check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench
	$(BIN)/python -m pytest -q -x --durations=15 -m "not slow" tests

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --config-file pyproject.toml tuner db service schedules bench

serve: install
	$(BIN)/convtune serve

bench: install
	$(BIN)/python bench/run.py
