"""The console's sessions: who signed in, with which token, and for how long.

A session is a cookie Starlette signs (SessionMiddleware). Signed in, it keeps which token
it signed in with (the operator's or the API token) as that token's HMAC under a key of
this console, and when. It stops letting its browser in

- when that token is no longer the one in force: an API token rotated in place (its
  file, followed by sidecar.ops.auth.TokenFile) ends every session signed in with it,
  at once, even while the old token is still taken for a few seconds from callers;
- :data:`MAX_SESSION_SECONDS` after it signed in, however busy (the cookie is signed
  again on every answer, so its own age says nothing of the sign-in's);
- when its browser signs out (``POST /sign-out``, with the form token every POST has).

The HMAC, not the token: the cookie is signed, not encrypted, and its holder can read it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.ops.auth import TokenFile

# A session signed in lasts this long at most, then its operator signs in again.
MAX_SESSION_SECONDS = 12 * 3600

# Session keys: the fingerprint of the operator's token, or of the API token, it signed in
# with; when; and the form token of the browser's POSTs.
SIGNED_IN = "signed_in"
API_SIGNED_IN = "api_signed_in"
SIGNED_AT = "signed_at"
CSRF = "csrf"

Session = MutableMapping[str, Any]


@dataclass
class Sessions:
    """Signing sessions in and out, and telling whether one is still signed in."""

    operator_token: str | None
    api_token: TokenFile | None
    # The fingerprints' key: this console's own, so a fingerprint means nothing elsewhere.
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    clock: Callable[[], float] = time.time

    def sign_in(self, session: Session, *, operator: bool) -> None:
        """Sign ``session`` in with the operator's token (or else the API token), which
        the caller checked. What it held before goes, but its form token, which the
        browser's open pages still carry."""
        form_token = session.get(CSRF)
        session.clear()
        session[CSRF] = form_token if isinstance(form_token, str) else secrets.token_urlsafe(32)
        session[SIGNED_AT] = int(self.clock())
        if operator:
            session[SIGNED_IN] = self._operator_print()
        else:
            session[API_SIGNED_IN] = self._api_print()

    @staticmethod
    def sign_out(session: Session) -> None:
        session.clear()

    def operator(self, session: Session) -> bool:
        """Whether ``session`` is signed in with the operator's token now in force."""
        given = session.get(SIGNED_IN)
        return self._current(session) and _same(given, self._operator_print())

    def api(self, session: Session) -> bool:
        """Whether ``session`` is signed in with the API token now in force."""
        given = session.get(API_SIGNED_IN)
        return self._current(session) and _same(given, self._api_print())

    def _current(self, session: Session) -> bool:
        signed_at = session.get(SIGNED_AT)
        if not isinstance(signed_at, int):
            return False
        return 0 <= self.clock() - signed_at < MAX_SESSION_SECONDS

    def _operator_print(self) -> str | None:
        token = self.operator_token
        if token is None:
            return None
        return hmac.new(self.key, token.encode(), hashlib.sha256).hexdigest()

    def _api_print(self) -> str | None:
        return self.api_token.fingerprint(self.key) if self.api_token is not None else None


def _same(given: object, expected: str | None) -> bool:
    return (
        expected is not None
        and isinstance(given, str)
        and hmac.compare_digest(given.encode(), expected.encode())
    )
