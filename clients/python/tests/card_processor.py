"""A fake card processor: a small real HTTP service that charges cards, with
idempotency keys as card processors have them.

POST /charges {"customer", "cents"}, header Idempotency-Key (optional): a key
seen before answers the charge it made, and charges nothing. A customer whose
name ends in "-reset" has the first request of each key charged, then its
connection reset before any answer: "charged, then the connection reset".
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Ledger:
    charges: list[dict[str, Any]] = field(default_factory=list)
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def charges_of(self, customer: str) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.charges if c["customer"] == customer]


class _Handler(BaseHTTPRequestHandler):
    ledger: Ledger

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Idempotency-Key")
        with self.ledger.lock:
            charge = self.ledger.by_key.get(key) if key else None
            reset = False
            if charge is None:
                charge = {"id": f"ch_{len(self.ledger.charges) + 1}", "key": key,
                          "customer": body["customer"], "cents": body["cents"]}  # fmt: skip
                self.ledger.charges.append(charge)
                if key:
                    self.ledger.by_key[key] = charge
                reset = body["customer"].endswith("-reset")
        if reset:
            self.close_connection = True
            self.connection.shutdown(2)  # charged, and the caller never hears of it
            return
        answer = json.dumps(charge).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def card_processor() -> Iterator[tuple[str, Ledger]]:
    """A running processor on a free loopback port: its URL, and its ledger."""
    ledger = Ledger()
    handler = type("Handler", (_Handler,), {"ledger": ledger})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", ledger
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def charge(url: str, customer: str, cents: int, idempotency_key: str | None) -> str:
    """Charge through the processor's API; the charge's id."""
    headers = {"Content-Type": "application/json"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    request = urllib.request.Request(
        f"{url}/charges", json.dumps({"customer": customer, "cents": cents}).encode(), headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        charge_id: str = json.loads(response.read())["id"]
        return charge_id


async def charge_async(url: str, customer: str, cents: int, idempotency_key: str | None) -> str:
    """:func:`charge` from async code (its request made off the event loop)."""
    return await asyncio.to_thread(charge, url, customer, cents, idempotency_key)
