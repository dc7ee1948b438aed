# actonce: `make run` serves, `make test` runs every test. Both create .venv when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two stamps: what serving needs (`make run`), and beside it the development extras.
SERVE_STAMP := $(VENV)/.serve-installed
STAMP := $(VENV)/.installed
NODE_BIN := node_modules/.bin
BUF := $(NODE_BIN)/buf

# Other parts of the project (clients, deploy, bench, chaos) add their own
# targets in mk/*.mk and append to TEST_TARGETS so `make test` runs them.
TEST_TARGETS := test-python
.DEFAULT_GOAL := test
-include mk/*.mk

.PHONY: run test check venv lint typecheck check-gen gen buf-lint test-python bench-ledger clean

# setuptools tells of every editable install it makes, as a warning screen that pip shows:
# information, not a fault, and kept off the terminal.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet \
	--disable-pip-version-check
PIP_WHEEL := $(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps

# The sidecar alone: what `actonce serve`, `audit`, `demo` and `store` import. The MCP
# front, traces, the console and PostgreSQL are extras (pyproject.toml), which the
# development install below brings. --no-compile: byte-compiling every installed
# package up front took a third of a fresh install, and Python compiles what it
# imports on first use anyway.
$(SERVE_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --no-compile -c constraints.txt -e .
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP) pyproject.toml constraints.txt
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

$(BUF): package.json package-lock.json
	npm ci --silent --no-audit --no-fund
	touch $(BUF)

run: $(SERVE_STAMP)
	$(VENV)/bin/actonce serve

# The generated Python stubs, one copy for the sidecar and the Python client.
GEN_PY := clients/python/src/actonce_api

gen: $(STAMP)
	$(PY) scripts/gen_protos.py

# Fails when the committed generated code is not what the script makes.
check-gen: $(STAMP)
	rm -rf .gen-check && $(PY) scripts/gen_protos.py .gen-check
	diff -r --exclude=__pycache__ $(GEN_PY) .gen-check || { rm -rf .gen-check; echo "$(GEN_PY) is stale: run 'make gen'"; exit 1; }
	rm -rf .gen-check

# Lint, and no breaking change against the API as last released: the image of
# its protos that `buf build` made at that release (protos/released/).
buf-lint: $(BUF)
	$(BUF) lint
	$(BUF) breaking --against protos/released/actonce-0.1.0.binpb

lint: $(STAMP)
	$(VENV)/bin/ruff check sidecar tests scripts bench
	$(VENV)/bin/ruff format --check sidecar tests scripts bench
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The fuzz extra too, so that the short coverage-guided fuzz runs in the suite.
# Most tests wait on processes, sockets and syncs, not on the cores: several run at once,
# a file's tests together (they share its fixtures and its servers).
PYTEST_WORKERS ?= 3
test-python: $(STAMP) $(FUZZ_STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: check-gen buf-lint lint typecheck $(TEST_TARGETS)

# The fast loop: lint, types and the unit tests, which start no server and need
# no Go, Node, Maven or PostgreSQL. Well under a minute.
CHECK_TESTS := tests/rules tests/core tests/ledger/test_scheduling.py tests/ops/test_http_guard.py \
	tests/chaos/test_plan.py tests/test_generated.py tests/fronts/test_operations.py \
	tests/fronts/grpc/test_status.py tests/test_store_contract.py \
	tests/test_config_table.py tests/test_harness_ports.py tests/docs/test_reference_current.py \
	tests/docs/test_glossary.py tests/fronts/mcp/test_gateway_in_memory.py tests/test_module_size.py
check: lint typecheck
	$(PY) -m pytest -q $(CHECK_TESTS)

# Audited against unaudited sidecar throughput on SQLite and PostgreSQL.
bench-ledger: $(STAMP)
	$(PY) -m bench.ledger_bench

clean:
	rm -rf $(VENV) node_modules .gen-check .actonce .actonce-demo dist
