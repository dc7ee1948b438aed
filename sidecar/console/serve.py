"""``actonce console``: serve the web console over a ledger with uvicorn."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path
from typing import Any

import structlog
import uvicorn

from sidecar import defaults
from sidecar.console.app import create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import LedgerError
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ops import auth

log = structlog.get_logger()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token(path: Path | None) -> str | None:
    if path is None:
        return None
    token = path.read_text(encoding="utf-8", errors="replace").strip()
    if not token:
        raise ValueError(f"the console token file {path} is empty")
    return token


def run_console(values: dict[str, Any]) -> int:
    host, _, port = str(values["listen"]).rpartition(":")
    try:
        token = _token(values.get("token_file"))
        api_token = auth.load(values.get("api_token_file"))
    except (OSError, ValueError) as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    if token is None and not _loopback(host):
        print(
            f"actonce: error: --listen {values['listen']} is not loopback: the console serves "
            "beyond loopback only with --token-file",
            file=sys.stderr,
        )
        return 2
    audit_db = values.get("audit_db") or defaults.DATA_DIR / "audit.db"
    try:
        ledger = open_operator_ledger(audit_db, values.get("audit_dsn"))
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    chain = ChainWatch(lambda: open_reader({**values, "audit_db": audit_db}))
    chain.start()
    app = create_app(
        ledger,
        token=token,
        chain=chain,
        trace_url_template=values.get("trace_url_template"),
        api_token=api_token,
    )
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        print(f"actonce: error: cannot listen on {values['listen']}: {exc.strerror}",
              file=sys.stderr)  # fmt: skip
        return 2
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_config=None, access_log=False, proxy_headers=False, server_header=False
        )
    )
    bound = sock.getsockname()[1]
    log.info("console_serving", url=f"http://{values['listen'].rsplit(':', 1)[0]}:{bound}")
    try:
        server.run(sockets=[sock])
    finally:
        chain.stop()
        ledger.close()
    return 0
