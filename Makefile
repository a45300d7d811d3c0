# agentledger developer targets. `make demo` and `make test` are the README's two set-up commands:
# each creates .venv on first use. The strict editable install builds a link tree that mypy and
# import-linter can read; it is refreshed whenever a package folder gains or loses a file.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PKG_DIRS := ledger projections tools agents agents/models agents/integrations replay cli
STAMP := $(VENV)/.agentledger-installed
PG_URL ?= postgresql://postgres@127.0.0.1:5432/test

.PHONY: dev demo test test-fast lint types imports check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml $(PKG_DIRS)
	$(BIN)/python -m pip install --quiet -e ".[dev]" --config-settings editable_mode=strict
	touch $(STAMP)

dev: $(STAMP)

demo: $(STAMP)
	$(BIN)/agentledger demo

test: $(STAMP)
	AGENTLEDGER_TEST_PG_URL=$${AGENTLEDGER_TEST_PG_URL-$(PG_URL)} $(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not postgres"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy -p agentledger.ledger -p agentledger.projections -p agentledger.tools \
		-p agentledger.agents -p agentledger.replay -p agentledger.cli

imports: $(STAMP)
	$(BIN)/lint-imports

check: lint types imports test

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
