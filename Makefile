# Two entry points: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test fast lint typecheck proto bench campaign clean

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
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m bookiesim.proto.regenerate --check
	$(BIN)/pytest -q

# The fast subset for work in progress.
fast: $(STAMP)
	$(BIN)/pytest -q -m 'not slow' -x

proto: $(STAMP)
	$(BIN)/python -m bookiesim.proto.regenerate

bench: $(STAMP)
	$(BIN)/bookiesim bench storage

# The long fault campaign (docs/simulation.md), apart from `make test` (which runs a short
# one and the bounded hypothesis state machine): CAMPAIGN_SEEDS seeds of the default plan
# must all pass, and every bug switch that `sim faults --list-bugs` knows must be caught
# within BUG_SEEDS seeds -- there exit code 1 ("a seed failed") is the success.
CAMPAIGN_SEEDS ?= 200
BUG_SEEDS ?= 30
campaign: $(STAMP)
	$(BIN)/bookiesim sim faults --seeds $(CAMPAIGN_SEEDS)
	@bugs=$$($(BIN)/bookiesim sim faults --list-bugs --json \
		| $(BIN)/python -c 'import json, sys; print(*(b["name"] for b in json.load(sys.stdin)))') \
		|| exit 2; \
	missed=""; \
	for bug in $$bugs; do \
		echo "== --inject-bug $$bug: must fail within $(BUG_SEEDS) seeds"; \
		$(BIN)/bookiesim sim faults --seeds $(BUG_SEEDS) --inject-bug $$bug; code=$$?; \
		if [ $$code -eq 1 ]; then echo "== $$bug: caught"; \
		elif [ $$code -eq 0 ]; then echo "== $$bug: NOT caught"; missed="$$missed $$bug"; \
		else echo "== $$bug: the campaign itself failed (exit $$code)"; exit $$code; fi; \
	done; \
	if [ -n "$$missed" ]; then echo "bug switches not caught:$$missed"; exit 1; fi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
