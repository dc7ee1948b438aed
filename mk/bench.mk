# The load test. Included by the Makefile.
#   make bench          every ghz scenario (bench/ghz/*.json) against every target, alternated,
#                       then bench/out/report.json, report.md, throughput.png and latency.png
#   make bench-smoke    the same in a few seconds on SQLite, failing on a wrong answer; part of
#                       `make test`, so that the load test cannot rot
#   make bench-profile  py-spy samples the audited sidecar under Notice load (SCENARIO=...)
#   make bench-fleet    1, 2, 4 and 8 sidecars on one PostgreSQL ledger at saturation, and 8
#                       through PgBouncer: writes/s, lock waits, connections, events per
#                       commit, CPU and pgbench's figure for the same append shape, in
#                       bench/out/fleet.md (SIZES=1,2,4,8,16 for more)
#   make bench-peers-env  the peers' packages (DBOS, Restate's server and Python SDK, hypercorn),
#                       pinned, in .venv-peers and .tools/restate-VERSION, and the bench's
#                       closed-loop HTTP client; `make bench` installs them, `make test` never
# ghz comes from its pinned Go module, built with the machine's Go into .tools/; the plots and
# the profiler come from the `bench` extra, installed here and never by default.
GHZ_VERSION := v0.121.0
GHZ_BIN := $(CURDIR)/.tools/ghz-$(GHZ_VERSION)
GHZ := $(GHZ_BIN)/ghz
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
BENCH_STAMP := $(VENV)/.bench-installed
SCENARIO ?= notice

TEST_TARGETS += bench-smoke

RESTATE_VERSION := 1.7.12
PEERS_VENV := $(CURDIR)/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
RESTATE_DIR := $(CURDIR)/.tools/restate-$(RESTATE_VERSION)
RESTATE_STAMP := $(RESTATE_DIR)/.installed
HTTPLOAD := $(CURDIR)/.tools/httpload

SIZES ?= 1,2,4,8

.PHONY: bench bench-smoke bench-profile bench-fleet bench-lint ghz bench-peers-env

$(GHZ):
	GOBIN=$(GHZ_BIN) GOFLAGS=-buildvcs=false $(GO) install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)

ghz: $(GHZ)

$(BENCH_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-lint: $(BENCH_STAMP)
	$(VENV)/bin/mypy bench

# The peers run in an environment of their own: their dependencies never meet the project's.
$(PEERS_STAMP): bench/peers/requirements.txt
	$(PY) -m venv --clear $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --no-deps -r bench/peers/requirements.txt
	touch $(PEERS_STAMP)

$(RESTATE_STAMP):
	npm install --no-save --no-audit --no-fund --prefix $(RESTATE_DIR) \
		@restatedev/restate-server@$(RESTATE_VERSION)
	touch $(RESTATE_STAMP)

$(HTTPLOAD): bench/httpload/main.go bench/httpload/go.mod
	cd bench/httpload && GOFLAGS=-buildvcs=false $(GO) build -o $(HTTPLOAD) .

bench-peers-env: $(PEERS_STAMP) $(RESTATE_STAMP) $(HTTPLOAD)

bench: $(BENCH_STAMP) $(GHZ) bench-peers-env
	GHZ=$(GHZ) GHZ_VERSION=$(GHZ_VERSION) RESTATE_VERSION=$(RESTATE_VERSION) $(PY) -m bench.run

bench-smoke: bench-lint $(GHZ)
	GHZ=$(GHZ) GHZ_VERSION=$(GHZ_VERSION) $(PY) -m bench.run --smoke

bench-fleet: $(BENCH_STAMP) $(GHZ) pgbouncer
	GHZ=$(GHZ) $(PY) -m bench.fleet --sizes $(SIZES)

bench-profile: $(BENCH_STAMP) $(GHZ)
	GHZ=$(GHZ) GHZ_VERSION=$(GHZ_VERSION) $(PY) -m bench.profile --scenario $(SCENARIO)

# The operator's console over a generated ledger of 100,000 chained events: runs-page and
# run-page latencies over HTTP (figures, not a test).
.PHONY: bench-console
bench-console: $(STAMP)
	$(PY) -m bench.console_bench

# MCP notice calls/s beside gRPC Notice, in one run on one sidecar (bench/mcp_bench.py).
.PHONY: bench-mcp
bench-mcp: $(STAMP)
	$(PY) -m bench.mcp_bench
