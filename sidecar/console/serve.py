"""``actonce console``: serve the web console over a ledger with uvicorn."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import structlog
import uvicorn

from sidecar import defaults
from sidecar.console.app import console_policy, create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import LedgerError
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ops import auth
from sidecar.ops.http_guard import beyond_loopback_problem, is_loopback_listen
from sidecar.ops.http_server import server_config

log = structlog.get_logger()


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
    if token is None and not is_loopback_listen(host):
        print(
            f"actonce: error: --listen {values['listen']} is not loopback: the console serves "
            "beyond loopback only with --token-file",
            file=sys.stderr,
        )
        return 2
    hosts = values.get("allowed_hosts") or ()
    problem = beyond_loopback_problem(str(values["listen"]), hosts, "--allowed-hosts")
    if problem is not None:
        print(f"actonce: error: --listen {problem}", file=sys.stderr)
        return 2
    audit_db = values.get("audit_db") or defaults.DATA_DIR / "audit.db"
    try:
        # On SQLite the console signs each decision with the operator key, as the CLI does.
        ledger = open_operator_ledger(
            audit_db, values.get("audit_dsn"), operator_key=values.get("operator_key")
        )
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
        policy=console_policy(hosts, values.get("allowed_origins") or ()),
        operator_header=values.get("operator_header"),
        api_token=api_token,
    )
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        print(
            f"actonce: error: cannot listen on {values['listen']}: {exc.strerror}", file=sys.stderr
        )
        return 2
    server = uvicorn.Server(server_config(app))
    bound = sock.getsockname()[1]
    log.info("console_serving", url=f"http://{values['listen'].rsplit(':', 1)[0]}:{bound}")
    try:
        server.run(sockets=[sock])
    finally:
        chain.stop()
        ledger.close()
    return 0
