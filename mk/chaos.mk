# Crash harness, fault tests and fuzzing (issue 6). Included by the Makefile.
#   make test-chaos   quick mode: a few seeds per backend, and lint and types of chaos/
#   make chaos        long mode: CHAOS_SEEDS seeds on SQLite and on PostgreSQL
CHAOS_SEEDS ?= 200
CHAOS_JOBS ?= 3

TEST_TARGETS += test-chaos

.PHONY: test-chaos chaos lint-chaos

lint-chaos: $(STAMP)
	$(VENV)/bin/ruff check chaos
	$(VENV)/bin/ruff format --check chaos
	$(VENV)/bin/mypy chaos

test-chaos: lint-chaos
	$(PY) -m chaos --quick --out chaos/out/quick

chaos: $(STAMP)
	$(PY) -m chaos --seeds $(CHAOS_SEEDS) --backend both --jobs $(CHAOS_JOBS)
