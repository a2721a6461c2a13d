# Two entry points: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test coverage fast lint typecheck proto bench campaign clean native pure

# pyfuse3 (the `faults` extra: the lazy file system, bookiesim/chaos/lazyfs) is installed
# only where libfuse3 can build it; its tests skip elsewhere (fail under CI=true).
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	if pkg-config --exists fuse3 2>/dev/null; then \
		$(BIN)/pip install --quiet -e '.[test,faults]'; \
	else \
		$(BIN)/pip install --quiet -e '.[test]'; \
	fi
	touch $(STAMP)

# The hot path compiled with mypyc where this machine can (a C compiler, the Python headers;
# bookiesim/native): rebuilt when one of its modules changed. Where it cannot, one line says
# why and the pure modules run; a module mypyc refuses fails the build.
NATIVE := $(shell sed -n 's/^    "\(bookiesim\.[a-z0-9_.]*\)",$$/\1/p' bookiesim/native/__init__.py \
	| tr . / | sed 's/$$/.py/')
NATIVE_STAMP := $(VENV)/.native
# Not stamped where it cannot compile: the next make says so again, and compiles once it can.
$(NATIVE_STAMP): $(STAMP) $(NATIVE) bookiesim/native/__init__.py bookiesim/native/build.py \
		bookiesim/native/parallel_compile.py
	$(BIN)/python -m bookiesim.native.build && touch $(NATIVE_STAMP) || [ $$? -eq 3 ]

native: $(STAMP)
	$(BIN)/python -m bookiesim.native.build
	touch $(NATIVE_STAMP)

# Back to the pure modules only (`make native` or `make test` compiles again).
pure: $(STAMP)
	$(BIN)/python -m bookiesim.native.build --clean
	rm -f $(NATIVE_STAMP)

# Start a local cluster, write and read, print where the metrics are.
demo: $(NATIVE_STAMP)
	$(BIN)/bookiesim demo

# The whole suite: lint, types, import layers, generated code freshness, the branch coverage
# of the areas held to 90% (printed), and every test. The areas' tests run twice: on the pure
# modules under coverage (a tracer sees no compiled code), then with every other test on the
# compiled build (bookiesim/native) where there is one.
test: $(NATIVE_STAMP)
	$(BIN)/ruff check bookiesim tests
	$(BIN)/ruff format --check bookiesim tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m bookiesim.proto.regenerate --check
	$(BIN)/coverage erase
	BOOKIESIM_PURE=1 $(BIN)/coverage run -m pytest -q $(AREA_TESTS) > .coverage-areas.log 2>&1 \
		|| { cat .coverage-areas.log; exit 1; }
	$(BIN)/coverage combine -q
	$(BIN)/python tests/coverage_areas.py
	$(BIN)/bookiesim --version
	$(BIN)/pytest -q

# The areas held to 90% branch coverage (tests/coverage_areas.py), measured in `make test` on
# their own tests: code no socket or clock decides, so the figure is the same on any machine.
AREA_TESTS := tests/proto tests/entrylog tests/gc \
	tests/bookie/test_config.py tests/bookie/test_ledger_state.py tests/bookie/test_disk_state.py \
	tests/bookie/test_journal_format.py tests/bookie/test_journal_files.py \
	tests/bookie/test_ledger_index.py tests/bookie/test_log_mark.py \
	tests/client/test_handle_state.py tests/client/test_handle_state_machine.py \
	tests/client/test_digest.py tests/client/test_distribution.py \
	tests/client/test_failed_bookies.py tests/client/test_wire.py tests/client/test_add_future.py

# Branch coverage of the whole suite, child processes (bookies, CLI commands) included, and
# the areas above. Not part of `make test`: under the tracer the interpreter is several
# times slower, and the client tests that bound a bookie's answer in wall-clock seconds
# (ensemble change, pipelined adds, the stateful cluster histories) then time out.
coverage: $(STAMP)
	$(BIN)/coverage erase
	BOOKIESIM_PURE=1 $(BIN)/coverage run -m pytest -q || true
	$(BIN)/coverage combine -q
	$(BIN)/coverage report --skip-covered --sort=cover
	$(BIN)/python tests/coverage_areas.py --whole

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
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .coverage .coverage.* .coverage-areas.log
	find bookiesim -name "*.so" -delete; rm -rf build/native
