"""``actonce store check``: does a store keep the store contract? A conformance kit.

The sidecar trusts its store for one thing above all: a used id is refused, durably, with
INVALID_STATE whose only state is ID_USED, and the write already made stays as it was. That
refusal is how a retried write lands once. The kit runs the contract's behaviour
(``protos/actonce/store/v1/artifact_store.proto``, ``docs/writing-a-store.md``) against any
store over gRPC and prints what holds:

- ids: every write type (artifact, proposal, thread, message) refuses a used id, and the
  first write is what the store still holds; of writers racing for one id, one lands;
- states: an artifact starts at version 1, unarchived; archived, it refuses patches,
  proposed edits and another archive with INVALID_STATE {ARCHIVED}; a refusal names every
  state that refused it (a used proposal id of an archived artifact: ID_USED and ARCHIVED);
- versions: a patch at the current version applies and bumps it by one; a stale or future
  version is VERSION_CONFLICT and changes nothing; a patch that does not apply is
  PATCH_FAILED and changes nothing, not even the operations before the failing one;
- the refusal table: each code travels in an ErrorInfo of domain ``store.actonce`` with its
  status code (``sidecar.store_contract``), ALREADY_EXISTS for ID_USED alone;
- threads: messages keep posting order (seq from 1), a message posted with its turn
  request and a turn request keyed by the message id are idempotent, a notice takes no turn;
- listing: a kind's artifacts in id order, archived ones included, page by page;
- owners: a create records its request's principal's rule as the owner (GetOwner names it);
  every call whose principal is another rule, without that owner as its granted one, is
  refused FORBIDDEN and changes nothing; a granted owner is reached; data made without a
  principal has no owner and stays reachable;
- with a token: a call without it is refused FORBIDDEN.

Every id the kit writes starts with a prefix of its own run, so it can run against a store
that holds other data; it archives what it made, which is all a store lets it do. Each
check is a function that raises :class:`Broken` with what it saw; the one table
:data:`CHECKS` lists them in the order they print.
"""

from __future__ import annotations

from sidecar.conformance.kit import Answer, Broken, Store, expect, same
from sidecar.conformance.run import CHECKS, Check, check_store, open_channel, run_checks

__all__ = [
    "CHECKS",
    "Answer",
    "Broken",
    "Check",
    "Store",
    "check_store",
    "expect",
    "open_channel",
    "run_checks",
    "same",
]
