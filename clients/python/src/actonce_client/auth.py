"""The API token a sidecar started with ``--api-token-file`` asks every call for.

The client sends it as ``authorization: Bearer <token>``. It comes from, in this order:
the ``api_token`` or ``api_token_file`` given to the client, the file named by
``ACTONCE_API_TOKEN_FILE``, the value of ``ACTONCE_API_TOKEN``; with none of them, no
token is sent. A token that cannot work (a file that cannot be read, an empty token) is
:class:`~actonce_client.errors.InvalidSetting` naming where it came from. A file is read
again at most once a second, so that a Secret rotated in place is followed without a
restart (the sidecar takes the token it held before for a few seconds more); a file that
cannot be read then keeps the token read last.

An attempt's calls also send the attempt's capability, when the sidecar issued one
(``--agent-capabilities``), as ``actonce-attempt-capability``: an agent that its harness
handed one attempt sends that alone, and needs no token.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from actonce_client.errors import InvalidSetting

CAPABILITY_HEADER = "actonce-attempt-capability"
"""Where a call carries the capability of the attempt it names."""
TOKEN_FILE_VARIABLE = "ACTONCE_API_TOKEN_FILE"
TOKEN_VARIABLE = "ACTONCE_API_TOKEN"
REREAD_SECONDS = 1.0


def _checked(token: str, source: str, setting: str) -> str:
    token = token.strip()
    if not token:
        raise InvalidSetting(setting, f"the API token from {source} is empty")
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in token):
        # It travels as an HTTP/2 header value, which cannot hold these.
        raise InvalidSetting(
            setting, f"the API token from {source} holds whitespace, control or non-ASCII"
        )
    return token


class ApiToken:
    """A token given as it is, or one read from a file and followed as it changes."""

    def __init__(
        self,
        *,
        value: str | None = None,
        path: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        setting: str = "",
    ) -> None:
        """``setting`` names where the value or the path came from (the option or the
        environment variable), for the error a token that cannot work raises."""
        if (value is None) == (path is None):
            raise ValueError("an API token is either a value or a file")
        self._path = Path(path) if path is not None else None
        self._clock = clock
        self._lock = threading.Lock()
        self._setting = setting or ("api_token" if path is None else "api_token_file")
        if value is not None:
            self._value = _checked(value, "the client's api_token", self._setting)
        if self._path is not None:
            self._value = self._first_read(self._path)
        self._read_at = clock()

    def _first_read(self, path: Path) -> str:
        try:
            return self._read(path)
        except OSError as exc:
            raise InvalidSetting(
                self._setting, f"the API token file {path} cannot be read: {exc.strerror or exc}"
            ) from None

    def _read(self, path: Path) -> str:
        text = path.read_text(encoding="utf-8", errors="replace")
        return _checked(text, f"the file {path}", self._setting)

    @classmethod
    def resolve(
        cls,
        value: str | None = None,
        path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> ApiToken | None:
        """The token the client's options, else its environment, name; None for none."""
        if value is not None or path is not None:
            return cls(value=value, path=path)
        if environ.get(TOKEN_FILE_VARIABLE):
            return cls(path=environ[TOKEN_FILE_VARIABLE], setting=TOKEN_FILE_VARIABLE)
        if environ.get(TOKEN_VARIABLE):
            return cls(value=environ[TOKEN_VARIABLE], setting=TOKEN_VARIABLE)
        return None

    def value(self) -> str:
        """The token to send now."""
        if self._path is not None and self._clock() - self._read_at >= REREAD_SECONDS:
            with self._lock:
                self._read_at = self._clock()
                # A Secret caught mid-update: the last token stays.
                with contextlib.suppress(OSError, ValueError):
                    self._value = self._read(self._path)
        return self._value

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that carries it."""
        return (("authorization", f"Bearer {self.value()}"),)

    def __repr__(self) -> str:  # never the token itself
        return f"ApiToken(path={str(self._path)!r})" if self._path else "ApiToken(value=...)"


def call_metadata(
    token: ApiToken | None, capability: str = ""
) -> tuple[tuple[str, str], ...] | None:
    """A call's metadata: the token when there is one, the attempt's capability when the
    call is an attempt's that has one; None for neither."""
    metadata = token.metadata() if token is not None else ()
    if capability:
        metadata = (*metadata, (CAPABILITY_HEADER, capability))
    return metadata or None
