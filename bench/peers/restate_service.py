"""Restate's Python SDK behind its own ingress: one service whose ``create`` handler makes one
durable step (``ctx.run``), journaled by the Restate server before the call answers.

Served by hypercorn in the peers' environment (`make bench-peers-env`):

    .venv-peers/bin/python -m hypercorn --bind 127.0.0.1:9080 bench.peers.restate_service:app
"""

from __future__ import annotations

import uuid

import restate

bench = restate.Service("Bench")


def _record(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


@bench.handler()
async def create(ctx: restate.Context, body: dict[str, object]) -> dict[str, str]:
    # The step's answer is journaled, and synced, before the handler goes on.
    made = await ctx.run_typed("record", _record, kind="create")
    return {"id": made}


app = restate.app(services=[bench])
