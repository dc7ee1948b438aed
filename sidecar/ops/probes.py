"""A port that answers grpc.health.v1 and nothing else, for the kubelet's probes.

The agent API listens on loopback, where every container of the pod reaches it
and nothing outside does. The kubelet, though, probes the pod's own address, so
the probes get a port of their own (``--health-listen``) that serves the same
health service and no other: opening it exposes no RunActionsService call.

Two names answer there:

- ``""`` and ``actonce.v1.RunActionsService``: SERVING only while the ledger and
  the store answer and the sidecar is not draining (readiness, startup);
- ``liveness``: SERVING while the process answers at all. A liveness probe must
  not fail because the store is down (a restart would not bring it back) nor
  while the sidecar drains (a restart would cut the drain short).
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from sidecar.ops.listening import SERVER_OPTIONS, bind

LIVENESS_SERVICE = "liveness"


async def create_health_server(
    servicer: health.aio.HealthServicer, listen: str
) -> tuple[grpc.aio.Server, int]:
    """A server (not yet started) serving ``servicer`` alone on ``listen``, and its port."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return server, bind(server, listen)
