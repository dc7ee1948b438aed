"""The defaults of the sidecar's settings, each written once.

The command line (:mod:`sidecar.cli`), the configuration (:mod:`sidecar.config`)
and the parts that take a setting (the core, the store clients, the attempt
registry) read them here.
"""

from __future__ import annotations

from pathlib import Path

from sidecar.rules import ids

LISTEN = "127.0.0.1:50051"
DATA_DIR = Path(".actonce")
# Seconds a store call may take; a write also needs this much lease left.
STORE_TIMEOUT_SECONDS = 5.0
# Seconds a BeginStep that repeats a step of its attempt still running (its caller
# gave up and called again) waits for that step to end and answer its result, at most:
# a gRPC caller's own deadline bounds it too; the MCP gateway waits for its upstream's.
STEP_REPEAT_WAIT_SECONDS = 5.0
# Seconds the MCP gateway waits for an upstream's answer.
MCP_UPSTREAM_TIMEOUT_SECONDS = 30.0
# Seconds the drain on SIGTERM takes at most: calls first, then closing.
GRACE_SECONDS = 10.0
# Milliseconds a ledger append waits for a locked ledger.
AUDIT_BUSY_TIMEOUT_MS = 5000
# Server connections a sidecar holds to a PostgreSQL ledger: one appends, one reads, beats
# and answers health checks. A pooler in transaction mode in front of the server shares
# them across the fleet (docs/ledger.md).
AUDIT_POOL_SIZE = 2
# Server connections of the embedded store on PostgreSQL: its batches and its writes made in
# three commits with the ledger's, each on one.
STORE_POOL_SIZE = 2
# The derived-id scheme of new runs; a run keeps the one it began with.
ID_SCHEME = ids.SCHEME_VERSION
# An attempt nobody has called for this long is forgotten, so that memory
# stays bounded when agents die without EndAttempt. Its later calls get
# UNKNOWN_ATTEMPT, which is safe: the run is retried with a new attempt.
ATTEMPT_IDLE_TTL_SECONDS = 3600.0
# Bounds on live attempts that fit the Kubernetes manifest's 256 MiB limit, with
# room for the process itself (about 60 MiB idle) and a flood of calls in flight
# (bench/attempt_flood.py measures it; docs/guarantees.md has its figures).
ATTEMPT_MAX_COUNT = 10_000
ATTEMPT_MAX_MIB = 48
# The HTTP fronts (the MCP front, the console). A body well above the largest field (a
# 1 MiB *_json, escaped in its envelope), so that an oversized field gets its own clear
# error; nesting above the fields' 64 with room for the envelope. Connections at most,
# each holding at most one body: 64 x 2 MiB stays within the pod's memory limit.
HTTP_MAX_BODY_BYTES = 2 << 20
HTTP_MAX_NESTING = 100
HTTP_MAX_CONNECTIONS = 64
HTTP_MAX_HEADER_BYTES = 16 << 10
# A request's head must arrive within this many seconds of its first byte (or of the
# connection), and the whole request within the second figure; idle between requests
# at most the third.
HTTP_HEADER_TIMEOUT_SECONDS = 5.0
HTTP_READ_TIMEOUT_SECONDS = 30.0
HTTP_KEEP_ALIVE_SECONDS = 5
# The services that stay open when callers need the API token: probes call health, which
# answers a status and nothing else. Reflection lists every method and message of the API,
# a map for whoever has no token: it needs the token unless the operator exempts it.
API_TOKEN_EXEMPT = frozenset({"health"})
