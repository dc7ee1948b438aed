"""What the sidecar's gRPC server takes from one caller: message sizes, streams, pings.

- A request larger than MAX_REQUEST_BYTES is refused ``RESOURCE_EXHAUSTED`` with ErrorInfo
  reason ``REQUEST_TOO_LARGE`` (class REFUSED) before it is parsed
  (sidecar.fronts.grpc.interceptors). gRPC's own limit, which answers with a bare status
  that no client can classify, is set well above it (TRANSPORT_MAX_MESSAGE_BYTES), so
  that it only bounds what one message can make the process hold.
- At most MAX_CONCURRENT_STREAMS calls at once on one connection: HTTP/2's own setting,
  so a client beyond it waits for a stream instead of failing.
- Keepalive enforced both ways: a client may ping every MIN_PING_INTERVAL_MS, with or
  without calls (an agent idle between runs keeps its connection), and one that pings
  more often is sent GOAWAY (``too_many_pings``) after MAX_PING_STRIKES; the server pings
  an idle connection every KEEPALIVE_TIME_MS and drops it when no answer comes within
  KEEPALIVE_TIMEOUT_MS (a peer that vanished), and closes one idle for
  MAX_CONNECTION_IDLE_MS with a GOAWAY that clients reconnect after.

No maximum connection age: it exists to move clients between the servers behind a balancer,
and a sidecar has one agent and no balancer.

The options are built when a server is, from the module's values, so that a test can scale
the times down.
"""

from __future__ import annotations

from sidecar.rules.canonical import MAX_JSON_BYTES

# Four times the largest field (a *_json field): every request the field limits allow is
# well inside it, so an oversized field still gets its own INVALID_ARGUMENT.
MAX_REQUEST_BYTES = 4 * MAX_JSON_BYTES
# gRPC's own bound on one message, in and out: the store's 16 MiB artifacts fit in a
# response, and a request up to it gets the answer above rather than a bare status.
TRANSPORT_MAX_MESSAGE_BYTES = 32 << 20
# Per connection. The load tests run 32 calls at once; an agent's tool calls far fewer.
MAX_CONCURRENT_STREAMS = 128
MIN_PING_INTERVAL_MS = 10_000
MAX_PING_STRIKES = 2
KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
MAX_CONNECTION_IDLE_MS = 5 * 60_000


def grpc_server_options() -> list[tuple[str, int]]:
    """The channel arguments of a server that keeps the limits above."""
    return [
        ("grpc.max_receive_message_length", TRANSPORT_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", TRANSPORT_MAX_MESSAGE_BYTES),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
    ]
