/**
 * MCP tools through actonce's MCP front or gateway (`@actonce/client/mcp`), each tool call in
 * its own scope of the delivery: the counterpart of the Python client's `mcp_scope()`.
 *
 *     const mcp = new McpClient({ name: "agent", version: "1" });
 *     await mcp.connect(new StreamableHTTPClientTransport(new URL(frontUrl), { fetch: scopedFetch() }));
 *     // inside a tool of the delivery, with the framework's tool-call id:
 *     const result = await callTool(mcp, toolCallId, { name: "payments__charge", arguments });
 *
 * The MCP TypeScript SDK sets headers per connection; `scopedFetch()` sets them per request
 * instead, from the tool call the request is made for: `actonce-attempt-id` (the delivery)
 * and `actonce-scope` (the tool call's id), so one connection serves every tool call. An
 * error the front answers (an `isError` result naming its reason and class) is thrown as an
 * `ActonceError` and ends the delivery (one in doubt parks it, `Parked`), except a
 * refusal, which goes back to the model as the tool's result. An upstream tool's own error answer is
 * the upstream's, returned as it is.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { status } from "@grpc/grpc-js";

import { currentDelivery } from "./deliveries.js";
import { ActonceError, type FailureClass } from "./errors.js";

/** The header naming the attempt a call is made in: with `actonce-scope`, the delivery's. */
export const ATTEMPT_HEADER = "actonce-attempt-id";
/** The header naming the tool call's scope in the delivery. */
export const SCOPE_HEADER = "actonce-scope";

interface Scope {
  attemptId: string;
  scope: string;
}

const scoped = new AsyncLocalStorage<Scope>();

/**
 * A `fetch` for the MCP SDK's HTTP transport (`StreamableHTTPClientTransport`'s `fetch`
 * option) that sends each request made inside `inScope` (as `callTool` makes them) with that
 * tool call's headers; every other request as it is.
 */
export function scopedFetch(base: typeof fetch = fetch): typeof fetch {
  return (input, init) => {
    const scope = scoped.getStore();
    if (scope === undefined) return base(input, init);
    const headers = new Headers(init?.headers);
    headers.set(ATTEMPT_HEADER, scope.attemptId);
    headers.set(SCOPE_HEADER, scope.scope);
    return base(input, { ...init, headers });
  };
}

/** Run `body` with its MCP requests sent in `scope` of the attempt `attemptId` (through `scopedFetch`). */
export function inScope<T>(attemptId: string, scope: string, body: () => Promise<T>): Promise<T> {
  return scoped.run({ attemptId, scope }, body);
}

/** What `callTool` needs of the MCP SDK's `Client`. */
export interface McpCaller<R> {
  callTool(params: { name: string; arguments?: Record<string, unknown> }, ...rest: never[]): Promise<R>;
}

/**
 * Call an MCP tool of the front in the tool call `toolCallId`'s scope of the current
 * delivery. A front's refusal is returned (the model can correct the call); any other error
 * of the front is thrown as an `ActonceError` and ends the delivery (`Delivery.fail`): one in
 * doubt parks it.
 */
export async function callTool<R>(
  client: McpCaller<R>,
  toolCallId: string,
  params: { name: string; arguments?: Record<string, unknown> },
): Promise<R> {
  const delivery = currentDelivery();
  if (delivery === undefined || !toolCallId) {
    throw new Error("an actonce-scoped MCP tool call runs in a tool call of a delivery, under deliver()");
  }
  delivery.requireTurns();
  const result = await inScope(delivery.attempt.id, toolCallId, () => client.callTool(params));
  const error = frontError(result);
  if (error === undefined || error.refused) return result;
  // Not the model's to correct: it ends the delivery, whatever the framework does with it.
  delivery.fail(error);
  throw error;
}

const CLASSES: readonly string[] = ["REFUSED", "RETRYABLE", "PERMANENT", "UNKNOWN"];

/**
 * The actonce error an MCP tool result answers (the front's `isError` result: its reason,
 * class and metadata), or undefined for a result, or an upstream tool's own error that the
 * gateway passed on.
 */
export function frontError(result: unknown): ActonceError | undefined {
  const found = result as {
    isError?: unknown;
    _meta?: Record<string, unknown>;
    structuredContent?: Record<string, unknown>;
  } | null;
  if (found === null || typeof found !== "object" || found.isError !== true) return undefined;
  if (found._meta !== undefined && "actonce/outcome" in found._meta) return undefined;
  const said = found.structuredContent;
  if (said === undefined || typeof said !== "object" || typeof said["reason"] !== "string") return undefined;
  const failureClass = String(said["failure_class"]);
  if (!CLASSES.includes(failureClass)) return undefined;
  const given = said["metadata"];
  const metadata: Record<string, string> = {};
  if (given !== null && typeof given === "object") {
    for (const [k, v] of Object.entries(given)) metadata[k] = String(v);
  }
  const violations = Array.isArray(said["field_violations"])
    ? (said["field_violations"] as { field?: unknown; description?: unknown }[]).map((v) => ({
        field: String(v.field ?? ""),
        description: String(v.description ?? ""),
      }))
    : [];
  // MCP carries no status code: the reason says what happened.
  return new ActonceError(
    String(said["message"] ?? ""),
    status.UNKNOWN,
    said["reason"],
    failureClass as FailureClass,
    metadata,
    violations,
  );
}
