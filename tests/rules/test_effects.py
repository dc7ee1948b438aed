"""Effects: the built-in tools' fixed effects, and a safe default for every other name."""

from __future__ import annotations

import pytest

from sidecar.rules import effects


def test_builtin_effects_are_fixed_and_unknown_names_are_non_idempotent() -> None:
    assert effects.effect_for("Read") is effects.ToolEffect.READ_ONLY
    assert effects.effect_for("Create") is effects.ToolEffect.IDEMPOTENT_WRITE
    assert effects.effect_for("send_email") is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    assert effects.declared(0) is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    assert effects.declared(99) is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    with pytest.raises(TypeError):
        effects.BUILTIN_EFFECTS["Create"] = effects.ToolEffect.READ_ONLY  # type: ignore[index]
