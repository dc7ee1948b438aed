package dev.actonce.client;

import dev.actonce.v1.ToolEffect;

/** What one of the agent's own tool calls does to the world (ADR-111). */
public enum Effect {
  /** Changes nothing; safe to run again. */
  READ_ONLY(ToolEffect.TOOL_EFFECT_READ_ONLY),
  /** Running it again changes nothing more. */
  IDEMPOTENT_WRITE(ToolEffect.TOOL_EFFECT_IDEMPOTENT_WRITE),
  /** Running it again acts again: never re-run when in doubt. */
  NON_IDEMPOTENT_WRITE(ToolEffect.TOOL_EFFECT_NON_IDEMPOTENT_WRITE);

  final ToolEffect proto;

  Effect(ToolEffect proto) {
    this.proto = proto;
  }
}
