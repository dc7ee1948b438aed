/**
 * The key of a durable model turn: what was asked. The same form as the Python client's,
 * so that a run whose first delivery a Python worker made can be continued by a
 * TypeScript one and find its recorded turns.
 */

/** The role a model's own answer has in a request's messages. */
const ASSISTANT = new Set(["assistant", "ai"]);

/** A turn's index in the run: the model's own answers the request already holds. */
export function turnIndex(messages: readonly { role?: unknown; type?: unknown }[]): number {
  return messages.filter((m) => ASSISTANT.has(String(m.role ?? m.type ?? ""))).length;
}

/** The key a turn is recorded under: which model (its name in the agent), and the turn's
 * index in the run. */
export function turnKey(name: string, messages: readonly { role?: unknown; type?: unknown }[]): Record<string, unknown> {
  return { model: name, turn: turnIndex(messages) };
}
