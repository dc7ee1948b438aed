"""The embedded store is reachable only by the sidecar's owner, never on a port."""

from __future__ import annotations

import os
import stat

from tests.harness import RunningSidecar


def test_the_embedded_store_listens_on_a_private_unix_socket(sidecar: RunningSidecar) -> None:
    target = sidecar.sidecar.store_target
    assert target.startswith("unix:"), target
    mode = os.stat(target.removeprefix("unix:")).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600  # a write there would bypass the audit ledger
    assert sidecar.artifacts("nothing") == []  # and it still serves the contract
