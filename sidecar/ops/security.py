"""How the sidecar reaches its upstream store safely, and how the reference store checks it.

- TLS to the store when given a CA (``--store-tls-ca``); mutual TLS when also given
  a client certificate and key (``--store-tls-cert``, ``--store-tls-key``).
- A bearer token read from a file (``--store-token-file``), never from a flag's value:
  a flag's value shows in ``ps``, in the pod spec and in shell history; a file mounted
  from a Secret shows nowhere. The token is kept in no Config field, log line or repr.
- The reference store's side of the same: server credentials from a certificate and
  key, and client certificates required when given a client CA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

log = structlog.get_logger()

CHANNEL_OPTIONS: Sequence[tuple[str, int]] = (
    # As the store's own limit: artifacts are whole JSON documents.
    ("grpc.max_receive_message_length", 16 << 20),
    ("grpc.max_send_message_length", 16 << 20),
    # gRPC's reconnect backoff grows to two minutes by default: after a long store outage
    # every write would stay STORE_UNAVAILABLE for up to that long after the store is back.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class SecuritySettingError(OSError):
    """A certificate, key or token file that cannot be used; the message names it.

    An OSError, as a file that cannot be read is: start-up stops on it with one line.
    """


@dataclass(frozen=True)
class StoreTls:
    """Files for TLS to the store: the CA that signed its certificate (the system's
    roots when None), and our own certificate and key for mutual TLS."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


def store_tls(ca: Path | None, cert: Path | None, key: Path | None) -> StoreTls | None:
    """TLS settings when any file is named; None (plaintext) when none is."""
    if ca is None and cert is None and key is None:
        return None
    return StoreTls(ca, cert, key)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SecuritySettingError(f"cannot read {what} {path}: {exc.strerror}") from None


def read_token(path: Path, what: str = "the store token file") -> str:
    """The bearer token in ``path``, without the newline an editor or ``echo`` leaves;
    ``what`` names the file in the one line that says why it cannot be used."""
    token = _read(path, what).decode("utf-8", "replace").strip()
    if not token:
        raise SecuritySettingError(f"{what} {path} is empty")
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in token):
        # It travels as an HTTP/2 header value, which cannot hold these.
        raise SecuritySettingError(f"{what} {path} holds whitespace, control or non-ASCII bytes")
    return token


def channel_credentials(tls: StoreTls) -> grpc.ChannelCredentials:
    """TLS credentials for the channel to the store; mutual TLS when ``tls`` has a pair."""
    if (tls.cert is None) != (tls.key is None):
        raise SecuritySettingError("a client certificate and its key go together")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca, "the store's CA") if tls.ca else None,
        private_key=_read(tls.key, "the client key") if tls.key else None,
        certificate_chain=_read(tls.cert, "the client certificate") if tls.cert else None,
    )


def is_local(target: str) -> bool:
    """Whether ``target`` is on this machine: a Unix socket, or a loopback address."""
    if target.startswith("unix:"):
        return True
    host = target.rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def server_credentials(
    cert: Path, key: Path, client_ca: Path | None = None
) -> grpc.ServerCredentials:
    """TLS for the reference store; with ``client_ca``, only clients it signed get in."""
    return grpc.ssl_server_credentials(
        [(_read(key, "the server key"), _read(cert, "the server certificate"))],
        root_certificates=_read(client_ca, "the client CA") if client_ca else None,
        require_client_auth=client_ca is not None,
    )
