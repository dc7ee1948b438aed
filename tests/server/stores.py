"""Real reference stores with a real hazard put in their way: a slow disk, a concurrent writer."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from tests.harness import RunningStore


class SlowCreates(grpc.aio.ServerInterceptor):
    """Each CreateArtifact waits ``delay`` seconds before the store handles it; ``reached``
    is set once one has arrived, so a test knows the sidecar's call is in flight, and
    ``arrived`` counts them."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.reached = threading.Event()
        self.arrived = 0

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        if details.method.endswith("/CreateArtifact"):
            self.arrived += 1
            self.reached.set()
            await asyncio.sleep(self.delay)
        return await continuation(details)


class ConcurrentWriter(grpc.aio.ServerInterceptor):
    """Another writer that edits every artifact of kind ``kind`` just before each of the
    next ``times`` patches reaches the store: real version conflicts, on time."""

    def __init__(self, holder: list[RunningStore], times: int, kind: str = "ticket") -> None:
        self.holder = holder
        self.times = times
        self.kind = kind

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        if details.method.endswith("/PatchArtifact") and self.times > 0:
            self.times -= 1
            backend = self.holder[0].backend
            for artifact in backend.list_artifacts(self.kind).artifacts:
                patch = [{"op": "add", "path": "/other", "value": artifact.version}]
                backend.patch_artifact(artifact.id, artifact.version, json.dumps(patch))
        return await continuation(details)
