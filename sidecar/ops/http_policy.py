"""What an HTTP front answers to: the names and origins an operator allows, and its policy.

The rules that read a request against a policy are :mod:`sidecar.ops.http_guard`'s; here
is what a front is configured with (``--mcp-allowed-hosts``, ``--allowed-origins`` and the
like, parsed), and how a Host or Origin header is read against it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sidecar import defaults

JSON = "application/json"
# Names a caller on this host uses; any port.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
DEFAULT_PORTS = {"http": 80, "https": 443}

# The MCP front answers JSON only: nothing of it may be framed, sniffed, kept or referred.
API_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", "default-src 'none'; frame-ancestors 'none'"),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("cache-control", "no-store"),
    ("referrer-policy", "no-referrer"),
)


@dataclass(frozen=True)
class AllowedHost:
    """A name callers use to reach the front: any port, or one."""

    name: str  # lower case; an IPv6 address in brackets
    port: int | None = None

    def matches(self, name: str, port: int | None) -> bool:
        return name == self.name and (self.port is None or port == self.port)


def parse_allowed_hosts(text: str) -> tuple[AllowedHost, ...]:
    """``NAME`` or ``NAME:PORT``, comma-separated (a flag's or a variable's value)."""
    hosts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        split = _split_host(item)
        if split is None or "/" in item or "@" in item:
            raise ValueError(f"{item!r}: expected NAME or NAME:PORT (no scheme, no path)")
        hosts.append(AllowedHost(*split))
    if not hosts:
        raise ValueError("names no host")
    return tuple(hosts)


def parse_allowed_origins(text: str) -> tuple[str, ...]:
    """``http://NAME[:PORT]`` or ``https://...``, comma-separated; each kept normalized."""
    origins = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = _origin_parts(item)
        if parts is None:
            raise ValueError(f"{item!r}: expected SCHEME://NAME[:PORT] (http or https, no path)")
        origins.append(_origin_text(*parts))
    if not origins:
        raise ValueError("names no origin")
    return tuple(origins)


def is_loopback_listen(host: str) -> bool:
    """Whether a front listening on ``host`` is reached from this host alone."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def beyond_loopback_problem(listen: str, hosts: Sequence[AllowedHost], flag: str) -> str | None:
    """What start-up must say when a front listens beyond loopback and allows no name that
    its callers could send there; None when there is nothing to say."""
    host = listen.rpartition(":")[0]
    if is_loopback_listen(host) or hosts:
        return None
    return (
        f"{listen} is not loopback: name the hosts its callers reach it by with {flag} "
        f"(e.g. {flag} actonce.agents.svc.cluster.local); requests naming any other "
        "host are refused"
    )


@dataclass(frozen=True)
class RequestPolicy:
    """What one front takes: the names it answers to, the media types of its writes, its
    limits, and the headers of its answers."""

    hosts: tuple[AllowedHost, ...] = ()
    origins: tuple[str, ...] = ()
    # Media types of the requests that may change something (POST).
    media_types: frozenset[str] = frozenset({JSON})
    max_body_bytes: int = defaults.HTTP_MAX_BODY_BYTES
    max_nesting: int = defaults.HTTP_MAX_NESTING
    headers: tuple[tuple[str, str], ...] = API_HEADERS
    # The flags that widen hosts and origins, named in refusals.
    hosts_flag: str = "--mcp-allowed-hosts"
    origins_flag: str = "--mcp-allowed-origins"
    _origins: frozenset[tuple[str, str, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parsed = (_origin_parts(origin) for origin in self.origins)
        object.__setattr__(self, "_origins", frozenset(p for p in parsed if p is not None))

    def host_allowed(self, value: str) -> bool:
        split = _split_host(value)
        if split is None:
            return False
        name, port = split
        return name in LOOPBACK_NAMES or any(h.matches(name, port) for h in self.hosts)

    def origin_allowed(self, value: str) -> bool:
        parts = _origin_parts(value)
        if parts is None:
            return False
        _scheme, name, port = parts
        if name in LOOPBACK_NAMES or parts in self._origins:
            return True
        # A page served through an allowed name is this front's own page.
        return any(h.matches(name, port) for h in self.hosts)


def _split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's (name, port), lower case; None when it is not NAME[:PORT]."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or_empty = value.partition(":")
        port_text = port_text_or_empty if sep else None
        if not _NAME.fullmatch(name):
            return None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)


_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")


def _origin_parts(value: str) -> tuple[str, str, int] | None:
    """An origin's (scheme, name, port), the port defaulted; None for ``null`` or anything
    that is not SCHEME://NAME[:PORT]."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or parts.path or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    split = _split_host(parts.netloc)
    if split is None:
        return None
    return parts.scheme, split[0], port if port is not None else DEFAULT_PORTS[parts.scheme]


def _origin_text(scheme: str, name: str, port: int) -> str:
    return f"{scheme}://{name}" + ("" if DEFAULT_PORTS[scheme] == port else f":{port}")
