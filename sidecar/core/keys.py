"""A key the caller chooses: the data a key names in an attempt, and the refusal of its reuse.

A write named by a key (scheme version 3, docs/derived-ids.md) derives its id from the key,
not from its data: the key names the write. A later attempt of the run (a redelivery) that
makes it again finds the same write, whatever its data holds now (a timestamp, a uuid drawn
again): the sidecar cannot tell a timestamp from any other change, and the redelivery is
what the key is for. Within one attempt the same key with other data is not a redelivery:
the caller named two writes by one key, and the second is refused KEY_REUSED before
anything is done, as Stripe answers a reused Idempotency-Key with another payload.
"""

from __future__ import annotations

from sidecar.core.attempts import Attempt
from sidecar.errors import KeyReused


def bind(attempt: Attempt, *, key: str, derived_id: str, digest: str) -> None:
    """Bind ``key`` (whose id is ``derived_id``) to the data of ``digest`` for the rest of
    ``attempt``, or refuse KEY_REUSED when the attempt bound it to other data. Called before
    anything is awaited, so that two calls at once see each other."""
    bound = attempt.keys.setdefault(derived_id, digest)
    if bound != digest:
        raise KeyReused(key=key, derived_id=derived_id)
