"""The webhook over HTTPS: ``POST /inject`` takes an AdmissionReview and answers one
(:func:`sidecar.inject.review.answer`); ``GET /healthz`` answers 200 for the probes.

The Kubernetes API server calls a webhook over TLS alone, checking the certificate against
the configuration's ``caBundle``. The certificate and key are files (a Secret that
cert-manager or a self-generated certificate fills), read again when they change, so a
renewed certificate is served without a restart.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from sidecar.inject.review import Malformed, answer
from sidecar.inject.template import Template

log = structlog.get_logger()

# An object the API server sends is at most ~1.5 MiB (etcd's limit), its review a little more.
MAX_BODY = 4 * 1024 * 1024
PATH = "/inject"


class _Certificates:
    """A server context for the certificate and key files, made again when either changes."""

    def __init__(self, cert: Path, key: Path) -> None:
        self._cert, self._key = cert, key
        self._lock = threading.Lock()
        self._stamp = self._read_stamp()
        self.context = self._context()

    def _read_stamp(self) -> tuple[float, float]:
        return (os.stat(self._cert).st_mtime, os.stat(self._key).st_mtime)

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._cert, self._key)
        context.sni_callback = self._renew
        return context

    def _renew(self, connection: ssl.SSLObject, _name: str | None, _: ssl.SSLContext) -> None:
        # Called in each handshake that names a server (the API server names the Service).
        with self._lock:
            try:
                stamp = self._read_stamp()
                if stamp != self._stamp:
                    self.context = self._context()
                    self._stamp = stamp
                    log.info("inject.certificate_reloaded", cert=str(self._cert))
            except (OSError, ssl.SSLError) as exc:
                # Half-written files (a Secret being updated): keep serving the old pair.
                log.warning("inject.certificate_unreadable", error=str(exc))
            connection.context = self.context


def _handler(template: Template, image: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "actonce-inject"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(HTTPStatus.OK, {"status": "ok"})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path; POST {PATH}"})

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != PATH:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path; POST {PATH}"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._send(HTTPStatus.BAD_REQUEST, {"error": "expected a JSON body"})
                return
            try:
                review = json.loads(self.rfile.read(length))
                reply = answer(review, template, image=image)
            except (ValueError, Malformed) as exc:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            response = reply["response"]
            request = review["request"]
            log.info(
                "inject.reviewed",
                uid=response["uid"],
                namespace=request.get("namespace"),
                pod=(request.get("object") or {}).get("metadata", {}).get("generateName")
                or request.get("name"),
                allowed=response["allowed"],
                patched="patch" in response,
                refusal=response.get("status", {}).get("message"),
            )
            self._send(HTTPStatus.OK, reply)

        def _send(self, status: HTTPStatus, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            # One structured line per review instead (do_POST).
            return

    return Handler


class InjectServer(ThreadingHTTPServer):
    """The webhook on ``listen`` (HOST:PORT), TLS from ``cert`` and ``key``."""

    daemon_threads = True

    def __init__(
        self, listen: str, template: Template, cert: Path, key: Path, image: str | None
    ) -> None:
        host, _, port = listen.rpartition(":")
        self._certificates = _Certificates(cert, key)
        super().__init__((host.strip("[]"), int(port)), _handler(template, image))

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        # The handshake runs in the request's thread, on its first read: a slow client does
        # not hold up the others.
        wrapped = self._certificates.context.wrap_socket(
            connection, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gives up mid-handshake (or a probe that speaks no TLS) is no error
        # of ours: one line, not a traceback.
        log.warning("inject.connection_failed", client=str(client_address[0]))


def serve_inject(listen: str, template: Template, cert: Path, key: Path, image: str | None) -> None:
    server = InjectServer(listen, template, cert, key, image)
    log.info("inject.serving", listen=listen, path=PATH, image=image)
    try:
        server.serve_forever()
    finally:
        server.server_close()
