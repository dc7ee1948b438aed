"""PostgreSQL for chaos seeds: the shared test server, or a private one for the long mode.

The long mode runs on a private server of its own (another data folder and port), so that
hundreds of seeds do not load the server every other test run on this machine shares.
"""

from __future__ import annotations

import os

from tests.helpers.postgres import PrivateServer
from tests.helpers.postgres import server_dsn as shared_server_dsn

PRIVATE = PrivateServer(
    os.environ.get("ACTONCE_CHAOS_PG_DIR", "/tmp/actonce-chaos-pg"),
    int(os.environ.get("ACTONCE_CHAOS_PG_PORT", "55439")),
)


def server_dsn(*, private: bool) -> str:
    """Start (or reuse) the server and return its maintenance DSN.

    ``private`` picks the chaos server; otherwise the shared test server, or the one
    ACTONCE_TEST_PG_DSN names.
    """
    return PRIVATE.start() if private else shared_server_dsn()
