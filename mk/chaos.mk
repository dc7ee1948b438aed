# Crash harness, fault tests and fuzzing. Included by the Makefile.
#   make test-chaos   quick mode: a few seeds per backend, and lint and types of chaos/
#   make chaos        long mode: CHAOS_SEEDS seeds on SQLite and on PostgreSQL
#   make chaos-sidecars  long mode on PostgreSQL with CHAOS_SIDECARS sidecars per seed sharing
#                     its ledger (of many chains) and store
#   make fuzz         atheris on the JSON and JSON Pointer parsing
# The chaos modes run some processes with a clock minutes off under Debian's faketime, which
# `make faketime` (mk/ledger.mk) installs with apt-get where it is missing.
CHAOS_SEEDS ?= 200
CHAOS_JOBS ?= 4
CHAOS_SIDECARS ?= 4

TEST_TARGETS += test-chaos

.PHONY: test-chaos chaos chaos-sidecars lint-chaos

lint-chaos: $(STAMP)
	$(VENV)/bin/ruff check chaos
	$(VENV)/bin/ruff format --check chaos
	$(VENV)/bin/mypy chaos

test-chaos: lint-chaos faketime
	$(PY) -m chaos --quick --out chaos/out/quick

chaos: $(STAMP) faketime
	$(PY) -m chaos --seeds $(CHAOS_SEEDS) --backend both --jobs $(CHAOS_JOBS)

chaos-sidecars: $(STAMP) faketime
	$(PY) -m chaos --seeds $(CHAOS_SEEDS) --backend postgres --sidecars $(CHAOS_SIDECARS) \
		--jobs $(CHAOS_JOBS) --out chaos/out/sidecars

# Coverage-guided fuzzing (atheris) of the JSON and JSON Pointer parsing, FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
FUZZ_STAMP := $(VENV)/.fuzz-installed

.PHONY: fuzz

$(FUZZ_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,fuzz]'
	touch $(FUZZ_STAMP)

fuzz: $(FUZZ_STAMP)
	$(PY) -m tests.fuzz.atheris_targets json $(FUZZ_SECONDS)
	$(PY) -m tests.fuzz.atheris_targets pointer $(FUZZ_SECONDS)
