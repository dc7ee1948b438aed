"""A key the caller chooses, over the MCP front, from the MCP SDK's own Python client: a
create whose data holds a timestamp lands once across a redelivery to another sidecar
process when it names a key; the same key with other data in one attempt is a tool error
KEY_REUSED that changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.store_snapshot import StoreSnapshot, read_postgres_store, read_sqlite_store
from sidecar.config.serve import Config
from tests.conftest import MakeConfig
from tests.fronts.mcp.clients import begin_over_http, call, list_tools
from tests.harness import free_port, spawn_sidecar


def _store(config: Config) -> StoreSnapshot:
    if config.store_dsn:
        return read_postgres_store(config.store_dsn)
    return read_sqlite_store(config.store_path)


def _order(at: str, order: str = "o-1") -> dict[str, Any]:
    return {"order": order, "amount": 120, "sent_at": at}


def test_a_keyed_create_lands_once_across_a_redelivery_and_a_reused_key_is_refused(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    port = free_port()
    flags = ("--mcp-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/mcp"
    first = spawn_sidecar(config, tmp_path / "first.log", *flags)
    try:
        schema = {t.name: t.input_schema for t in list_tools(url)}
        assert schema["create"]["properties"]["key"]["type"] == "string"
        assert "key" not in schema["create"]["required"]
        assert "key" in schema["create_thread"]["properties"]
        attempt = begin_over_http(url.removesuffix("/mcp"), "run-mcp-k")
        made, thread = call(
            url, attempt,
            ("create", {"kind": "order", "data": _order("05:40:00"), "key": "order-o-1"}),
            ("create_thread", {"title": "Order o-1", "key": "order-o-1"}),
        )  # fmt: skip
    finally:
        first.stop()  # the delivery dies; the queue redelivers the run
    assert made.structured_content["outcome"] == "OUTCOME_APPLIED"
    order_id = made.structured_content["id"]
    second = spawn_sidecar(config, tmp_path / "second.log", *flags)
    try:
        attempt = begin_over_http(url.removesuffix("/mcp"), "run-mcp-k")
        again, thread_again = call(
            url, attempt,
            ("create", {"kind": "order", "data": _order("05:47:13"), "key": "order-o-1"}),
            ("create_thread", {"title": "Order o-1", "key": "order-o-1"}),
        )  # fmt: skip
        before = _store(config)
        reused = call(
            url, attempt,
            ("create", {"kind": "order", "data": _order("05:47:13", "o-2"), "key": "order-o-1"}),
        )[0]  # fmt: skip
        after = _store(config)
    finally:
        second.stop()
    said = again.structured_content
    assert (said["outcome"], said["id"]) == ("OUTCOME_ALREADY_APPLIED", order_id)
    assert thread_again.structured_content["id"] == thread.structured_content["id"]
    orders = [a for a in after.artifacts.values() if a[0] == "order"]
    assert len(orders) == 1 and '"05:40:00"' in orders[0][2]
    assert reused.is_error
    refusal = reused.structured_content
    assert (refusal["reason"], refusal["failure_class"]) == ("KEY_REUSED", "REFUSED")
    assert refusal["metadata"] == {"key": "order-o-1", "id": order_id}
    assert "choose another key" in refusal["message"]
    assert after.artifacts == before.artifacts
