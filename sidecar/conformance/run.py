"""The checks in the order they print, run one after another against a store, and
``actonce store check`` itself: the channel, the run, the verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import grpc

from sidecar.conformance.ids import (
    racing_writers,
    used_artifact_id,
    used_message_id,
    used_message_id_with_turn,
    used_proposal_id,
    used_thread_id,
)
from sidecar.conformance.kit import Broken, Store, answer_of
from sidecar.conformance.owners import (
    granted_owner_reached,
    other_rule_refused,
    owner_recorded,
    unowned_reachable,
)
from sidecar.conformance.refusals import forbidden, not_found, validation_failed
from sidecar.conformance.states import (
    archived_artifact,
    created_state,
    every_state_is_named,
    patch_bumps_version,
    patch_that_does_not_apply,
    stale_version,
)
from sidecar.conformance.threads import listing, message_order, notice_takes_no_turn, turn_requests
from sidecar.ops.security import CHANNEL_OPTIONS, channel_credentials, read_token, store_tls

Check = Callable[[Store], str]
# The order they run and print in.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("ids/artifact", used_artifact_id),
    ("ids/proposal", used_proposal_id),
    ("ids/thread", used_thread_id),
    ("ids/message", used_message_id),
    ("ids/message-with-turn", used_message_id_with_turn),
    ("ids/race", racing_writers),
    ("states/created", created_state),
    ("states/archived", archived_artifact),
    ("states/every-state-named", every_state_is_named),
    ("versions/bump", patch_bumps_version),
    ("versions/conflict", stale_version),
    ("versions/patch-failed", patch_that_does_not_apply),
    ("refusals/not-found", not_found),
    ("refusals/validation-failed", validation_failed),
    ("refusals/forbidden", forbidden),
    ("threads/order", message_order),
    ("threads/turn-requests", turn_requests),
    ("threads/notice-takes-no-turn", notice_takes_no_turn),
    ("listing/pages", listing),
    ("owners/recorded", owner_recorded),
    ("owners/other-rule-refused", other_rule_refused),
    ("owners/granted", granted_owner_reached),
    ("owners/unowned-reachable", unowned_reachable),
)


def open_channel(
    target: str,
    *,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> grpc.Channel:
    """A channel to ``target`` as the sidecar's --store-target opens one: TLS when a CA or a
    client certificate is given."""
    tls = store_tls(tls_ca, tls_cert, tls_key)
    if tls is None:
        return grpc.insecure_channel(target, options=list(CHANNEL_OPTIONS))
    return grpc.secure_channel(target, channel_credentials(tls), options=list(CHANNEL_OPTIONS))


def run_checks(store: Store, out: TextIO = sys.stdout) -> int:
    """Run every check and print one line each; 0 when all hold, 1 otherwise."""
    held = broken = skipped = 0
    for name, check in CHECKS:
        try:
            said = check(store)
        except Broken as error:
            broken += 1
            print(f"  FAIL  {name}: {error}", file=out)
            continue
        except grpc.RpcError as error:
            broken += 1
            answer = answer_of(error)
            print(
                f"  FAIL  {name}: a call the contract answers was refused: {answer.code.name}, "
                f"reason {answer.reason or '(none)'!r}: {answer.message}",
                file=out,
            )
            continue
        if said.startswith("SKIP: "):
            skipped += 1
            print(f"  SKIP  {name}: {said.removeprefix('SKIP: ')}", file=out)
        else:
            held += 1
            print(f"  ok    {name}: {said}", file=out)
    verdict = "the store keeps the contract" if not broken else "the store BREAKS the contract"
    print(f"\n{held} held, {broken} failed, {skipped} skipped: {verdict}", file=out)
    return 0 if not broken else 1


def check_store(
    target: str,
    *,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token_file: Path | None = None,
    timeout: float = 10.0,
    out: TextIO = sys.stdout,
) -> int:
    """``actonce store check``: 0 when every check holds, 1 when one fails, 2 when the store
    cannot be reached at all."""
    metadata = [("authorization", f"Bearer {read_token(token_file)}")] if token_file else []
    with open_channel(target, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            print(
                f"actonce: error: the store at {target} cannot be reached "
                f"(no connection within {timeout:g} s)",
                file=sys.stderr,
            )
            return 2
        store = Store(channel, metadata, timeout)
        print(f"actonce store check: {target}, ids under {store.prefix}-*\n", file=out)
        return run_checks(store, out)
