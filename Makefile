# Two entry points: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test fast lint typecheck proto bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Start a local cluster, write and read, print where the metrics are.
demo: $(STAMP)
	$(BIN)/bookiesim demo

# The whole suite: lint, types, generated code freshness, tests.
test: $(STAMP)
	$(BIN)/ruff check bookiesim tests
	$(BIN)/ruff format --check bookiesim tests
	$(BIN)/mypy
	$(BIN)/python -m bookiesim.proto.regenerate --check
	$(BIN)/pytest -q

# The fast subset for work in progress.
fast: $(STAMP)
	$(BIN)/pytest -q -m 'not slow' -x

proto: $(STAMP)
	$(BIN)/python -m bookiesim.proto.regenerate

bench: $(STAMP)
	$(BIN)/bookiesim bench storage

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
