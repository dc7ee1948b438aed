/**
 * The key of a durable model turn: what was asked (docs/model-turns.md). The same form as
 * the Python client's, checked against the shared vectors of docs/model-turn-vectors.json,
 * so that a run whose first delivery a Python worker made can be continued by a TypeScript
 * one and find its recorded turns.
 *
 *     {"form": 1, "model": <the turn's name>, "request": <digest of the request>}
 *
 * The digest is the lowercase hex SHA-256 of the RFC 8785 canonical JSON of the request in
 * the neutral form: `{"messages": [...], "tools": [...]}`, each message `{role, content}`,
 * an assistant's tool calls as `{name, arguments}` (never their ids), a tool result only
 * `{role: "tool", call}`, the position of the call it answers (what it says is left out: a
 * redelivery may hear it otherwise), the tools ordered by name.
 */
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";

/** The version of the key's form (docs/model-turns.md). */
export const KEY_FORM = 1;

/** A tool call in the neutral form: its name and arguments, never its id. */
export interface NeutralToolCall {
  name: string;
  arguments: unknown;
}

/** A message in the neutral form. */
export interface NeutralMessage {
  role: string;
  /** The message's text; a `tool` message has none: what a result says is not in the key. */
  content?: string;
  tool_calls?: NeutralToolCall[];
  /** A tool result's: the position of the call it answers among the request's calls, or null. */
  call?: number | null;
  parts?: unknown[];
}

/** A message in the neutral form that still carries its framework's ids: an assistant's
 * calls' (`callIds`, in order) or a tool result's (`callId`), which `answeredCalls` turns into
 * positions. */
export type SourcedMessage = NeutralMessage & { callIds?: readonly string[]; callId?: string };

/** A tool offered, in the neutral form. */
export interface NeutralTool {
  name: string;
  description: string;
  parameters: unknown;
}

/** A request in the neutral form. */
export interface NeutralRequest {
  messages: NeutralMessage[];
  tools: NeutralTool[];
}

/**
 * A value as the neutral form holds it: JSON, where an integer beyond 2^53 is the double
 * nearest to it, NaN and infinities are null, members that are undefined are left out, and
 * any other value that is not JSON is its text.
 */
export function neutralValue(value: unknown): unknown {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value === "bigint") return Number(value);
  if (Array.isArray(value)) return value.map((item) => (item === undefined ? null : neutralValue(item)));
  if (typeof value === "object" && (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) {
    const out: Record<string, unknown> = {};
    for (const [key, member] of Object.entries(value)) {
      if (member !== undefined && typeof member !== "function") out[key] = neutralValue(member);
    }
    return out;
  }
  return String(value);
}

/** Arguments held as JSON text are parsed; text that is not JSON stays a string. */
export function parsedArguments(args: unknown): unknown {
  if (typeof args !== "string") return args;
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

/** A request's canonical JSON (RFC 8785), its tools ordered by name, then by their own canonical JSON. */
export function canonicalRequest(request: NeutralRequest): string {
  const tools = request.tools
    .map((tool) => neutralValue(tool) as NeutralTool)
    .map((tool) => ({ tool, text: canonicalize(tool) ?? "" }))
    .sort((a, b) => compare(a.tool.name, b.tool.name) || compare(a.text, b.text))
    .map(({ tool }) => tool);
  const text = canonicalize({ messages: neutralValue(request.messages), tools });
  if (text === undefined) throw new TypeError("the request has no canonical JSON");
  return text;
}

/** UTF-16 code-unit order, as RFC 8785 orders members. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The lowercase hex SHA-256 of a request's canonical JSON. */
export function requestDigest(request: NeutralRequest): string {
  return createHash("sha256").update(canonicalRequest(request), "utf8").digest("hex");
}

/** The key a turn of the model named `name` is recorded under, for `request`. */
export function turnKey(name: string, request: NeutralRequest): { form: number; model: string; request: string } {
  return { form: KEY_FORM, model: name, request: requestDigest(request) };
}

/**
 * Tool results' `call`: the position of the call each answers, matched to the first call
 * with its framework id that no earlier result answered; null for an id that names no call.
 * Give it the request's messages with each tool result's framework id in `callId`.
 */
export function answeredCalls(messages: readonly SourcedMessage[]): NeutralMessage[] {
  const calls: string[] = [];
  const answered = new Set<number>();
  return messages.map(({ callIds, callId, ...message }) => {
    if (message.role === "assistant") {
      (message.tool_calls ?? []).forEach((_, i) => calls.push(callIds?.[i] ?? ""));
      return message;
    }
    if (message.role !== "tool") return message;
    let position: number | null = null;
    for (let i = 0; i < calls.length; i++) {
      if (callId !== undefined && calls[i] === callId && !answered.has(i)) {
        position = i;
        answered.add(i);
        break;
      }
    }
    return { ...message, call: position };
  });
}
