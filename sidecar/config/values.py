"""The settings' value parsers: each takes a flag's or a variable's text and returns the value,
or raises ValueError with what was expected (the command line names the setting before it)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exempt(text: str) -> frozenset[str]:
    # Imported when the setting is given: the API token's module brings grpc along.
    from sidecar.ops.auth import parse_exempt

    return parse_exempt(text)


def positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("must be a number of seconds, not nan or inf")
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def at_least(least: int) -> Callable[[str], int]:
    """A parser of whole numbers no smaller than ``least``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise ValueError(f"must be at least {least}")
        return value

    return parse


def listen(text: str) -> str:
    if text.startswith("unix:"):
        if len(text) <= len("unix:"):
            raise ValueError("unix: needs a path")
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT or unix:PATH")
    return text


def host_port(text: str) -> str:
    # An HTTP endpoint (metrics, MCP, the console) cannot take a Unix socket as gRPC can.
    if text.startswith("unix:"):
        raise ValueError("expected HOST:PORT")
    return listen(text)


def dsn(text: str) -> str:
    if not text.startswith(("postgresql://", "postgres://")):
        raise ValueError("expected a postgresql:// DSN")
    return text


def dsn_file(text: str) -> str:
    # A Secret mounted as a file: the DSN, with its password, is in no flag, variable or
    # pod spec. Read at start-up, so that a missing mount stops the sidecar with its path.
    path = readable_file(text)
    try:
        return dsn(path.read_text(encoding="utf-8").strip())
    except ValueError:
        raise ValueError("holds no postgresql:// DSN") from None


def readable_file(text: str) -> Path:
    # Checked at start-up so that a missing Secret mount stops the sidecar with its
    # path named, not at the first store call.
    path = Path(text)
    if not path.is_file():
        raise ValueError("no such file")
    if not os.access(path, os.R_OK):
        raise ValueError("not readable")
    return path


def allowlist(text: str) -> frozenset[str]:
    return frozenset(rule.strip() for rule in text.split(",") if rule.strip())


def rules(text: str) -> frozenset[str]:
    named = allowlist(text)
    if not named:
        # An empty pin would refuse every attempt; unset means "any rule" instead.
        raise ValueError("names no rule (leave it unset to serve any rule)")
    return named


def named(parse_value: Callable[[str], Any]) -> Callable[[str], dict[str, Any]]:
    """Comma-separated NAME=VALUE pairs (a repeated flag's values are joined by commas)."""

    def parse(text: str) -> dict[str, Any]:
        pairs: dict[str, Any] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            if not sep or not name or "__" in name:
                raise ValueError(f"{item!r}: expected NAME=VALUE, NAME without '__'")
            if name in pairs:
                raise ValueError(f"{name} is named twice")
            pairs[name] = parse_value(value)
        return pairs

    return parse


def http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL (Streamable HTTP)")
    return text


def id_scheme(text: str) -> int:
    if text not in ("1", "2", "3"):
        raise ValueError("expected 1, 2 or 3")
    return int(text)


def trace_url_template(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    if "{trace_id}" not in value:
        raise ValueError("names no {trace_id}")
    return value


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def header_name(text: str) -> str:
    if not _TOKEN.fullmatch(text):
        raise ValueError("expected an HTTP header's name, such as X-Forwarded-Email")
    return text.lower()


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return text

    return parse
