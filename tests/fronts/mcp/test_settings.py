"""The MCP settings stop ``actonce serve`` with one line when they cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.fronts.mcp.settings import ToolSpec, load_effects, read_headers
from sidecar.rules.effects import ToolEffect
from tests.server.processes import run_cli


def test_the_gateway_needs_the_front_and_a_usable_effects_file(tmp_path: Path) -> None:
    alone = run_cli("serve", "--mcp-upstream", "payments=http://127.0.0.1:1/mcp")
    assert alone.returncode == 2
    assert "--mcp-upstream needs --mcp-listen" in alone.stderr
    bad = tmp_path / "effects.json"
    bad.write_text('{"payments__charge": "TOOL_EFFECT_SOMETIMES"}')
    refused = run_cli(
        "serve", "--mcp-listen", "127.0.0.1:0", "--mcp-upstream", "payments=http://127.0.0.1:1/mcp",
        "--tool-effects", str(bad),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "TOOL_EFFECT_SOMETIMES" in refused.stderr and len(refused.stderr.splitlines()) == 1
    unnamed = run_cli("serve", "--mcp-listen", "127.0.0.1:0", "--mcp-upstream", "payments=ftp://x")
    assert unnamed.returncode == 2 and "--mcp-upstream" in unnamed.stderr


def test_effects_read_from_yaml_or_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "effects.yaml"
    yaml_file.write_text(
        "payments__charge: TOOL_EFFECT_NON_IDEMPOTENT_WRITE\npayments__balance: TOOL_EFFECT_READ_ONLY\n"
    )
    assert load_effects(yaml_file) == {
        "payments__charge": ToolSpec(ToolEffect.NON_IDEMPOTENT_WRITE),
        "payments__balance": ToolSpec(ToolEffect.READ_ONLY),
    }
    json_file = tmp_path / "effects.json"
    json_file.write_text('{"mail__send": "TOOL_EFFECT_UNSPECIFIED"}')
    assert load_effects(json_file) == {"mail__send": ToolSpec(ToolEffect.NON_IDEMPOTENT_WRITE)}
    with pytest.raises(ValueError, match="NAME__tool"):
        load_effects_text(tmp_path, '{"charge": "TOOL_EFFECT_READ_ONLY"}')


def test_an_effect_may_be_an_object_naming_the_key_and_what_errors_mean(tmp_path: Path) -> None:
    path = tmp_path / "effects.yaml"
    path.write_text(
        "payments__charge: TOOL_EFFECT_NON_IDEMPOTENT_WRITE\n"
        "payments__charge_keyed:\n"
        "  effect: TOOL_EFFECT_NON_IDEMPOTENT_WRITE\n"
        "  idempotency_key: {argument: idempotency_key}\n"
        "payments__refund:\n"
        "  effect: TOOL_EFFECT_NON_IDEMPOTENT_WRITE\n"
        "  idempotency_key: {meta: payments/key}\n"
        "mail__send:\n"
        "  effect: TOOL_EFFECT_NON_IDEMPOTENT_WRITE\n"
        "  errors_mean_nothing_happened: true\n"
    )
    specs = load_effects(path)
    assert specs["payments__charge"] == ToolSpec(ToolEffect.NON_IDEMPOTENT_WRITE)
    keyed = specs["payments__charge_keyed"]
    assert keyed.key_argument == "idempotency_key" and keyed.keyed
    # A write that takes its key is sent again with it: its steps are idempotent.
    assert keyed.step_effect is ToolEffect.IDEMPOTENT_WRITE
    assert specs["payments__refund"].key_meta == "payments/key"
    mail = specs["mail__send"]
    assert mail.errors_mean_nothing_happened and mail.step_effect is ToolEffect.NON_IDEMPOTENT_WRITE


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a__b": {"effect": "TOOL_EFFECT_READ_ONLY", "colour": 1}}', "unknown keys"),
        ('{"a__b": {"idempotency_key": {"argument": "k"}}}', "name its effect"),
        ('{"a__b": {"effect": "TOOL_EFFECT_READ_ONLY", "idempotency_key": {"header": "k"}}}',
         "idempotency_key"),
        ('{"a__b": {"effect": "TOOL_EFFECT_READ_ONLY", "idempotency_key": {"argument": ""}}}',
         "non-empty"),
        ('{"a__b": {"effect": "TOOL_EFFECT_READ_ONLY", "errors_mean_nothing_happened": "yes"}}',
         "true or false"),
    ],
)  # fmt: skip
def test_a_malformed_effect_object_is_refused_with_what_is_wrong(
    tmp_path: Path, text: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        load_effects_text(tmp_path, text)


def test_headers_are_read_one_a_line(tmp_path: Path) -> None:
    path = tmp_path / "headers"
    path.write_text("# the payments token\nAuthorization: Bearer abc\nX-Tenant: t1\n")
    assert read_headers(path) == {"Authorization": "Bearer abc", "X-Tenant": "t1"}
    path.write_text("no colon here\n")
    with pytest.raises(ValueError, match=":1"):
        read_headers(path)


def load_effects_text(tmp_path: Path, text: str) -> dict[str, ToolSpec]:
    path = tmp_path / "more.json"
    path.write_text(text)
    return load_effects(path)
